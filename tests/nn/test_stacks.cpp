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
