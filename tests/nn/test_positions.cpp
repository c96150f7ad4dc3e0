// SPDX-License-Identifier: Apache-2.0
// Positional encodings: RoPE, ALiBi and Shaw relative positions inside
// MultiheadAttention, and absolute positions in the models.
#include <gtest/gtest.h>

#include <cmath>

#include "multihead/kernels/positions.h"
#include "multihead/nn/models.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::random_tensor;

TEST(Alibi, SlopesFollowThePaper) {
  auto s8 = alibi_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(s8[static_cast<std::size_t>(h)], std::pow(2.0f, -(h + 1.0f)));
  // 6 heads: the 4-head slopes, then every other slope of the 8-head set.
  auto s6 = alibi_slopes(6);
  const float want[] = {0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
  for (int h = 0; h < 6; ++h) EXPECT_FLOAT_EQ(s6[static_cast<std::size_t>(h)], want[h]);
}

TEST(Rope, RotationIsOrthogonalAndRelative) {
  // Rotating back restores the input; rotation preserves norms; and the score
  // of a rotated (q, k) pair depends only on the distance between them.
  Rng rng(1);
  const std::int64_t L = 6, D = 8;
  std::vector<double> x(L * D);
  for (double& v : x) v = rng.normal();
  std::vector<double> y = x;
  HeadsView<double> view{y.data(), L * D, D, D};
  rope_rotate(view, 1, L, 1, D, 0, 10000.0, false);
  for (std::int64_t l = 0; l < L; ++l) {
    double n0 = 0, n1 = 0;
    for (std::int64_t e = 0; e < D; ++e) n0 += x[l * D + e] * x[l * D + e], n1 += y[l * D + e] * y[l * D + e];
    EXPECT_NEAR(n0, n1, 1e-12);
  }
  rope_rotate(view, 1, L, 1, D, 0, 10000.0, true);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-12);
  // Same q and k vectors placed at (1, 3) and at (4, 6): equal scores.
  auto score = [&](std::int64_t pq, std::int64_t pk) {
    std::vector<double> q(x.begin(), x.begin() + D), k(x.begin() + D, x.begin() + 2 * D);
    rope_rotate(HeadsView<double>{q.data(), D, D, D}, 1, 1, 1, D, pq, 10000.0, false);
    rope_rotate(HeadsView<double>{k.data(), D, D, D}, 1, 1, 1, D, pk, 10000.0, false);
    double s = 0;
    for (std::int64_t e = 0; e < D; ++e) s += q[e] * k[e];
    return s;
  };
  EXPECT_NEAR(score(1, 3), score(4, 6), 1e-12);
  EXPECT_GT(std::fabs(score(1, 3) - score(1, 5)), 1e-6);
}

// A RopeTable's pairs rotate as rope_rotate computing its own, bit for bit:
// from a cold table, at positions past what it holds (it grows), backwards,
// and after the head size or theta changes (it starts over).
TEST(Rope, KeptTableRotatesAsComputedPairs) {
  Rng rng(4);
  RopeTable table;
  struct Call {
    std::int64_t offset, L, D;
    double theta;
    bool inverse;
  };
  for (const Call& c : {Call{0, 5, 8, 1e4, false}, Call{3, 9, 8, 1e4, true}, Call{40, 3, 8, 1e4, false},
                        Call{2, 4, 16, 1e4, false}, Call{2, 4, 16, 500.0, true}}) {
    const std::int64_t B = 2, H = 3, ld = H * c.D;
    std::vector<float> x(static_cast<std::size_t>(B * c.L * ld));
    for (float& v : x) v = rng.normal();
    std::vector<float> want = x;
    rope_rotate(HeadsView<float>{want.data(), c.L * ld, ld, c.D}, B, c.L, H, c.D, c.offset, c.theta, c.inverse);
    rope_rotate(HeadsView<float>{x.data(), c.L * ld, ld, c.D}, B, c.L, H, c.D, table.rows(c.offset, c.L, c.D, c.theta),
                c.inverse);
    EXPECT_EQ(x, want) << "offset " << c.offset << ", D " << c.D << ", theta " << c.theta;
  }
  EXPECT_THROW(table.rows(0, 2, 7, 1e4), ConfigError);
}

struct PositionCase {
  const char* name;
  AttentionPositions positions;
  bool relative_values;
};

void PrintTo(const PositionCase& c, std::ostream* os) { *os << c.name; }

class MhaPositions : public ::testing::TestWithParam<PositionCase> {};

// Whole-module gradients by finite differences (float, so loose tolerances;
// the kernels' exact checks in double are in tests/kernels), for every
// parameter including the relative embeddings.
TEST_P(MhaPositions, GradientsMatchFiniteDifferences) {
  MultiheadAttentionConfig c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.positions = GetParam().positions;
  c.relative_clip = 2;
  c.relative_values = GetParam().relative_values;
  ParamStore store;
  MultiheadAttention mha(store, "", c);
  store.finalize();
  Rng rng(4);
  mha.init(rng);
  Tensor x = random_tensor({2, 5, 8}, rng), g = random_tensor({2, 5, 8}, rng);
  MultiheadAttentionCall call;
  call.causal = CausalAlign::kTopLeft;
  auto loss = [&] { return test::dot_loss(mha.forward_self(x, nullptr, nullptr, call).output, g); };
  loss();
  Tensor gx = mha.backward(g).query;
  test::expect_float_gradients(loss, store.all_data(), store.all_grads(), 3, "parameter");
  test::expect_float_gradients(loss, x.span_f32(), gx.span_f32(), 3, "input");
  if (GetParam().positions == AttentionPositions::kRelative) {
    EXPECT_TRUE(store.find("relative_key").has_value());
    EXPECT_EQ(store.find("relative_value").has_value(), GetParam().relative_values);
  }
}

TEST_P(MhaPositions, FusedEqualsReference) {
  MultiheadAttentionConfig c;
  c.embed_dim = 16;
  c.num_heads = 4;
  c.positions = GetParam().positions;
  c.relative_clip = 3;
  c.relative_values = GetParam().relative_values;
  ParamStore s1, s2;
  MultiheadAttention a(s1, "", c), b(s2, "", c);
  s1.finalize(), s2.finalize();
  Rng r1(6), r2(6);
  a.init(r1), b.init(r2);
  Rng rng(7);
  Tensor x = random_tensor({2, 40, 16}, rng), g = random_tensor({2, 40, 16}, rng);
  MultiheadAttentionCall fused, ref;
  ref.impl = AttentionImpl::kReference;
  fused.tiles = {16, 16, TileGemm::kMicroKernel};
  auto oa = a.forward_self(x, nullptr, nullptr, fused), ob = b.forward_self(x, nullptr, nullptr, ref);
  EXPECT_TRUE(test::all_close(oa.output, ob.output));
  EXPECT_TRUE(test::all_close(oa.weights, ob.weights));
  EXPECT_TRUE(test::all_close(a.backward(g).query, b.backward(g).query));
  EXPECT_TRUE(test::all_close_v(s1.all_grads(), s2.all_grads(), 1e-5, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Kinds, MhaPositions,
                         ::testing::Values(PositionCase{"rope", AttentionPositions::kRope, false},
                                           PositionCase{"alibi", AttentionPositions::kAlibi, false},
                                           PositionCase{"relative_keys", AttentionPositions::kRelative, false},
                                           PositionCase{"relative_keys_values", AttentionPositions::kRelative, true}),
                         [](const ::testing::TestParamInfo<PositionCase>& p) { return std::string(p.param.name); });

TEST(AbsolutePositions, SinusoidalTableAndLengthLimit) {
  ParamStore store;
  AbsolutePositions pos(store, "pos_embedding.", PositionKind::kSinusoidal, 4, 6);
  store.finalize();
  Tensor x({1, 4, 6});
  pos.forward_inplace(x);
  // pos 1, i = 2: sin(1 / 10000^(2/6)); i = 3: cos of the same.
  EXPECT_NEAR(x.f32()[6 + 2], std::sin(1.0 / std::pow(10000.0, 2.0 / 6)), 1e-6);
  EXPECT_NEAR(x.f32()[6 + 3], std::cos(1.0 / std::pow(10000.0, 2.0 / 6)), 1e-6);
  Tensor longer({1, 5, 6});
  try {
    pos.forward_inplace(longer);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "sequence length 5 exceeds the positional table (max_len 4)");
  }
  pos.extend(8);
  EXPECT_NO_THROW(pos.forward_inplace(longer));
  EXPECT_NEAR(longer.f32()[4 * 6], std::sin(4.0), 1e-6);
}

TEST(Models, EveryPositionKindTrainsWithoutNaN) {
  for (const char* kind : {"none", "sinusoidal", "learned", "relative", "rope", "alibi"}) {
    ModelConfig mc;
    mc.vocab_size = 20;
    mc.num_layers = 2;
    mc.layer.d_model = 16;
    mc.layer.nhead = 2;
    mc.layer.dim_feedforward = 16;
    mc.max_len = 16;
    mc.relative_clip = 3;
    mc.positions = parse_position_kind(kind);
    for (bool lm : {false, true}) {
      ParamStore store;
      std::unique_ptr<SequenceClassifier> cls;
      std::unique_ptr<LanguageModel> gen;
      mc.tie_embeddings = lm;
      if (lm) gen = std::make_unique<LanguageModel>(store, mc);
      else cls = std::make_unique<SequenceClassifier>(store, mc);
      store.finalize();
      Rng rng(2);
      if (lm) gen->init(rng);
      else cls->init(rng);
      Tensor ids({3, 10}, DType::kI64);
      for (std::int64_t i = 0; i < 30; ++i) ids.data<std::int64_t>()[i] = i % 20;
      ForwardContext ctx{true, 1, 0};
      Tensor out = lm ? gen->forward(ids, ctx) : cls->forward(ids, nullptr, ctx);
      Tensor g(out.shape());
      g.fill(0.01f);
      if (lm) gen->backward(g);
      else cls->backward(g);
      double norm = 0;
      for (float v : store.all_grads()) norm += double(v) * v;
      EXPECT_TRUE(std::isfinite(norm) && norm > 0) << kind << (lm ? " language model" : " classifier");
    }
  }
  EXPECT_THROW(parse_position_kind("absolute"), ConfigError);
}

}  // namespace
}  // namespace multihead
