// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cmath>

#include "multihead/nn/multi_head_attention.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close;
using test::all_close_v;
using test::random_tensor;

struct Mha {
  ParamStore store;
  MultiheadAttention mha;
  Mha(const MultiheadAttentionConfig& cfg, std::uint64_t seed = 0) : mha(store, "", cfg) {
    store.finalize();
    Rng rng(seed);
    mha.init(rng);
  }
};

MultiheadAttentionConfig cfg_of(std::int64_t E, std::int64_t H) {
  MultiheadAttentionConfig c;
  c.embed_dim = E;
  c.num_heads = H;
  return c;
}

TEST(MhaConfig, BadSizesAreClearErrors) {
  ParamStore store;
  try {
    MultiheadAttention m(store, "", cfg_of(10, 3));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "embed_dim (10) must be divisible by num_heads (3)");
  }
  EXPECT_THROW(MultiheadAttention(store, "", cfg_of(8, 0)), ConfigError);
  EXPECT_THROW(MultiheadAttention(store, "", cfg_of(0, 1)), ConfigError);
  auto c = cfg_of(8, 2);
  c.dropout = 1.5;
  EXPECT_THROW(MultiheadAttention(store, "", c), ConfigError);
  // kdim 0 is PyTorch's None (embed_dim), and the message says 0 passes.
  auto k = cfg_of(8, 2);
  k.kdim = 0;
  EXPECT_NO_THROW(MultiheadAttention(store, "k0.", k));
  k.kdim = -1;
  try {
    MultiheadAttention m(store, "k1.", k);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "kdim (-1) and vdim (0) must be >= 0 (0: embed_dim, as PyTorch's None)");
  }
}

TEST(Mha, DeclaresPyTorchStateDictNames) {
  auto c = cfg_of(8, 2);
  c.add_bias_kv = true;
  ParamStore s1;
  MultiheadAttention a(s1, "self_attn.", c);
  std::vector<std::string> names;
  for (const auto& e : s1.entries()) names.push_back(e.name + shape_str(e.shape));
  EXPECT_EQ(names, (std::vector<std::string>{"self_attn.in_proj_weight(24, 8)", "self_attn.in_proj_bias(24,)",
                                             "self_attn.out_proj.weight(8, 8)", "self_attn.out_proj.bias(8,)",
                                             "self_attn.bias_k(1, 1, 8)", "self_attn.bias_v(1, 1, 8)"}));
  c = cfg_of(8, 2);
  c.kdim = 3;
  c.vdim = 5;
  c.bias = false;
  ParamStore s2;
  MultiheadAttention b(s2, "", c);
  names.clear();
  for (const auto& e : s2.entries()) names.push_back(e.name + shape_str(e.shape));
  EXPECT_EQ(names, (std::vector<std::string>{"q_proj_weight(8, 8)", "k_proj_weight(8, 3)", "v_proj_weight(8, 5)",
                                             "out_proj.weight(8, 8)"}));
}

TEST(Mha, InitialisationFollowsPyTorch) {
  auto c = cfg_of(64, 4);
  c.add_bias_kv = true;
  Mha m(c, 1);
  auto span = [&](const char* n) { return m.store.data_span(*m.store.find(n)); };
  auto max_abs = [](std::span<float> s) {
    float x = 0;
    for (float v : s) x = std::max(x, std::fabs(v));
    return x;
  };
  const float xavier = std::sqrt(6.0f / (64 + 3 * 64));
  EXPECT_LE(max_abs(span("in_proj_weight")), xavier);
  EXPECT_GT(max_abs(span("in_proj_weight")), 0.95f * xavier);  // 12288 draws fill the range
  const float linear = 1.0f / std::sqrt(64.0f);
  EXPECT_LE(max_abs(span("out_proj.weight")), linear);
  EXPECT_GT(max_abs(span("out_proj.weight")), 0.95f * linear);
  EXPECT_EQ(max_abs(span("in_proj_bias")), 0.0f);
  EXPECT_EQ(max_abs(span("out_proj.bias")), 0.0f);
  double ss = 0;
  for (float v : span("bias_k")) ss += double(v) * v;
  EXPECT_NEAR(std::sqrt(ss / 64), std::sqrt(1.0 / 64), 0.3 * std::sqrt(1.0 / 64));  // xavier_normal std
}

TEST(Mha, ShapeMismatchesNameTheSizes) {
  Mha m(cfg_of(8, 2));
  Rng rng(0);
  Tensor q = random_tensor({2, 3, 8}, rng), bad = random_tensor({2, 3, 7}, rng);
  Tensor k = random_tensor({3, 4, 8}, rng);
  MultiheadAttentionCall call;
  try {
    m.mha.forward_self(bad, nullptr, nullptr, call);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "query has shape (2, 3, 7), expected (B, L, 8)");
  }
  try {
    m.mha.forward(q, k, k, nullptr, nullptr, call);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "key has shape (3, 4, 8), expected (2, S, 8)");
  }
  Tensor kpm({2, 4}, DType::kBool);
  try {
    m.mha.forward_self(q, &kpm, nullptr, call);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "key_padding_mask has shape (2, 4), expected (2, 3)");
  }
  Tensor am({5, 3, 3});
  try {
    m.mha.forward_self(q, nullptr, &am, call);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "attn_mask has shape (5, 3, 3), expected (3, 3) or (4, 3, 3)");
  }
  EXPECT_THROW(m.mha.backward(q), Error);  // no forward yet
}

TEST(Mha, FusedSelfAttentionEqualsSeparateProjections) {
  auto c = cfg_of(12, 3);
  c.add_bias_kv = true;
  c.add_zero_attn = true;
  Mha a(c, 5), b(c, 5);
  Rng rng(2);
  Tensor x = random_tensor({2, 5, 12}, rng), g = random_tensor({2, 5, 12}, rng);
  Tensor x2 = x.clone(), x3 = x.clone();
  MultiheadAttentionCall call;
  call.causal = CausalAlign::kTopLeft;
  auto self = a.mha.forward_self(x, nullptr, nullptr, call);
  auto cross = b.mha.forward(x, x2, x3, nullptr, nullptr, call);
  EXPECT_TRUE(all_close(self.output, cross.output, 1e-6, 1e-5));
  EXPECT_TRUE(all_close(self.weights, cross.weights, 1e-6, 1e-5));
  auto gs = a.mha.backward(g);
  auto gc = b.mha.backward(g);
  EXPECT_FALSE(gs.key.defined());
  Tensor sum = gc.query.clone();
  for (std::int64_t i = 0; i < sum.numel(); ++i) sum.f32()[i] += gc.key.f32()[i] + gc.value.f32()[i];
  EXPECT_TRUE(all_close(gs.query, sum, 1e-5, 1e-4));
  EXPECT_TRUE(all_close_v(a.store.all_grads(), b.store.all_grads(), 1e-5, 1e-4));
}

TEST(Mha, BackwardAccumulatesIntoParameterGradients) {
  Mha m(cfg_of(8, 2), 3);
  Rng rng(4);
  Tensor x = random_tensor({2, 3, 8}, rng), g = random_tensor({2, 3, 8}, rng);
  MultiheadAttentionCall call;
  m.mha.forward_self(x, nullptr, nullptr, call);
  m.mha.backward(g);
  std::vector<float> once(m.store.all_grads().begin(), m.store.all_grads().end());
  m.mha.forward_self(x, nullptr, nullptr, call);
  m.mha.backward(g);
  std::vector<float> twice_half;
  for (float v : m.store.all_grads()) twice_half.push_back(v / 2);
  EXPECT_TRUE(all_close_v(twice_half, once, 1e-6, 1e-6));
  m.store.zero_grad();
  for (float v : m.store.all_grads()) EXPECT_EQ(v, 0.0f);
}

TEST(Mha, DropoutOnlyInTrainingAndDeterministicPerSeed) {
  auto c = cfg_of(8, 2);
  c.dropout = 0.5;
  Mha m(c, 6);
  Rng rng(7);
  Tensor x = random_tensor({2, 6, 8}, rng);
  MultiheadAttentionCall call;
  auto eval = m.mha.forward_self(x, nullptr, nullptr, call);
  for (std::int64_t r = 0; r < 12; ++r) {  // eval weights are a distribution per query
    float s = 0;
    for (int j = 0; j < 6; ++j) s += eval.weights.f32()[r * 6 + j];
    EXPECT_NEAR(s, 1.0f, 1e-5);
  }
  call.training = true;
  call.dropout_seed = 1;
  auto t1 = m.mha.forward_self(x, nullptr, nullptr, call);
  auto t1b = m.mha.forward_self(x, nullptr, nullptr, call);
  call.dropout_seed = 2;
  auto t2 = m.mha.forward_self(x, nullptr, nullptr, call);
  EXPECT_TRUE(all_close(t1.output, t1b.output, 0, 0));
  EXPECT_FALSE(all_close(t1.output, t2.output, 1e-3, 0));
  EXPECT_FALSE(all_close(t1.output, eval.output, 1e-3, 0));
}

// Whole-module gradient with dropout active, by finite differences in float:
// the kernels' exact checks are in double; this one guards the wiring.
TEST(Mha, TrainingGradientsMatchFiniteDifferences) {
  auto c = cfg_of(8, 2);
  c.dropout = 0.3;
  c.add_bias_kv = true;
  Mha m(c, 8);
  Rng rng(9);
  Tensor q = random_tensor({2, 3, 8}, rng), k = random_tensor({2, 4, 8}, rng), v = random_tensor({2, 4, 8}, rng);
  Tensor g = random_tensor({2, 3, 8}, rng);
  Tensor kpm({2, 4}, DType::kBool);
  kpm.data<std::uint8_t>()[3] = 1;
  MultiheadAttentionCall call;
  call.training = true;
  call.dropout_seed = 77;
  auto loss = [&] {
    auto o = m.mha.forward(q, k, v, &kpm, nullptr, call);
    double s = 0;
    for (std::int64_t i = 0; i < o.output.numel(); ++i) s += double(o.output.f32()[i]) * g.f32()[i];
    return s;
  };
  loss();
  auto grads = m.mha.backward(g);
  auto params = m.store.all_data();
  auto pgrad = m.store.all_grads();
  const float eps = 1e-2f;
  int checked = 0;
  for (std::size_t i = 0; i < params.size(); i += 7, ++checked) {
    float keep = params[i];
    params[i] = keep + eps;
    double up = loss();
    params[i] = keep - eps;
    double down = loss();
    params[i] = keep;
    EXPECT_NEAR(pgrad[i], (up - down) / (2 * eps), 2e-3 + 1e-2 * std::fabs(pgrad[i])) << "parameter " << i;
  }
  EXPECT_GT(checked, 20);
  for (Tensor* t : {&q, &k}) {
    Tensor& grad = t == &q ? grads.query : grads.key;
    for (std::int64_t i = 0; i < t->numel(); i += 5) {
      float keep = t->f32()[i];
      t->f32()[i] = keep + eps;
      double up = loss();
      t->f32()[i] = keep - eps;
      double down = loss();
      t->f32()[i] = keep;
      EXPECT_NEAR(grad.f32()[i], (up - down) / (2 * eps), 2e-3 + 1e-2 * std::fabs(grad.f32()[i]));
    }
  }
}

}  // namespace
}  // namespace multihead
