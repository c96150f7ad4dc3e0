// SPDX-License-Identifier: Apache-2.0
// Activations in bf16 and fp16: the 16-bit kernels against their fp32 twins
// on the same stored values (tight), and whole modules against fp32 runs
// (PyTorch's low-precision tolerances), gradients included.
#include <gtest/gtest.h>

#include <cmath>

#include "multihead/core/allocator.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/linear.h"
#include "multihead/nn/encoder.h"
#include "multihead/nn/models.h"
#include "multihead/train/train_config.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close;
using test::random_tensor;

// PyTorch's low-precision tolerances, applied as |a - e| <= tol * (max|e| + |e|):
// 16-bit storage rounds every saved value, so errors scale with the data.
constexpr double kBf16Tol = 5e-2;
constexpr double kFp16Tol = 1e-2;

double tol_of(Precision p) { return p == Precision::kBF16 ? kBf16Tol : kFp16Tol; }

double max_abs(std::span<const float> v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

::testing::AssertionResult close_at(std::span<const float> actual, std::span<const float> expected, double tol) {
  return test::all_close<float, float>(actual, expected, tol * max_abs(expected), tol);
}

bool all_finite(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

class HalfPrecision : public ::testing::TestWithParam<Precision> {};

// The fused kernels reading BF16/F16 equal the fp32 kernels reading the same
// values widened: storage changes what is read, not how it is computed. For
// bf16 that is the widening path; the kernel that multiplies in bf16 is
// tested against the reference in tests/kernels/test_attention_bf16.cpp.
TEST_P(HalfPrecision, FusedKernelsEqualTheirFp32TwinOnTheStoredValues) {
  const DType st = storage_dtype(GetParam());
  const AttentionDims d{2, 3, 37, 41, 16, 16};
  Rng rng(5);
  Tensor q = random_tensor({d.B, d.L, d.H * d.D}, rng), k = random_tensor({d.B, d.S, d.H * d.D}, rng);
  Tensor v = random_tensor({d.B, d.S, d.H * d.Dv}, rng), dout = random_tensor({d.B, d.L, d.H * d.Dv}, rng);
  std::vector<std::uint8_t> pad(static_cast<std::size_t>(d.B * d.S), 0);
  for (std::int64_t j = 30; j < d.S; ++j) pad[static_cast<std::size_t>(d.S + j)] = 1;  // batch 1 padded
  AttentionMasks<float> masks;
  masks.key_padding_bool = pad.data();
  masks.causal = CausalAlign::kBottomRight;
  const AttentionDropout drop{0.2f, 7, 3};
  const float scale = 0.25f;
  const AttentionTiles tiles{12, 16};  // several tiles, none a multiple of the sizes
  visit_float_storage(st, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      Tensor q16 = narrow_tensor(q, st), k16 = narrow_tensor(k, st), v16 = narrow_tensor(v, st);
      Tensor qw = widen_tensor(q16), kw = widen_tensor(k16), vw = widen_tensor(v16);
      auto view16 = [&](const Tensor& t, std::int64_t rows) {
        return HeadsView<const T>{t.data<T>(), rows * d.H * d.D, d.H * d.D, d.D};
      };
      auto view32 = [&](const Tensor& t, std::int64_t rows) {
        return HeadsView<const float>{t.f32(), rows * d.H * d.D, d.H * d.D, d.D};
      };
      Tensor o16 = Tensor::empty({d.B, d.L, d.H * d.Dv}, st), o32 = Tensor::empty({d.B, d.L, d.H * d.Dv});
      Tensor lse16 = Tensor::empty({d.B, d.H, d.L}), lse32 = Tensor::empty({d.B, d.H, d.L});
      attention_fused_forward<T>({o16.data<T>(), d.L * d.H * d.Dv, d.H * d.Dv, d.Dv}, lse16.f32(), view16(q16, d.L),
                                 view16(k16, d.S), view16(v16, d.S), masks, d, scale, drop, tiles);
      attention_fused_forward<float>({o32.f32(), d.L * d.H * d.Dv, d.H * d.Dv, d.Dv}, lse32.f32(), view32(qw, d.L),
                                     view32(kw, d.S), view32(vw, d.S), masks, d, scale, drop, tiles);
      EXPECT_TRUE(all_close(widen_tensor(o16), widen_tensor(narrow_tensor(o32, st)), 0, 0));
      EXPECT_TRUE(all_close(lse16, lse32, 0, 0));

      // Backward from the stored O; the fp32 twin reads the same O widened.
      Tensor ow = widen_tensor(o16);
      auto grads = [&](auto&& run) {
        std::vector<Tensor> g;
        for (std::int64_t rows : {d.L, d.S, d.S}) g.push_back(Tensor::empty({d.B, rows, d.H * d.D}));
        run(HeadsView<float>{g[0].f32(), d.L * d.H * d.D, d.H * d.D, d.D},
            HeadsView<float>{g[1].f32(), d.S * d.H * d.D, d.H * d.D, d.D},
            HeadsView<float>{g[2].f32(), d.S * d.H * d.D, d.H * d.D, d.D});
        return g;
      };
      const HeadsView<const float> dov = view32(dout, d.L);
      auto g16 = grads([&](auto dq, auto dk, auto dv) {
        attention_fused_backward<T>(dq, dk, dv, lse16.f32(), view16(o16, d.L), dov, view16(q16, d.L), view16(k16, d.S),
                                    view16(v16, d.S), masks, d, scale, drop, tiles);
      });
      auto g32 = grads([&](auto dq, auto dk, auto dv) {
        attention_fused_backward<float>(dq, dk, dv, lse32.f32(), view32(ow, d.L), dov, view32(qw, d.L), view32(kw, d.S),
                                        view32(vw, d.S), masks, d, scale, drop, tiles);
      });
      for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(all_close(g16[i], g32[i], 1e-6, 1e-5)) << "gradient " << i;

      Tensor w16({d.B, d.H, d.L, d.S}), w32({d.B, d.H, d.L, d.S});
      attention_fused_weights<T>(w16.f32(), false, lse16.f32(), view16(q16, d.L), view16(k16, d.S), masks, d, scale,
                                 drop, tiles);
      attention_fused_weights<float>(w32.f32(), false, lse32.f32(), view32(qw, d.L), view32(kw, d.S), masks, d, scale,
                                     drop, tiles);
      EXPECT_TRUE(all_close(w16, w32, 1e-7, 1e-6));
    }
  });
}

TEST_P(HalfPrecision, StoredLinearKernelsEqualFp32OnTheStoredValues) {
  const DType st = storage_dtype(GetParam());
  Rng rng(6);
  const std::int64_t N = 700, in = 24, out = 10;  // several 256-row blocks and a partial one
  Tensor x = random_tensor({N, in}, rng), w = random_tensor({out, in}, rng), b = random_tensor({out}, rng);
  Tensor dy = random_tensor({N, out}, rng);
  Tensor xs = narrow_tensor(x, st), xw = widen_tensor(xs);
  // Computing in bf16 also rounds W, and dy for the products of dx and dW.
  const bool bf16 = computes_in_bf16(st);
  const DType round_to = bf16 ? st : DType::kF32;
  Tensor wr = widen_tensor(narrow_tensor(w, round_to)), dyr = widen_tensor(narrow_tensor(dy, round_to));
  Tensor y1({N, out}), y2({N, out}), dx1({N, in}), dx2({N, in}), dw1({out, in}), dw2({out, in}), db1({out}), db2({out});
  visit_float_storage(st, [&](auto tag) {
    using T = decltype(tag);
    linear_forward_stored<T>(y1.f32(), out, xs.data<T>(), in, w.f32(), b.f32(), N, in, out);
    linear_backward_stored<T>(dx1.f32(), in, false, dw1.f32(), db1.f32(), dy.f32(), out, xs.data<T>(), in, w.f32(), N,
                              in, out);
  });
  linear_forward<float>(y2.f32(), out, xw.f32(), in, wr.f32(), b.f32(), N, in, out);
  linear_backward<float>(dx2.f32(), in, false, dw2.f32(), nullptr, dyr.f32(), out, xw.f32(), in, wr.f32(), N, in, out);
  linear_backward<float>(nullptr, in, false, nullptr, db2.f32(), dy.f32(), out, xw.f32(), in, wr.f32(), N, in, out);
  EXPECT_TRUE(all_close(y1, y2));
  EXPECT_TRUE(all_close(dx1, dx2));
  EXPECT_TRUE(all_close(dw1, dw2, 1e-4, 1e-5));  // summed by blocks: another order
  EXPECT_TRUE(all_close(db1, db2));
}

// One forward and backward of a model-sized piece in a given precision:
// output, input gradient and every parameter gradient.
struct Result {
  Tensor out, dx;
  std::vector<float> grads;
};

MultiheadAttentionConfig mha_config() {
  MultiheadAttentionConfig c;
  c.embed_dim = 32;
  c.num_heads = 4;
  c.dropout = 0.1;
  c.positions = AttentionPositions::kRope;
  return c;
}

Result run_mha(Precision p, float input_scale = 1.0f) {
  ParamStore store;
  MultiheadAttention mha(store, "", mha_config());
  store.finalize();
  Rng rng(3);
  mha.init(rng);
  Tensor x = random_tensor({2, 29, 32}, rng, input_scale), g = random_tensor({2, 29, 32}, rng);
  Tensor pad({2, 29}, DType::kBool);
  for (std::int64_t j = 20; j < 29; ++j) pad.data<std::uint8_t>()[29 + j] = 1;
  MultiheadAttentionCall call;
  call.need_weights = false;
  call.causal = CausalAlign::kTopLeft;
  call.training = true;
  call.dropout_seed = 11;
  call.precision = p;
  call.tiles = {8, 16};
  Result r;
  r.out = mha.forward_self(x, &pad, nullptr, call).output;
  r.dx = std::move(mha.backward(g).query);
  r.grads.assign(store.all_grads().begin(), store.all_grads().end());
  return r;
}

void expect_close_runs(const Result& a, const Result& ref, double tol) {
  EXPECT_TRUE(all_finite(a.out.span_f32()) && all_finite(a.dx.span_f32()) && all_finite(a.grads));
  EXPECT_TRUE(close_at(a.out.span_f32(), ref.out.span_f32(), tol)) << "output";
  EXPECT_TRUE(close_at(a.dx.span_f32(), ref.dx.span_f32(), tol)) << "input gradient";
  EXPECT_TRUE(close_at(a.grads, ref.grads, tol)) << "parameter gradients";
}

TEST_P(HalfPrecision, MultiheadAttentionMatchesFp32) {
  expect_close_runs(run_mha(GetParam()), run_mha(Precision::kF32), tol_of(GetParam()));
}

// Large activations: scores beyond fp16's range (65504) stay finite, since
// Q K^T, the softmax and every sum run in fp32 and only Q, K, V and O, well
// within range, are stored. (Against fp32 the softmax is then nearly an
// argmax, which any rounding can move, so only finiteness is asserted.)
TEST_P(HalfPrecision, LargeInputsGiveNoNaN) {
  const Result r = run_mha(GetParam(), 300.0f);
  EXPECT_TRUE(all_finite(r.out.span_f32()));
  EXPECT_TRUE(all_finite(r.dx.span_f32()));
  EXPECT_TRUE(all_finite(r.grads));
  EXPECT_GT(max_abs(r.out.span_f32()), 1e2);  // the activations were large indeed (about 1 for unit inputs)
}

Result run_encoder(Precision p, bool norm_first, bool checkpoint, float input_scale = 1.0f) {
  TransformerLayerConfig lc;
  lc.d_model = 32;
  lc.nhead = 4;
  lc.dim_feedforward = 48;
  lc.dropout = 0.1;
  lc.norm_first = norm_first;
  lc.activation = Activation::kGelu;
  ParamStore store;
  TransformerEncoder enc(store, "", lc, 2, true);
  store.finalize();
  Rng rng(4);
  enc.init(rng);
  enc.set_checkpointing(checkpoint);
  Tensor x = random_tensor({3, 23, 32}, rng, input_scale), g = random_tensor({3, 23, 32}, rng);
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 9;
  ctx.precision = p;
  Result r;
  r.out = enc.forward(x, {}, ctx);
  r.dx = enc.backward(g);
  r.grads.assign(store.all_grads().begin(), store.all_grads().end());
  return r;
}

TEST_P(HalfPrecision, EncoderLayersMatchFp32PostAndPreNorm) {
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre-LN" : "post-LN");
    expect_close_runs(run_encoder(GetParam(), norm_first, false), run_encoder(Precision::kF32, norm_first, false),
                      tol_of(GetParam()));
  }
}

TEST_P(HalfPrecision, EncoderWithLargeInputsGivesNoNaN) {
  const Result a = run_encoder(GetParam(), true, false, 1000.0f);
  expect_close_runs(a, run_encoder(Precision::kF32, true, false, 1000.0f), tol_of(GetParam()));
}

// A causal language model, output layer tied to the embedding or not: the
// logits and every parameter gradient of one training step.
Result run_lm(Precision p, bool tied) {
  ModelConfig mc;
  mc.vocab_size = 37;
  mc.num_layers = 2;
  mc.layer.d_model = 32;
  mc.layer.nhead = 4;
  mc.layer.dim_feedforward = 48;
  mc.max_len = 32;
  mc.tie_embeddings = tied;
  ParamStore store;
  LanguageModel lm(store, mc);
  store.finalize();
  Rng rng(8);
  lm.init(rng);
  Tensor ids({3, 19}, DType::kI64);
  for (std::int64_t i = 0; i < ids.numel(); ++i) ids.data<std::int64_t>()[i] = rng.next_u32() % 37;
  ForwardContext ctx;
  ctx.training = true;
  ctx.seed = 2;
  ctx.precision = p;
  Result r;
  r.out = lm.forward(ids, ctx);
  lm.backward(random_tensor(r.out.shape(), rng));
  r.dx = Tensor::zeros({1});  // the input is token ids: no input gradient
  r.grads.assign(store.all_grads().begin(), store.all_grads().end());
  return r;
}

TEST_P(HalfPrecision, LanguageModelMatchesFp32TiedAndUntied) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied output layer" : "lm_head");
    expect_close_runs(run_lm(GetParam(), tied), run_lm(Precision::kF32, tied), tol_of(GetParam()));
  }
}

// Layer outputs are rounded to 16-bit values before the next layer reads
// them, so recomputing a layer from its stored input repeats forward exactly.
TEST_P(HalfPrecision, CheckpointingGivesBitwiseTheSameGradients) {
  const Result plain = run_encoder(GetParam(), false, false), ckpt = run_encoder(GetParam(), false, true);
  EXPECT_TRUE(all_close(ckpt.out, plain.out, 0, 0));
  EXPECT_TRUE(all_close(ckpt.dx, plain.dx, 0, 0));
  EXPECT_TRUE(test::all_close_v(ckpt.grads, plain.grads, 0, 0));
}

INSTANTIATE_TEST_SUITE_P(Storage, HalfPrecision, ::testing::Values(Precision::kBF16, Precision::kF16),
                         [](const auto& p) { return std::string(precision_name(p.param)); });

// Allocator peak above the weights in one training step of a small classifier.
std::int64_t activation_peak(Precision p) {
  ModelConfig mc;
  mc.vocab_size = 50;
  mc.num_layers = 4;
  mc.layer.d_model = 64;
  mc.layer.nhead = 4;
  mc.layer.dim_feedforward = 256;
  mc.max_len = 256;
  ParamStore store;
  SequenceClassifier model(store, mc);
  store.finalize();
  Rng rng(1);
  model.init(rng);
  Tensor ids({16, 256}, DType::kI64), labels({16}, DType::kI64);
  for (std::int64_t i = 0; i < ids.numel(); ++i) ids.data<std::int64_t>()[i] = rng.next_u32() % 50;
  ForwardContext ctx;
  ctx.training = true;
  ctx.precision = p;
  const std::int64_t base = memory_stats().current_bytes;
  const PeakMeter memory;
  Tensor logits = model.forward(ids, nullptr, ctx);
  Tensor dlogits = Tensor::empty(logits.shape());
  cross_entropy(dlogits.f32(), logits.f32(), labels.data<std::int64_t>(), 16, 2);
  model.backward(dlogits);
  model.release_saved();
  return memory.peak_bytes() - base;
}

// What the precision is for: bf16 and fp16 keep the saved activations in
// half the bytes. The fp32 gradients flowing through one layer at a time
// stay fp32, so the whole peak sits a little above one half.
TEST(MixedPrecisionMemory, SixteenBitActivationsAboutHalveThePeak) {
  const double fp32 = static_cast<double>(activation_peak(Precision::kF32));
  for (Precision p : {Precision::kBF16, Precision::kF16}) {
    const double ratio = static_cast<double>(activation_peak(p)) / fp32;
    EXPECT_LT(ratio, 0.6) << precision_name(p);
    EXPECT_GT(ratio, 0.4) << precision_name(p);
  }
}

TEST(MixedPrecisionConfig, ParsedWithFp16LossScalingByDefault) {
  EXPECT_EQ(parse_precision("bf16"), Precision::kBF16);
  try {
    parse_precision("fp8");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "precision must be \"fp32\", \"bf16\", \"fp16\" or \"int8\", got \"fp8\"");
  }
  auto read = [](const char* text) {
    const nlohmann::json j = nlohmann::json::parse(text);
    ConfigReader r(j, "train");
    TrainConfig t;
    TrainConfig::keys(r, t);
    r.finish();
    return t;
  };
  const TrainConfig fp16 = read(R"({"precision": "fp16"})");
  EXPECT_EQ(fp16.precision, Precision::kF16);
  EXPECT_TRUE(fp16.loss_scaling);
  EXPECT_FALSE(read(R"({"precision": "bf16"})").loss_scaling);
  EXPECT_FALSE(read(R"({"precision": "fp16", "loss_scaling": false})").loss_scaling);
  nlohmann::json written;
  ConfigWriter w(written);
  TrainConfig::keys(w, fp16);
  EXPECT_EQ(written["precision"], "fp16");
  // int8 is read (a loaded run's precision) but no training runs in it.
  TrainConfig int8 = read(R"({"precision": "int8"})");
  EXPECT_EQ(int8.precision, Precision::kInt8);
  EXPECT_THROW(int8.validate(), ConfigError);
}

}  // namespace
}  // namespace multihead
