// SPDX-License-Identifier: Apache-2.0
// The encoder-decoder model: teacher-forced forward against cached decoding,
// the source's padding, gradients by finite differences, and bf16 on frozen
// weights.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <utility>

#include "multihead/kernels/gemm_bf16.h"
#include "multihead/nn/encoder_decoder.h"
#include "tasks/small_encoder_decoder.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close;
using test::random_tensor;

// The decoding tests' small model, with more encoder than decoder layers,
// narrower, and relative positions clipped at 3.
EncoderDecoderConfig small_model(PositionKind positions, bool norm_first) {
  EncoderDecoderConfig c = test::small_encoder_decoder(7, 9, positions);
  std::swap(c.model.num_layers, c.decoder_layers);  // 2 encoder layers, 1 decoder layer
  c.model.layer.d_model = 8;
  c.model.layer.dim_feedforward = 12;
  c.model.layer.norm_first = norm_first;
  c.model.relative_clip = 3;
  return c;
}

// Two sources of 5 ids, the second with its last two positions padding.
struct Batch {
  Tensor source = Tensor::from_i64({2, 5}, std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 5, 4, 0, 0});
  Tensor padding = Tensor::from_bool({2, 5}, std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1});
  Tensor target = Tensor::from_i64({2, 6}, std::vector<std::int64_t>{0, 3, 8, 1, 2, 7, 0, 6, 6, 5, 4, 1});
};

// Columns [t0, t0 + n) of target (B, T).
Tensor columns(const Tensor& target, std::int64_t t0, std::int64_t n) {
  const std::int64_t B = target.dim(0), T = target.dim(1);
  std::vector<std::int64_t> ids;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = t0; t < t0 + n; ++t) ids.push_back(target.data<std::int64_t>()[b * T + t]);
  return Tensor::from_i64({B, n}, ids);
}

class EncoderDecoderPositions : public ::testing::TestWithParam<std::tuple<PositionKind, bool>> {};

// Decoding two tokens, then one at a time, from the memory projected once
// gives the rows of the teacher-forced forward pass.
TEST_P(EncoderDecoderPositions, CachedDecodingEqualsTeacherForcedRows) {
  const auto [positions, norm_first] = GetParam();
  ParamStore store;
  EncoderDecoder model(store, small_model(positions, norm_first));
  store.finalize();
  Rng rng(3);
  model.init(rng);
  Batch b;
  const Tensor full = model.forward(b.source, &b.padding, b.target, eval_context(Precision::kF32));
  model.release_saved();
  const EncodedMemory memory = model.encode(b.source, &b.padding);
  std::vector<KvCache> caches;
  std::vector<Tensor> parts;
  parts.push_back(model.decode_step(columns(b.target, 0, 2), caches, memory, 6));
  for (std::int64_t t = 2; t < 6; ++t) parts.push_back(model.decode_step(columns(b.target, t, 1), caches, memory, 6));
  const std::int64_t V = 9;
  for (std::int64_t r = 0; r < 2; ++r)
    for (std::int64_t t = 0; t < 6; ++t) {
      const Tensor& part = parts[static_cast<std::size_t>(t < 2 ? 0 : t - 1)];
      const std::int64_t pt = t < 2 ? t : 0, PT = part.dim(1);
      for (std::int64_t v = 0; v < V; ++v)
        EXPECT_NEAR(part.f32()[(r * PT + pt) * V + v], full.f32()[(r * 6 + t) * V + v], 2e-5)
            << "row " << r << " position " << t;
    }
}

// What the padded source positions hold does not matter.
TEST_P(EncoderDecoderPositions, PaddedSourcePositionsAreIgnored) {
  const auto [positions, norm_first] = GetParam();
  ParamStore store;
  EncoderDecoder model(store, small_model(positions, norm_first));
  store.finalize();
  Rng rng(4);
  model.init(rng);
  Batch b;
  const Tensor a = model.forward(b.source, &b.padding, b.target, eval_context(Precision::kF32));
  model.release_saved();
  Batch changed;
  changed.source.data<std::int64_t>()[8] = 3;
  changed.source.data<std::int64_t>()[9] = 6;
  const Tensor c = model.forward(changed.source, &changed.padding, changed.target, eval_context(Precision::kF32));
  EXPECT_TRUE(all_close(c, a, 1e-6, 0));
}

// Every parameter's gradient (a sample of each) against central differences.
TEST_P(EncoderDecoderPositions, ParameterGradientsMatchFiniteDifferences) {
  const auto [positions, norm_first] = GetParam();
  ParamStore store;
  EncoderDecoderConfig cfg = small_model(positions, norm_first);
  cfg.model.layer.activation = Activation::kGelu;  // smooth: no ReLU kink inside a difference step
  EncoderDecoder model(store, cfg);
  store.finalize();
  Rng rng(5);
  model.init(rng);
  Batch b;
  const Tensor g = random_tensor({2, 6, 9}, rng);
  ForwardContext ctx;  // training mode, no dropout: deterministic
  ctx.training = true;
  auto loss = [&] {
    const double s = test::dot_loss(model.forward(b.source, &b.padding, b.target, ctx), g);
    model.release_saved();
    return s;
  };
  store.zero_grad();
  model.forward(b.source, &b.padding, b.target, ctx);
  model.backward(g);
  model.release_saved();
  for (std::size_t h = 0; h < store.entries().size(); ++h) {
    const auto& e = store.entry(h);
    std::span<float> values = store.data_span(h);
    const std::span<const float> grads(store.grad(h), values.size());
    test::expect_float_gradients(loss, values, grads, std::max<std::size_t>(1, values.size() / 6), e.name.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, EncoderDecoderPositions,
                         ::testing::Combine(::testing::Values(PositionKind::kSinusoidal, PositionKind::kLearned,
                                                              PositionKind::kRope, PositionKind::kAlibi,
                                                              PositionKind::kRelative),
                                            ::testing::Bool()),
                         [](const auto& p) {
                           return std::string(position_kind_name(std::get<0>(p.param))) +
                                  (std::get<1>(p.param) ? "_pre_ln" : "_post_ln");
                         });

// A frozen store's bf16 copy of the weights (what a loaded run decodes with)
// is the rounding each bf16 product otherwise makes: the same bits, teacher
// forced and decoding, through every projection of self- and
// cross-attention (with rotary positions, which project in fp32 storage,
// and without), the feed-forward blocks and the output layer.
TEST_P(EncoderDecoderPositions, FrozenWeightsComputeInBf16AsTheRoundedOnes) {
  const auto [positions, norm_first] = GetParam();
  ParamStore store;
  EncoderDecoder model(store, small_model(positions, norm_first));
  store.finalize();
  Rng rng(4);
  model.init(rng);
  Batch b;
  auto run = [&] {
    std::vector<Tensor> out;
    out.push_back(model.forward(b.source, &b.padding, b.target, eval_context(Precision::kBF16)));
    model.release_saved();
    const EncodedMemory memory = model.encode(b.source, &b.padding, Precision::kBF16);
    std::vector<KvCache> caches;
    out.push_back(model.decode_step(columns(b.target, 0, 2), caches, memory, 6, Precision::kBF16));
    out.push_back(model.decode_step(columns(b.target, 2, 1), caches, memory, 6, Precision::kBF16));
    return out;
  };
  EXPECT_EQ(store.bf16(0), nullptr);
  const std::vector<Tensor> rounded_per_call = run();
  store.freeze();
  ASSERT_EQ(store.bf16(0) != nullptr, computes_in_bf16(DType::kBF16));  // a copy only where bf16 products run
  const std::vector<Tensor> frozen = run();
  for (std::size_t i = 0; i < frozen.size(); ++i)
    EXPECT_TRUE(all_close(frozen[i], rounded_per_call[i], 0, 0)) << "output " << i;
  // Its weights are final: the writers refuse.
  EXPECT_THROW(store.data_span(0), Error);
  EXPECT_THROW(store.all_data(), Error);
}

// Selecting memory rows (as beam search repeats inputs) decodes as the rows selected.
TEST(EncodedMemory, SelectedRowsDecodeAsTheirSources) {
  ParamStore store;
  EncoderDecoder model(store, small_model(PositionKind::kSinusoidal, true));
  store.finalize();
  Rng rng(6);
  model.init(rng);
  Batch b;
  const EncodedMemory memory = model.encode(b.source, &b.padding);
  const std::vector<std::int64_t> rows = {1, 1, 0};
  const EncodedMemory picked = memory.select(rows);
  ASSERT_EQ(picked.batch(), 3);
  const Tensor start = Tensor::from_i64({2, 1}, std::vector<std::int64_t>{0, 0});
  const Tensor start3 = Tensor::from_i64({3, 1}, std::vector<std::int64_t>{0, 0, 0});
  std::vector<KvCache> c2, c3;
  const Tensor two = model.decode_step(start, c2, memory, 4);
  const Tensor three = model.decode_step(start3, c3, picked, 4);
  // A batch of another row count may take another GEMM kernel, which sums in another order
  // (AVX2 sgemm on an AMD EPYC Zen 3 differed in the 8th digit): equal to fp32's tolerance.
  for (std::int64_t v = 0; v < 9; ++v) {
    EXPECT_NEAR(three.f32()[0 * 9 + v], two.f32()[1 * 9 + v], 1e-5);
    EXPECT_NEAR(three.f32()[1 * 9 + v], two.f32()[1 * 9 + v], 1e-5);
    EXPECT_NEAR(three.f32()[2 * 9 + v], two.f32()[0 * 9 + v], 1e-5);
  }
  EXPECT_THROW(memory.select(std::vector<std::int64_t>{2}), ShapeError);
}

}  // namespace
}  // namespace multihead
