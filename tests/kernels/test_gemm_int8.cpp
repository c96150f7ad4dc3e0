// SPDX-License-Identifier: Apache-2.0
// int8 products (kernels/gemm_int8.h) against their twin, which multiplies
// in plain int32 loops: equal exactly on the CPU's path (oneDNN's u8 x s8
// GEMM, 8-bit activations with VNNI, 7-bit without; the matmul primitive on
// AMX, in row blocks, its weights packed once), over padded strides,
// few rows (column shares) and many, and values at the edges of the ranges
// where a saturating product would show; and both activation widths within
// a quantization error of the fp32 product. ctest runs this file once more
// with ONEDNN_MAX_CPU_ISA=AVX2, where the path must be the 7-bit one, and on a
// CPU with AMX with AVX512_CORE_VNNI, where it must be VNNI's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "multihead/core/rng.h"
#include "multihead/kernels/gemm_int8.h"
#include "multihead/kernels/linear.h"
#include "multihead/nn/param_store.h"
#include "quantize_rows.h"
#include "test_util.h"

namespace multihead {
namespace {

struct QuantizedMatrix {
  std::vector<std::int8_t> q;
  std::vector<float> scale;
  std::vector<std::int32_t> row_sum;
  QuantizedMatrix(const std::vector<float>& W, std::int64_t out, std::int64_t in)
      : q(out * in), scale(out), row_sum(out) {
    quantize_weight_rows(W.data(), out, in, q.data(), scale.data(), row_sum.data());
  }
  std::shared_ptr<Int8Packs> packs = make_int8_packs();
  // packed: with a store's packs (on AMX, its copies in the tiles' layout).
  Int8Weight weight(bool packed = false) const {
    return {q.data(), scale.data(), row_sum.data(), packed ? packs.get() : nullptr};
  }
};

std::vector<float> normal(std::int64_t n, Rng& rng, float sd = 1.0f) {
  std::vector<float> v(n);
  for (float& x : v) x = sd * rng.normal();
  return v;
}

TEST(Int8Gemm, WeightRowsAreQuantizedSymmetricallyPerRow) {
  const std::vector<float> W = {0.5f, -1.0f, 0.25f, 0.0f, 0.0f, 0.0f, 3.0f, 2.0f, -0.01f, 1.0f, NAN, 2.0f};
  const QuantizedMatrix m(W, 4, 3);
  EXPECT_TRUE(std::isnan(m.scale[3]));  // a row no scale holds
  EXPECT_EQ(m.q[9], 0);
  EXPECT_EQ(m.row_sum[3], 0);
  EXPECT_FLOAT_EQ(m.scale[0], 1.0f / 127);
  EXPECT_EQ(m.q[0], 64);  // 63.5 rounds half to even
  EXPECT_EQ(m.q[1], -127);
  EXPECT_EQ(m.q[2], 32);  // 31.75
  EXPECT_EQ(m.row_sum[0], 64 - 127 + 32);
  EXPECT_EQ(m.scale[1], 1.0f);  // a zero row
  EXPECT_EQ(m.q[3], 0);
  EXPECT_EQ(m.row_sum[1], 0);
  EXPECT_FLOAT_EQ(m.scale[2], 3.0f / 127);
  EXPECT_EQ(m.q[6], 127);
  EXPECT_EQ(m.q[7], 85);  // 84.67
  EXPECT_EQ(m.q[8], 0);
}

TEST(Int8Gemm, TheCpusPathEqualsItsTwinExactly) {
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (isa != nullptr && std::string(isa) == "AVX2") {
    EXPECT_EQ(int8_activation_levels(), 127);
  }
  if (isa != nullptr && std::string(isa) == "AVX512_CORE_VNNI") {  // held below AMX: VNNI's path
    EXPECT_STREQ(int8_path_name(), "vnni (8-bit activations)");
  }
  SCOPED_TRACE(int8_path_name());
  Rng rng(3);
  struct Case {
    std::int64_t N, in, out;
  };
  // On AMX the rows run in blocks of 64, the last rounded up to 16: whole
  // blocks (512), a last one of whole tiles (272) and one rounded (300).
  for (const Case c : {Case{1, 37, 5}, Case{1, 384, 1536}, Case{3, 64, 200}, Case{17, 96, 96}, Case{300, 128, 64},
                       Case{129, 256, 130}, Case{512, 64, 48}, Case{272, 32, 80}}) {
    SCOPED_TRACE(::testing::Message() << c.N << " x " << c.in << " -> " << c.out);
    const std::int64_t ldx = c.in + 5, ldy = c.out + 3;
    std::vector<float> x = normal(c.N * ldx, rng), W = normal(c.out * c.in, rng, 0.05f), b = normal(c.out, rng);
    // Edges: a row at its range's top throughout (every activation at the
    // top level), one all negative, one zero; a weight row at +-127.
    for (std::int64_t k = 0; k < c.in; ++k) {
      x[k] = 4.0f;
      if (c.N > 2) x[ldx + k] = -2.0f - static_cast<float>(k % 3), x[2 * ldx + k] = 0.0f;
      W[k] = 0.05f;
    }
    const QuantizedMatrix m(W, c.out, c.in);
    std::vector<float> want(c.N * ldy, NAN);
    linear_forward_int8_reference(want.data(), ldy, x.data(), ldx, m.weight(), b.data(), c.N, c.in, c.out,
                                  int8_activation_levels());
    // Twice with packs: the copies made at the first call, read at the second.
    for (const bool packed : {false, true, true}) {
      SCOPED_TRACE(packed ? "packed weights" : "plain weights");
      std::vector<float> got(c.N * ldy, NAN);
      linear_forward_int8(got.data(), ldy, x.data(), ldx, m.weight(packed), b.data(), c.N, c.in, c.out);
      for (std::int64_t i = 0; i < c.N; ++i)
        for (std::int64_t o = 0; o < c.out; ++o)
          ASSERT_EQ(got[i * ldy + o], want[i * ldy + o]) << "row " << i << " column " << o;
      for (std::int64_t i = 0; i < c.N; ++i)  // the padding between rows is left alone
        for (std::int64_t o = c.out; o < ldy; ++o) ASSERT_TRUE(std::isnan(got[i * ldy + o]));
    }
  }
}

// Both activation widths against the fp32 product: the error of a product
// is that of its inputs' rounding, about sqrt(in) half-steps of each.
TEST(Int8Gemm, BothWidthsAreWithinQuantizationErrorOfFp32) {
  Rng rng(5);
  const std::int64_t N = 64, in = 384, out = 96;
  const std::vector<float> x = normal(N * in, rng), W = normal(out * in, rng, 0.05f), b = normal(out, rng);
  const QuantizedMatrix m(W, out, in);
  std::vector<float> exact(N * out);
  linear_forward(exact.data(), out, x.data(), in, W.data(), b.data(), N, in, out);
  double norm = 0;
  for (std::int64_t i = 0; i < N * out; ++i) norm += (exact[i] - b[i % out]) * (exact[i] - b[i % out]);
  for (const int levels : {127, 255}) {
    std::vector<float> y(N * out);
    linear_forward_int8_reference(y.data(), out, x.data(), in, m.weight(), b.data(), N, in, out, levels);
    double err = 0;
    for (std::int64_t i = 0; i < N * out; ++i) err += (y[i] - exact[i]) * (y[i] - exact[i]);
    const double relative = std::sqrt(err / norm);
    // Measured 0.0152 (127 levels) and 0.0099 (255), as the steps predict:
    // x's is its row's range (about 6 sd) over the levels, W's its row's
    // max (about 3 sd) over 127, each rounding off a step / sqrt(12).
    EXPECT_LT(relative, levels == 127 ? 0.02 : 0.012) << levels << " levels";
    EXPECT_GT(relative, 1e-4) << "quantization that loses nothing is not quantizing";
  }
}

// A row that holds a NaN or an infinity has no scale: its outputs are NaN,
// as an fp32 product's would be, and the other rows are untouched.
TEST(Int8Gemm, ANonFiniteRowGivesNaNAndSparesTheOthers) {
  Rng rng(9);
  const std::int64_t N = 4, in = 64, out = 8;
  std::vector<float> x = normal(N * in, rng), W = normal(out * in, rng, 0.05f);
  x[1 * in + 5] = NAN;
  x[2 * in + 9] = INFINITY;
  const QuantizedMatrix m(W, out, in);
  for (const bool reference : {false, true}) {
    std::vector<float> y(N * out);
    if (reference) linear_forward_int8_reference(y.data(), out, x.data(), in, m.weight(), nullptr, N, in, out, 127);
    else linear_forward_int8(y.data(), out, x.data(), in, m.weight(), nullptr, N, in, out);
    for (std::int64_t i = 0; i < N; ++i)
      for (std::int64_t o = 0; o < out; ++o)
        EXPECT_EQ(std::isnan(y[i * out + o]), i == 1 || i == 2) << i << ", " << o << (reference ? " (twin)" : "");
  }
}

// The activations' quantizer in vectors (kernels/quantize_rows.cpp) against
// its definition, row by row: every length around the vector width (the
// tail through the same code), a padded stride, ties rounded to even, rows
// of one sign, a zero row, and rows holding a NaN or an infinity.
TEST(Int8Gemm, TheVectorQuantizerKeepsItsDefinition) {
  Rng rng(13);
  for (const float top : {127.0f, 255.0f}) {
    for (std::int64_t in = 1; in <= 37; ++in) {
      const std::int64_t N = 7, ldx = in + 3;
      std::vector<float> x(N * ldx, 1e9f);  // the stride's gap: never read
      for (std::int64_t i = 0; i < N; ++i)
        for (std::int64_t k = 0; k < in; ++k) x[i * ldx + k] = rng.normal();
      for (std::int64_t k = 0; k < in; ++k) {
        x[1 * ldx + k] = std::fabs(x[1 * ldx + k]);   // positive only
        x[2 * ldx + k] = -std::fabs(x[2 * ldx + k]);  // negative only
        x[3 * ldx + k] = 0.0f;                        // zero
        // Ties: top at the end makes the scale 1, and k + 0.5 rounds to the even neighbour.
        x[4 * ldx + k] = k + 1 == in ? top : static_cast<float>(k % 8) + 0.5f;
      }
      x[5 * ldx + in / 2] = NAN;
      x[6 * ldx + in - 1] = -INFINITY;
      std::vector<std::uint8_t> q(N * in);
      std::vector<float> scale(N);
      std::vector<std::int32_t> zero(N);
      quantize_rows_u8(x.data(), ldx, N, in, top, q.data(), scale.data(), zero.data());
      for (std::int64_t i = 0; i < N; ++i) {
        const float* row = x.data() + i * ldx;
        const std::string where = "row " + std::to_string(i) + ", length " + std::to_string(in);
        if (i >= 5) {
          EXPECT_TRUE(std::isnan(scale[i])) << where;
          for (std::int64_t k = 0; k < in; ++k) EXPECT_EQ(q[i * in + k], 0) << where;
          continue;
        }
        float lo = 0.0f, hi = 0.0f;
        for (std::int64_t k = 0; k < in; ++k) lo = std::min(lo, row[k]), hi = std::max(hi, row[k]);
        const float s = hi > lo ? (hi - lo) / top : 1.0f;
        const float z = std::clamp(std::nearbyint(-lo / s), 0.0f, top);
        EXPECT_EQ(scale[i], s) << where;
        EXPECT_EQ(zero[i], static_cast<std::int32_t>(z)) << where;
        for (std::int64_t k = 0; k < in; ++k) {
          const float want = std::clamp(std::nearbyint(row[k] * (1.0f / s)) + z, 0.0f, top);
          EXPECT_EQ(q[i * in + k], static_cast<std::uint8_t>(want)) << where << ", value " << k;
        }
        if (i == 4 && in > 2) {
          EXPECT_EQ(q[i * in + 0], 0) << "0.5 rounds to 0";
          EXPECT_EQ(q[i * in + 1], 2) << "1.5 rounds to 2";
        }
      }
    }
  }
}

// A store frozen for int8 holds each matrix quantized by rows (what the
// layers' products read), and nothing for vectors; frozen otherwise, none.
TEST(Int8Gemm, AStoreFrozenForInt8QuantizesItsMatrices) {
  Rng rng(11);
  for (const Precision p : {Precision::kF32, Precision::kInt8}) {
    ParamStore store;
    const ParamStore::Handle w = store.add("w", {3, 5}), b = store.add("b", {3}), e = store.add("e", {4, 2});
    store.finalize();
    for (float& v : store.all_data()) v = rng.normal();
    const std::vector<float> W(store.data(w), store.data(w) + 15);
    store.freeze(p);
    if (p != Precision::kInt8) {
      EXPECT_EQ(store.int8(w), nullptr);
      continue;
    }
    ASSERT_NE(store.int8(w), nullptr);
    ASSERT_NE(store.int8(e), nullptr);
    EXPECT_EQ(store.int8(b), nullptr);
    const QuantizedMatrix want(W, 3, 5);
    for (int i = 0; i < 15; ++i) EXPECT_EQ(store.int8(w)->q[i], want.q[i]) << i;
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(store.int8(w)->scale[r], want.scale[r]);
      EXPECT_EQ(store.int8(w)->row_sum[r], want.row_sum[r]);
    }
    EXPECT_EQ(store.int8(w)->rows_from(2, 5).scale, store.int8(w)->scale + 2);
  }
}

TEST(Int8Gemm, TheTwinRefusesOtherWidths) {
  const std::vector<float> x(4), W(4);
  const QuantizedMatrix m(W, 2, 2);
  std::vector<float> y(4);
  EXPECT_THROW(linear_forward_int8_reference(y.data(), 2, x.data(), 2, m.weight(), nullptr, 2, 2, 2, 100), ConfigError);
}

}  // namespace
}  // namespace multihead
