// SPDX-License-Identifier: Apache-2.0
// Layer stacks and initialisation.
#include <gtest/gtest.h>

#include <cmath>

#include "multihead/nn/encoder.h"
#include "multihead/nn/models.h"
#include "multihead/nn/init.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::random_tensor;

TransformerLayerConfig small_layer() {
  TransformerLayerConfig c;
  c.d_model = 8;
  c.nhead = 2;
  c.dim_feedforward = 12;
  c.dropout = 0.0;
  return c;
}

// d(sum(out * g)) / d(t[i]) by central differences in float.
template <typename F>
double numeric(F&& loss, Tensor& t, std::int64_t i, float eps = 1e-2f) {
  const float keep = t.f32()[i];
  t.f32()[i] = keep + eps;
  const double up = loss();
  t.f32()[i] = keep - eps;
  const double down = loss();
  t.f32()[i] = keep;
  return (up - down) / (2 * eps);
}

TEST(TransformerDecoderStack, GradientsOfTargetAndMemoryMatchFiniteDifferences) {
  ParamStore store;
  TransformerDecoder dec(store, "decoder.", small_layer(), 2, true);
  store.finalize();
  Rng rng(1);
  dec.init(rng);
  EXPECT_TRUE(store.find("decoder.layers.1.multihead_attn.in_proj_weight").has_value());
  EXPECT_TRUE(store.find("decoder.norm.weight").has_value());
  Tensor x = random_tensor({2, 4, 8}, rng), mem = random_tensor({2, 5, 8}, rng), g = random_tensor({2, 4, 8}, rng);
  AttentionMaskArgs causal;
  causal.causal = CausalAlign::kTopLeft;
  ForwardContext ctx;
  auto loss = [&] {
    Tensor out = dec.forward(x, mem, causal, {}, ctx);
    double s = 0;
    for (std::int64_t i = 0; i < out.numel(); ++i) s += double(out.f32()[i]) * g.f32()[i];
    return s;
  };
  loss();
  auto grads = dec.backward(g);
  for (std::int64_t i = 0; i < x.numel(); i += 5)
    EXPECT_NEAR(grads.x.f32()[i], numeric(loss, x, i), 3e-3 + 1e-2 * std::fabs(grads.x.f32()[i])) << i;
  for (std::int64_t i = 0; i < mem.numel(); i += 5)
    EXPECT_NEAR(grads.memory.f32()[i], numeric(loss, mem, i), 3e-3 + 1e-2 * std::fabs(grads.memory.f32()[i])) << i;
}

// The feed-forward block in fp32 equals its products done by hand in double,
// over few rows (W2 read as it is) and over many (W2 transposed first).
TEST(FeedForward, EqualsItsProductsDoneByHandOverFewAndManyRows) {
  TransformerLayerConfig c = small_layer();
  c.d_model = 16;
  c.dim_feedforward = 40;
  ParamStore store;
  FeedForward ff(store, "ff.", c);
  store.finalize();
  Rng rng(9);
  ff.init(rng);
  const std::int64_t d = c.d_model, F = c.dim_feedforward;
  const float* w1 = store.data(*store.find("ff.linear1.weight"));
  const float* b1 = store.data(*store.find("ff.linear1.bias"));
  const float* w2 = store.data(*store.find("ff.linear2.weight"));
  const float* b2 = store.data(*store.find("ff.linear2.bias"));
  for (std::int64_t N : {3, 2100}) {
    Tensor x = random_tensor({N, d}, rng);
    Tensor y = ff.forward(x, ForwardContext{});
    double worst = 0;
    std::vector<double> hid(static_cast<std::size_t>(F));
    for (std::int64_t n = 0; n < N; ++n) {
      for (std::int64_t f = 0; f < F; ++f) {
        double a = b1[f];
        for (std::int64_t k = 0; k < d; ++k) a += double(x.f32()[n * d + k]) * w1[f * d + k];
        hid[static_cast<std::size_t>(f)] = std::max(a, 0.0);
      }
      for (std::int64_t j = 0; j < d; ++j) {
        double a = b2[j];
        for (std::int64_t f = 0; f < F; ++f) a += hid[static_cast<std::size_t>(f)] * w2[j * F + f];
        worst = std::max(worst, std::fabs(a - y.f32()[n * d + j]));
      }
    }
    EXPECT_LT(worst, 1e-5) << N << " rows";
  }
}

// With dropout on, in training: each residual step's mask must reach the
// gradient of its own sublayer. Encoder and decoder stacks, post- and
// pre-norm; every input and parameter gradient checked by finite
// differences in float (the masks depend only on the seed and step).
// Every third input element and every 11th parameter are checked.
class StackGradientsWithDropout : public ::testing::TestWithParam<bool> {};

TEST_P(StackGradientsWithDropout, MatchFiniteDifferences) {
  TransformerLayerConfig c = small_layer();
  c.dropout = 0.3;
  c.norm_first = GetParam();
  c.activation = Activation::kGelu;  // smooth: no ReLU kink within the differences' step
  ParamStore store;
  TransformerEncoder enc(store, "encoder.", c, 2, true);
  TransformerDecoder dec(store, "decoder.", c, 2, true);
  store.finalize();
  Rng rng(2);
  enc.init(rng);
  dec.init(rng);
  Tensor src = random_tensor({2, 5, 8}, rng), tgt = random_tensor({2, 4, 8}, rng), g = random_tensor({2, 4, 8}, rng);
  AttentionMaskArgs causal;
  causal.causal = CausalAlign::kTopLeft;
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 5;
  auto loss = [&] {
    Tensor mem = enc.forward(src, {}, ctx);
    Tensor out = dec.forward(tgt, mem, causal, {}, ctx);
    double s = 0;
    for (std::int64_t i = 0; i < out.numel(); ++i) s += double(out.f32()[i]) * g.f32()[i];
    return s;
  };
  Tensor mem = enc.forward(src, {}, ctx);
  dec.forward(tgt, mem, causal, {}, ctx);
  auto dgrads = dec.backward(g);
  Tensor dsrc = enc.backward(dgrads.memory);
  const auto tol = [](float grad) { return 3e-3 + 1e-2 * std::fabs(grad); };
  for (std::int64_t i = 0; i < tgt.numel(); i += 3)
    EXPECT_NEAR(dgrads.x.f32()[i], numeric(loss, tgt, i), tol(dgrads.x.f32()[i])) << i;
  for (std::int64_t i = 0; i < src.numel(); i += 3)
    EXPECT_NEAR(dsrc.f32()[i], numeric(loss, src, i), tol(dsrc.f32()[i])) << i;
  std::span<float> params = store.all_data(), grads = store.all_grads();
  int checked = 0;
  for (std::size_t i = 0; i < params.size(); i += 11, ++checked) {
    const float keep = params[i];
    params[i] = keep + 1e-2f;
    const double up = loss();
    params[i] = keep - 1e-2f;
    const double down = loss();
    params[i] = keep;
    EXPECT_NEAR(grads[i], (up - down) / 2e-2, tol(grads[i])) << "parameter " << i;
  }
  EXPECT_GT(checked, 50);
}

INSTANTIATE_TEST_SUITE_P(PostAndPreNorm, StackGradientsWithDropout, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "PreNorm" : "PostNorm"; });

TEST(Init, XavierUniformOnEveryMatrix) {
  ParamStore store;
  store.add("w", {64, 32});
  store.add("b", {64});
  store.add("k", {1, 1, 16});
  store.finalize();
  Rng rng(2);
  xavier_uniform_all(store, rng);
  auto max_abs = [](std::span<float> s) {
    float m = 0;
    for (float v : s) m = std::max(m, std::fabs(v));
    return m;
  };
  const float bound = std::sqrt(6.0f / (32 + 64));
  EXPECT_LE(max_abs(store.data_span(0)), bound);
  EXPECT_GT(max_abs(store.data_span(0)), 0.95f * bound);
  EXPECT_EQ(max_abs(store.data_span(1)), 0.0f);  // vectors are left alone
  EXPECT_LE(max_abs(store.data_span(2)), std::sqrt(6.0f / 32));
}

}  // namespace
}  // namespace multihead

namespace multihead {
namespace {

TEST(VisionTransformer, GradientsMatchFiniteDifferences) {
  VisionConfig c;
  c.image_size = 8;
  c.patch = 4;
  c.num_layers = 1;
  c.layer = small_layer();
  c.num_classes = 3;
  ParamStore store;
  VisionTransformer vit(store, c);
  store.finalize();
  Rng rng(5);
  vit.init(rng);
  EXPECT_TRUE(store.find("cls_token").has_value());
  EXPECT_EQ(store.entry(*store.find("pos_embedding")).shape, (Shape{1, 5, 8}));
  Tensor img = random_tensor({2, 1, 8, 8}, rng), g = random_tensor({2, 3}, rng);
  auto loss = [&] { return test::dot_loss(vit.forward(img, ForwardContext{}), g); };
  loss();
  vit.backward(g);
  test::expect_float_gradients(loss, store.all_data(), store.all_grads(), 7, "parameter", 1e-2f, 3e-3);
}

}  // namespace
}  // namespace multihead

namespace multihead {
namespace {

// A classifier with a pretrained encoder's parts (BERT's: post-LN layers
// without a final norm, learned positions from an offset, token type 0's
// row, a LayerNorm over the embeddings, a tanh or relu layer before the
// classifier): every parameter's gradient against central differences.
class PretrainedParts : public ::testing::TestWithParam<const char*> {};

TEST_P(PretrainedParts, GradientsMatchFiniteDifferences) {
  ModelConfig c;
  c.vocab_size = 11;
  c.num_layers = 2;
  c.layer = small_layer();
  c.layer.activation = Activation::kGelu;
  c.final_norm = false;
  c.positions = PositionKind::kLearned;
  c.max_len = 9;
  c.position_offset = 2;
  c.token_types = 2;
  c.embedding_norm = true;
  c.num_classes = 3;
  c.pooling = Pooling::kCls;
  c.head = GetParam();
  ParamStore store;
  SequenceClassifier model(store, c);
  store.finalize();
  Rng rng(3);
  model.init(rng);
  for (const char* name : {"token_type_embedding.weight", "embedding_norm.weight", "pre_classifier.weight"})
    EXPECT_EQ(store.find(name).has_value(), c.head != std::string("linear") || name[0] != 'p') << name;
  const Tensor ids = Tensor::from_i64({2, 5}, std::vector<std::int64_t>{2, 5, 7, 1, 3, 2, 4, 9, 0, 0});
  const Tensor pad = Tensor::from_bool({2, 5}, std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1});
  Tensor g = random_tensor({2, 3}, rng);
  auto loss = [&] {
    const double l = test::dot_loss(model.forward(ids, &pad, ForwardContext{}), g);
    return l;
  };
  loss();
  model.backward(g);
  test::expect_float_gradients(loss, store.all_data(), store.all_grads(), 5, "parameter", 1e-2f, 3e-3);
  // Positions past the offset's reach are refused, not read out of the table.
  const Tensor long_ids = Tensor::from_i64({1, 8}, std::vector<std::int64_t>(8, 1));
  EXPECT_THROW(model.forward(long_ids, nullptr, ForwardContext{}), ShapeError);
}

INSTANTIATE_TEST_SUITE_P(Heads, PretrainedParts, ::testing::Values("linear", "tanh", "relu", "gelu", "gelu_tanh"));

}  // namespace
}  // namespace multihead
