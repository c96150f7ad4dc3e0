// SPDX-License-Identifier: Apache-2.0
// Incremental decoding and sampling.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <tuple>

#include "multihead/nn/multi_head_attention.h"
#include "multihead/tasks/generation.h"
#include "test_util.h"

namespace multihead {
namespace {

class KvCacheEquivalence : public ::testing::TestWithParam<std::tuple<const char*, Precision>> {};

// The logits of token-by-token decoding with a KV cache equal the rows of
// one uncached causal forward over the same sequence, in every precision (in
// 16 bits, up to a rounding step the two orders of summation can land on
// either side of).
TEST_P(KvCacheEquivalence, CachedLogitsEqualUncached) {
  const auto [positions, precision] = GetParam();
  ModelConfig mc;
  mc.vocab_size = 23;
  mc.num_layers = 2;
  mc.layer.d_model = 16;
  mc.layer.nhead = 4;
  mc.layer.dim_feedforward = 24;
  mc.layer.norm_first = std::string(positions) == "rope";  // pre-LN too
  mc.max_len = 32;
  mc.relative_clip = 3;
  mc.positions = parse_position_kind(positions);
  mc.tie_embeddings = std::string(positions) == "alibi" || std::string(positions) == "none";  // both output layers
  ParamStore store;
  LanguageModel lm(store, mc);
  store.finalize();
  Rng rng(3);
  lm.init(rng);
  std::vector<std::int64_t> seq = {2, 5, 7, 11, 3, 9, 9, 1, 20, 4, 6, 13};
  const std::int64_t T = static_cast<std::int64_t>(seq.size());
  Tensor ids = Tensor::from_i64({1, T}, seq);
  Tensor full = lm.forward(ids, eval_context(precision));
  lm.release_saved();
  std::vector<KvCache> caches;
  // A prompt of 5 tokens, then one at a time.
  std::vector<Tensor> parts;
  parts.push_back(lm.forward_cached(Tensor::from_i64({1, 5}, std::vector<std::int64_t>(seq.begin(), seq.begin() + 5)),
                                    caches, T, precision));
  for (std::int64_t t = 5; t < T; ++t)
    parts.push_back(lm.forward_cached(
        Tensor::from_i64({1, 1}, std::vector<std::int64_t>{seq[static_cast<std::size_t>(t)]}), caches, T, precision));
  std::vector<float> cached;
  for (const auto& p : parts) cached.insert(cached.end(), p.f32(), p.f32() + p.numel());
  const double tol = precision == Precision::kF32 ? 1e-5 : precision == Precision::kF16 ? 2e-3 : 2e-2;
  EXPECT_TRUE(test::all_close_v(cached, full.span_f32(), tol, 10 * tol)) << positions;
  EXPECT_EQ(caches[0].length, T);
  EXPECT_EQ(caches[0].k.dtype(), storage_dtype(precision));
}

INSTANTIATE_TEST_SUITE_P(Positions, KvCacheEquivalence,
                         ::testing::Combine(::testing::Values("sinusoidal", "learned", "relative", "rope", "alibi",
                                                              "none"),
                                            ::testing::Values(Precision::kF32, Precision::kBF16, Precision::kF16)),
                         [](const auto& param_info) {
                           return std::string(std::get<0>(param_info.param)) + "_" +
                                  std::string(precision_name(std::get<1>(param_info.param)));
                         });

std::string positions_label(AttentionPositions p) {
  switch (p) {
    case AttentionPositions::kNone: return "none";
    case AttentionPositions::kRope: return "rope";
    case AttentionPositions::kAlibi: return "alibi";
    case AttentionPositions::kRelative: return "relative";
  }
  return "?";
}

class CachedWeights : public ::testing::TestWithParam<std::tuple<AttentionPositions, std::int64_t, Precision>> {};

// The per-head weights of cached decoding (a prompt of 4 positions, then one
// at a time) are the rows of one uncached causal forward's, zero after each
// query's own position.
TEST_P(CachedWeights, AreTheRowsOfTheUncachedForward) {
  const auto [positions, kv_heads, precision] = GetParam();
  MultiheadAttentionConfig c;
  c.embed_dim = 16, c.num_heads = 4, c.num_kv_heads = kv_heads, c.positions = positions, c.relative_clip = 3;
  ParamStore store;
  MultiheadAttention mha(store, "", c);
  store.finalize();
  Rng rng(5);
  mha.init(rng);
  const std::int64_t T = 9, H = 4, E = 16;
  const Tensor x = test::random_tensor({1, T, E}, rng);
  MultiheadAttentionCall call;
  call.average_attn_weights = false;
  call.causal = CausalAlign::kTopLeft;
  call.precision = precision;
  const Tensor full = mha.forward_self(x, nullptr, nullptr, call).weights;  // (1, H, T, T)
  mha.release_saved();
  ASSERT_EQ(full.shape(), (Shape{1, H, T, T}));
  const double tol = precision == Precision::kF32 ? 1e-6 : 1e-2;
  KvCache cache;
  std::int64_t t0 = 0;
  for (const std::int64_t n : {4, 1, 1, 1, 1, 1}) {
    Tensor part = Tensor::from({1, n, E}, std::span(x.f32() + t0 * E, static_cast<std::size_t>(n * E)));
    Tensor w;
    mha.forward_cached(part, cache, T, precision, &w);
    ASSERT_EQ(w.shape(), (Shape{1, H, n, t0 + n}));
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t k = 0; k < t0 + n; ++k) {
          const float got = w.f32()[(h * n + r) * (t0 + n) + k];
          if (k > t0 + r) EXPECT_EQ(got, 0.0f) << "head " << h << " query " << t0 + r << " key " << k;
          else EXPECT_NEAR(got, full.f32()[(h * T + t0 + r) * T + k], tol) << "head " << h << " query " << t0 + r;
        }
    t0 += n;
  }
  EXPECT_EQ(cache.length, T);
}

INSTANTIATE_TEST_SUITE_P(Positions, CachedWeights,
                         ::testing::Combine(::testing::Values(AttentionPositions::kNone, AttentionPositions::kRope,
                                                              AttentionPositions::kAlibi,
                                                              AttentionPositions::kRelative),
                                            ::testing::Values(std::int64_t{0}, std::int64_t{2}),
                                            ::testing::Values(Precision::kF32, Precision::kBF16)),
                         [](const auto& p) {
                           return positions_label(std::get<0>(p.param)) + (std::get<1>(p.param) ? "_gqa_" : "_") +
                                  std::string(precision_name(std::get<2>(p.param)));
                         });

TEST(CachedWeights, LinearAttentionHasNoneToCapture) {
  MultiheadAttentionConfig c;
  c.embed_dim = 8, c.num_heads = 2, c.variant = AttentionVariant::kLinear;
  ParamStore store;
  MultiheadAttention mha(store, "", c);
  store.finalize();
  Rng rng(1);
  mha.init(rng);
  KvCache cache;
  Tensor w;
  EXPECT_THROW(mha.forward_cached(test::random_tensor({1, 2, 8}, rng), cache, 4, Precision::kF32, &w), ConfigError);
  EXPECT_NO_THROW(mha.forward_cached(test::random_tensor({1, 2, 8}, rng), cache, 4, Precision::kF32));
}

// A language model of d_model 8 and two heads, initialised from seed.
ModelConfig tiny_lm_config(std::int64_t vocab, std::int64_t layers, std::int64_t max_len, PositionKind positions) {
  ModelConfig mc;
  mc.vocab_size = vocab;
  mc.num_layers = layers;
  mc.layer.d_model = 8;
  mc.layer.nhead = 2;
  mc.layer.dim_feedforward = 8;
  mc.max_len = max_len;
  mc.positions = positions;
  return mc;
}

struct TinyLm {
  TinyLm(const ModelConfig& mc, std::uint64_t seed) : lm(store, mc) {
    store.finalize();
    Rng rng(seed);
    lm.init(rng);
  }
  ParamStore store;
  LanguageModel lm;
};

TEST(Generation, BoundedContextRestartsInsideTheTrainedWindow) {
  // Absolute positions: a window past max_len 8 would be an error.
  TinyLm tiny(tiny_lm_config(11, 1, 8, PositionKind::kLearned), 1);
  LanguageModel& lm = tiny.lm;
  SamplingConfig greedy;
  greedy.temperature = 0;
  auto out = generate(lm, {2, 5, 6}, 30, greedy, 8);
  EXPECT_EQ(out.size(), 33u);
  EXPECT_THROW(generate(lm, {2, 5, 6}, 30, greedy, 0), ConfigError);  // unbounded: past max_len
  // Within the window, bounded and unbounded decoding agree.
  EXPECT_EQ(generate(lm, {2, 5, 6}, 5, greedy, 8), generate(lm, {2, 5, 6}, 5, greedy, 0));
}

// Prompts continued together, a batch row each, give what each gives alone
// (greedy), across the restarts of a bounded context too; sampled, row 0
// draws what generate draws and the rows draw from streams of their own.
TEST(Generation, ABatchOfPromptsGivesEachPromptsContinuation) {
  TinyLm tiny(tiny_lm_config(13, 2, 64, PositionKind::kRope), 4);
  LanguageModel& lm = tiny.lm;
  const std::vector<std::vector<std::int64_t>> prompts = {{2, 5, 6}, {7, 1, 1}, {12, 3, 0}};
  SamplingConfig greedy;
  greedy.temperature = 0;
  for (const std::int64_t context : {std::int64_t{0}, std::int64_t{8}}) {
    const auto together = generate_batch(lm, prompts, 12, greedy, context);
    ASSERT_EQ(together.size(), prompts.size());
    for (std::size_t r = 0; r < prompts.size(); ++r)
      EXPECT_EQ(together[r], generate(lm, prompts[r], 12, greedy, context)) << "row " << r << ", context " << context;
  }
  SamplingConfig sampled;
  sampled.seed = 9;
  const std::vector<std::vector<std::int64_t>> same(3, prompts[0]);
  const auto rows = generate_batch(lm, same, 12, sampled);
  EXPECT_EQ(rows[0], generate(lm, prompts[0], 12, sampled));
  EXPECT_TRUE(rows[1] != rows[0] || rows[2] != rows[0]);  // each row its own stream
  EXPECT_THROW(generate_batch(lm, {{2, 5, 6}, {2, 5}}, 3, greedy), ConfigError);
  EXPECT_THROW(generate_batch(lm, {}, 3, greedy), ConfigError);
}

TEST(Sampling, GreedyTopKTopPAndTemperature) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f};
  Rng rng(1);
  SamplingConfig greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sample_token(logits.data(), 4, greedy, rng), 1);
  SamplingConfig top1;
  top1.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(logits.data(), 4, top1, rng), 1);
  // top_p = 0.5: token 1 alone holds about 0.66 of the mass.
  SamplingConfig nucleus;
  nucleus.top_p = 0.5;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(logits.data(), 4, nucleus, rng), 1);
  // Plain sampling follows the softmax: token 2 about 24% of the time.
  SamplingConfig plain;
  int count2 = 0;
  for (int i = 0; i < 4000; ++i) count2 += sample_token(logits.data(), 4, plain, rng) == 2;
  const double p2 = std::exp(2.0) / (std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(-1.0));
  EXPECT_NEAR(count2 / 4000.0, p2, 0.025);
  SamplingConfig bad;
  bad.top_p = 0;
  EXPECT_THROW(sample_token(logits.data(), 4, bad, rng), ConfigError);
}

}  // namespace
}  // namespace multihead
