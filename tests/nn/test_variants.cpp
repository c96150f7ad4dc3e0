// SPDX-License-Identifier: Apache-2.0
// Attention variants in MultiheadAttention: grouped-query heads against
// repeated heads, gradients by finite differences, and cached decoding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "multihead/tasks/generation.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::random_tensor;

TEST(GroupedQuery, EqualsMultiHeadWithRepeatedKeyValueHeads) {
  const std::int64_t E = 16, H = 4, KVH = 2, D = E / H;
  MultiheadAttentionConfig g;
  g.embed_dim = E, g.num_heads = H, g.num_kv_heads = KVH;
  MultiheadAttentionConfig f = g;
  f.num_kv_heads = 0;
  ParamStore sg, sf;
  MultiheadAttention gqa(sg, "", g), full(sf, "", f);
  sg.finalize(), sf.finalize();
  Rng rng(1);
  gqa.init(rng);
  EXPECT_EQ(sg.entry(*sg.find("in_proj_weight")).shape, (Shape{E + 2 * KVH * D, E}));
  // Full weights: q rows as they are; key/value head h copies grouped head h / 2.
  const float* wg = sg.data(*sg.find("in_proj_weight"));
  const float* bg = sg.data(*sg.find("in_proj_bias"));
  float* wf = sf.data(*sf.find("in_proj_weight"));
  float* bf = sf.data(*sf.find("in_proj_bias"));
  auto src_row = [&](std::int64_t r) {  // row r of the full (3E, E) matrix -> row of the grouped one
    if (r < E) return r;
    const std::int64_t part = (r - E) / E, within = (r - E) % E, head = within / D, e = within % D;
    return E + part * KVH * D + (head / (H / KVH)) * D + e;
  };
  for (std::int64_t r = 0; r < 3 * E; ++r) {
    std::memcpy(wf + r * E, wg + src_row(r) * E, sizeof(float) * E);
    bf[r] = bg[src_row(r)];
  }
  std::memcpy(sf.data(*sf.find("out_proj.weight")), sg.data(*sg.find("out_proj.weight")), sizeof(float) * E * E);
  std::memcpy(sf.data(*sf.find("out_proj.bias")), sg.data(*sg.find("out_proj.bias")), sizeof(float) * E);
  Tensor x = random_tensor({2, 7, E}, rng), dy = random_tensor({2, 7, E}, rng);
  MultiheadAttentionCall call;
  call.causal = CausalAlign::kTopLeft;
  auto og = gqa.forward_self(x, nullptr, nullptr, call), of = full.forward_self(x, nullptr, nullptr, call);
  EXPECT_TRUE(test::all_close(og.output, of.output, 1e-6, 1e-5));
  EXPECT_TRUE(test::all_close(og.weights, of.weights, 1e-6, 1e-5));
  EXPECT_TRUE(test::all_close(gqa.backward(dy).query, full.backward(dy).query, 1e-5, 1e-4));
  // A grouped key/value row's gradient is the sum over the rows that copy it.
  std::vector<double> want(static_cast<std::size_t>((E + 2 * KVH * D) * E), 0.0);
  const float* gf = sf.grad(*sf.find("in_proj_weight"));
  for (std::int64_t r = 0; r < 3 * E; ++r)
    for (std::int64_t c = 0; c < E; ++c) want[static_cast<std::size_t>(src_row(r) * E + c)] += gf[r * E + c];
  const float* gg = sg.grad(*sg.find("in_proj_weight"));
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(gg[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i])) << i;
}

struct VariantCase {
  const char* name;
  AttentionVariant variant;
  std::int64_t kv_heads;
  bool causal;
};
void PrintTo(const VariantCase& c, std::ostream* os) { *os << c.name; }

class Variants : public ::testing::TestWithParam<VariantCase> {};

TEST_P(Variants, GradientsMatchFiniteDifferences) {
  const VariantCase& vc = GetParam();
  MultiheadAttentionConfig c;
  c.embed_dim = 8, c.num_heads = 4, c.num_kv_heads = vc.kv_heads, c.variant = vc.variant;
  c.window_left = 2, c.window_right = 1, c.sparse_block = 3, c.sparse_neighbours = 1, c.global_tokens = 1;
  ParamStore store;
  MultiheadAttention mha(store, "", c);
  store.finalize();
  Rng rng(4);
  mha.init(rng);
  Tensor x = random_tensor({2, 9, 8}, rng), g = random_tensor({2, 9, 8}, rng);
  Tensor pad({2, 9}, DType::kBool);
  pad.data<std::uint8_t>()[9 + 8] = 1;  // the last key of batch element 1
  MultiheadAttentionCall call;
  call.need_weights = vc.variant != AttentionVariant::kLinear;
  call.causal = vc.causal ? CausalAlign::kTopLeft : CausalAlign::kNone;
  auto loss = [&] { return test::dot_loss(mha.forward_self(x, &pad, nullptr, call).output, g); };
  loss();
  Tensor gx = mha.backward(g).query;
  test::expect_float_gradients(loss, store.all_data(), store.all_grads(), 5, "parameter");
  test::expect_float_gradients(loss, x.span_f32(), gx.span_f32(), 7, "input");
}

// Language models over every variant: cached decoding equals the uncached
// causal forward (the linear variant through its recurrent form).
TEST_P(Variants, CachedDecodingEqualsUncached) {
  const VariantCase& vc = GetParam();
  ModelConfig mc;
  mc.vocab_size = 17, mc.num_layers = 2, mc.layer.d_model = 16, mc.layer.nhead = 4, mc.layer.dim_feedforward = 16;
  mc.layer.pattern.variant = vc.variant, mc.layer.pattern.num_kv_heads = vc.kv_heads;
  mc.layer.pattern.window_left = 3, mc.layer.pattern.sparse_block = 4, mc.layer.pattern.global_tokens = 1;
  mc.positions = PositionKind::kRope;
  ParamStore store;
  LanguageModel lm(store, mc);
  store.finalize();
  Rng rng(2);
  lm.init(rng);
  std::vector<std::int64_t> seq = {2, 5, 7, 11, 3, 9, 9, 1, 16, 4, 6, 13};
  const std::int64_t T = static_cast<std::int64_t>(seq.size());
  Tensor full = lm.forward(Tensor::from_i64({1, T}, seq), ForwardContext{});
  lm.release_saved();
  std::vector<KvCache> caches;
  std::vector<float> cached;
  for (std::int64_t t = 0; t < T; ++t) {
    Tensor step = lm.forward_cached(
        Tensor::from_i64({1, 1}, std::vector<std::int64_t>{seq[static_cast<std::size_t>(t)]}), caches, T);
    cached.insert(cached.end(), step.f32(), step.f32() + step.numel());
  }
  EXPECT_TRUE(test::all_close_v(cached, full.span_f32(), 1e-5, 1e-4));
  if (vc.variant != AttentionVariant::kLinear && vc.kv_heads > 0) {
    EXPECT_EQ(caches[0].k.dim(2), vc.kv_heads * 4);  // the cache holds only the key/value heads
  }
}

INSTANTIATE_TEST_SUITE_P(All, Variants,
                         ::testing::Values(VariantCase{"full_gqa", AttentionVariant::kFull, 2, false},
                                           VariantCase{"full_mqa_causal", AttentionVariant::kFull, 1, true},
                                           VariantCase{"sliding_window", AttentionVariant::kSlidingWindow, 0, false},
                                           VariantCase{"sliding_window_gqa_causal", AttentionVariant::kSlidingWindow, 2,
                                                       true},
                                           VariantCase{"block_sparse", AttentionVariant::kBlockSparse, 0, false},
                                           VariantCase{"linear", AttentionVariant::kLinear, 0, false},
                                           VariantCase{"linear_causal_gqa", AttentionVariant::kLinear, 2, true}),
                         [](const ::testing::TestParamInfo<VariantCase>& p) { return std::string(p.param.name); });

TEST(Variants, BadConfigsAreClearErrors) {
  MultiheadAttentionConfig c;
  c.embed_dim = 8, c.num_heads = 4, c.num_kv_heads = 3;
  ParamStore s;
  EXPECT_THROW(MultiheadAttention(s, "", c), ConfigError);
  EXPECT_THROW(parse_attention_variant("sparse"), ConfigError);
  c.num_kv_heads = 0;
  c.variant = AttentionVariant::kLinear;
  ParamStore s2;
  MultiheadAttention lin(s2, "", c);
  s2.finalize();
  Rng rng(1);
  lin.init(rng);
  Tensor x = random_tensor({1, 3, 8}, rng);
  MultiheadAttentionCall call;  // need_weights defaults to true
  try {
    lin.forward_self(x, nullptr, nullptr, call);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "linear attention has no attention weights; call with need_weights off");
  }
}

}  // namespace
}  // namespace multihead
