// SPDX-License-Identifier: Apache-2.0
// The gradient probe (nn/gradient_probe.h): the split of the stack input's
// gradient by the first sublayer each path enters, and the heads' shares of
// an attention input's gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "multihead/nn/encoder.h"
#include "multihead/nn/gradient_probe.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::random_tensor;

TransformerLayerConfig probe_layer(bool pre_ln) {
  TransformerLayerConfig c;
  c.d_model = 16;
  c.nhead = 4;
  c.dim_feedforward = 24;
  c.dropout = 0.0;
  c.norm_first = pre_ln;
  return c;
}

double norm(const Tensor& t) {
  double s = 0;
  for (float v : t.span_f32()) s += double(v) * v;
  return std::sqrt(s);
}

double max_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(double(a.f32()[i]) - b.f32()[i]));
  return m;
}

// Zeroes a layer's out_proj and linear2 (weights and biases): both its
// sublayers then output zeros whatever their input, so no gradient can
// enter the stack's input through them.
void silence(ParamStore& store, const std::string& layer) {
  for (const char* p : {"self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear2.weight", "linear2.bias"})
    for (float& v : store.data_span(*store.find(layer + p))) v = 0.0f;
}

struct ProbedStack {
  ParamStore store;
  TransformerEncoder enc;
  Rng rng{3};
  Tensor x, dy;
  explicit ProbedStack(bool pre_ln, std::int64_t layers = 3) : enc(store, "enc.", probe_layer(pre_ln), layers, true) {
    store.finalize();
    enc.init(rng);
    // LayerNorm weights away from 1, so that the norms' Jacobians are not symmetric in the features.
    for (const auto& e : store.entries())
      if (e.name.find("norm") != std::string::npos && e.name.ends_with("weight"))
        for (float& v : store.data_span(*store.find(e.name))) v = 0.5f + rng.uniform();
    x = random_tensor({2, 5, 16}, rng);
    dy = random_tensor({2, 5, 16}, rng);
  }
  // The input's gradient, with the probe filled.
  Tensor run(GradientProbe& p) {
    enc.set_backward_observer(&p);
    enc.forward(x, {}, ForwardContext{});
    Tensor g = enc.backward(dy);
    enc.release_saved();
    enc.set_backward_observer(nullptr);
    return g;
  }
};

class GradientProbeTest : public ::testing::TestWithParam<bool> {};

TEST_P(GradientProbeTest, PartsSumToTheInputGradientAndASilencedLayerAddsNone) {
  ProbedStack s(GetParam());
  GradientProbe full;
  const Tensor g = s.run(full);
  ASSERT_EQ(full.first_sublayer.size(), 3u);
  Tensor sum = full.residual_only.clone();
  for (const Tensor& t : full.first_sublayer) {
    EXPECT_GT(norm(t), 1e-3 * norm(g));  // every layer's sublayers take part
    add_inplace(sum, t);
  }
  EXPECT_LT(max_diff(sum, g), 1e-5 * (1 + norm(g)));

  // Layer 1 silenced: what passes it along the residual path is carried
  // exactly as its backward carries it, so nothing is left to enter it.
  silence(s.store, "enc.layers.1.");
  GradientProbe p;
  const Tensor g1 = s.run(p);
  EXPECT_LT(norm(p.first_sublayer[1]), 1e-5 * norm(g1));
  EXPECT_GT(norm(p.first_sublayer[0]), 1e-3 * norm(g1));
  EXPECT_GT(norm(p.first_sublayer[2]), 1e-3 * norm(g1));
  // Every layer silenced: the residual stream carries the whole gradient.
  silence(s.store, "enc.layers.0.");
  silence(s.store, "enc.layers.2.");
  GradientProbe none;
  const Tensor g0 = s.run(none);
  for (const Tensor& t : none.first_sublayer) EXPECT_LT(norm(t), 1e-5 * norm(g0));
  EXPECT_LT(max_diff(none.residual_only, g0), 1e-5 * norm(g0));
}

TEST_P(GradientProbeTest, HeadGramIsSymmetricWithTheHeadsSquaredNormsOnItsDiagonal) {
  ProbedStack s(GetParam(), 1);
  GradientProbe p;
  s.run(p);
  ASSERT_EQ(p.head_gram.size(), 1u);
  const std::vector<double>& g = p.head_gram[0];
  ASSERT_EQ(g.size(), 16u);
  for (int a = 0; a < 4; ++a) {
    EXPECT_GT(g[a * 4 + a], 0);
    for (int b = 0; b < 4; ++b) {
      EXPECT_DOUBLE_EQ(g[a * 4 + b], g[b * 4 + a]);
      EXPECT_LE(std::fabs(g[a * 4 + b]), std::sqrt(g[a * 4 + a] * g[b * 4 + b]) * (1 + 1e-12));  // Cauchy-Schwarz
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Norms, GradientProbeTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "PreLN" : "PostLN"; });

TEST(GradientProbe, RefusesBf16) {
  ParamStore store;
  TransformerEncoder enc(store, "enc.", probe_layer(false), 1, false);
  store.finalize();
  Rng rng(1);
  enc.init(rng);
  GradientProbe p;
  enc.set_backward_observer(&p);
  Tensor x = random_tensor({1, 3, 16}, rng);
  enc.forward(x, {}, eval_context(Precision::kBF16));
  EXPECT_THROW(enc.backward(random_tensor({1, 3, 16}, rng)), ConfigError);
}

// Keeps the heads' shares a self-attention's backward shows it.
struct SharesKept : BackwardObserver {
  Tensor shares;
  int calls = 0;
  bool wants_head_shares() const override { return true; }
  void head_shares(const MultiheadAttention&, const Tensor& s) override { shares = s.clone(), ++calls; }
};

// Each head's share of the input gradient is the gradient the input gets
// with every other head masked (their outputs and gradients zero), and the
// shares sum to the whole.
TEST(MultiheadAttentionHeadShares, EachIsTheGradientWithTheOtherHeadsMasked) {
  MultiheadAttentionConfig cfg;
  cfg.embed_dim = 16;
  cfg.num_heads = 4;
  ParamStore store;
  MultiheadAttention mha(store, "attn.", cfg);
  store.finalize();
  Rng rng(5);
  mha.init(rng);
  for (float& v : store.data_span(*store.find("attn.in_proj_bias"))) v = 0.1f * rng.normal();
  const Tensor x = random_tensor({2, 6, 16}, rng), dy = random_tensor({2, 6, 16}, rng);
  MultiheadAttentionCall call;
  call.causal = CausalAlign::kTopLeft;
  SharesKept kept;
  mha.set_backward_observer(&kept);
  mha.forward_self(x, nullptr, nullptr, call);
  const Tensor dx = mha.backward(dy).query;
  const Tensor shares = kept.shares.clone();
  ASSERT_EQ(shares.shape(), (Shape{4, 2, 6, 16}));
  mha.set_backward_observer(nullptr);
  const std::int64_t n = dx.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int h = 0; h < 4; ++h) sum += shares.f32()[h * n + i];
    EXPECT_NEAR(sum, dx.f32()[i], 1e-5 * (1 + std::fabs(dx.f32()[i]))) << i;
  }
  for (int h = 0; h < 4; ++h) {
    std::vector<std::uint8_t> others(4, 1);
    others[static_cast<std::size_t>(h)] = 0;
    mha.set_head_mask(others);
    mha.forward_self(x, nullptr, nullptr, call);
    const Tensor alone = mha.backward(dy).query;
    EXPECT_EQ(kept.calls, 1);  // no observer: nothing shown
    for (std::int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(shares.f32()[h * n + i], alone.f32()[i], 1e-5 * (1 + std::fabs(alone.f32()[i]))) << h << " " << i;
  }
}

}  // namespace
}  // namespace multihead
