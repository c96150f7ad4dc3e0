// SPDX-License-Identifier: Apache-2.0
// bf16 products (fp32 accumulation) against their reference twin in double,
// on the CPU's path (oneDNN's bf16 matmul where it has bf16 units) and on
// the widening path, which every CPU runs: every transpose, padded strides,
// alpha and beta, empty products, calls from parallel regions, and the
// cached primitives reused. ctest runs this file once more with
// ONEDNN_MAX_CPU_ISA=AVX512_CORE, where the CPU's path must be kWiden.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "multihead/core/rng.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/linear.h"
#include "multihead/kernels/machine.h"
#include "test_util.h"

namespace multihead {
namespace {

// A (rows, cols) bf16 operand with row stride cols + 3; the padding holds NaN.
struct Operand {
  std::int64_t rows, cols, ld;
  std::vector<BF16> data;
  Operand(std::int64_t r, std::int64_t c, Rng& rng) : rows(r), cols(c), ld(c + 3), data(r * (c + 3)) {
    for (BF16& x : data) x.bits = float_to_bf16(NAN);
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j) data[i * ld + j].bits = float_to_bf16(rng.normal());
  }
};

struct Case {
  std::int64_t M, N, K;
  Trans ta, tb;
  float alpha, beta;
};

std::string describe(const Case& g) {
  return fmt::format("M={} N={} K={} ta={} tb={} alpha={} beta={} path {}", g.M, g.N, g.K, g.ta == Trans::kYes,
                     g.tb == Trans::kYes, g.alpha, g.beta, bf16_path_name(bf16_path()));
}

void check_case(const Case& g, bool in_parallel_region = false) {
  Rng rng(static_cast<std::uint64_t>(g.M * 131 + g.N * 17 + g.K));
  const bool ta = g.ta == Trans::kYes, tb = g.tb == Trans::kYes;
  Operand A(ta ? g.K : g.M, ta ? g.M : g.K, rng), B(tb ? g.N : g.K, tb ? g.K : g.N, rng);
  const std::int64_t ldc = g.N + 2;
  std::vector<float> C(g.M * ldc, 7.0f), expected;
  for (std::int64_t i = 0; i < g.M; ++i)
    for (std::int64_t j = 0; j < g.N; ++j) C[i * ldc + j] = g.beta == 0.0f ? NAN : rng.normal();  // beta 0 ignores C
  expected = C;
  gemm_bf16_ref(g.ta, g.tb, g.M, g.N, g.K, g.alpha, A.data.data(), A.ld, B.data.data(), B.ld, g.beta, expected.data(),
                ldc);
  // In a parallel region each of two threads computes its own copy of C.
  std::vector<std::vector<float>> results(in_parallel_region ? 2 : 1, C);
  auto call = [&](std::vector<float>& c) {
    gemm_bf16(g.ta, g.tb, g.M, g.N, g.K, g.alpha, A.data.data(), A.ld, B.data.data(), B.ld, g.beta, c.data(), ldc);
  };
  if (in_parallel_region) {
#pragma omp parallel num_threads(2)
    call(results[static_cast<std::size_t>(omp_get_thread_num())]);
  } else {
    call(results[0]);
  }
  for (const std::vector<float>& c : results) {
    for (std::int64_t i = 0; i < g.M; ++i)
      for (std::int64_t pad = g.N; pad < ldc; ++pad) ASSERT_EQ(c[i * ldc + pad], 7.0f) << describe(g);
    // bf16 products are exact in fp32; only the order of the fp32 sums
    // differs from the reference, an error that grows like sqrt(K).
    const double atol = 1e-5 * (1.0 + std::sqrt(static_cast<double>(g.K))) * (1.0 + std::abs(g.alpha));
    EXPECT_TRUE(test::all_close(std::span<const float>(c), std::span<const float>(expected), atol, 1e-5))
        << describe(g);
  }
}

// On the CPU's path (bf16_path()); the widening path where the CPU has bf16
// units is the same tests under ONEDNN_MAX_CPU_ISA=AVX512_CORE (ctest
// bf16_paths_without_bf16_units).

TEST(Bf16Paths, MatchesTheReferenceForEveryTransposeAndOddSizes) {
  const Trans no = Trans::kNo, yes = Trans::kYes;
  for (Trans ta : {no, yes})
    for (Trans tb : {no, yes})
      for (auto [M, N, K] : {std::tuple{1, 1, 1}, {7, 5, 3}, {13, 65, 31}, {64, 17, 129}, {300, 40, 96}, {32, 401, 37}})
        check_case({M, N, K, ta, tb, 1.0f, 0.0f});
}

TEST(Bf16Paths, AppliesAlphaAndBeta) {
  for (auto [alpha, beta] : {std::pair{0.5f, 1.0f}, {-2.0f, 0.25f}, {1.0f, -1.0f}})
    check_case({9, 23, 11, Trans::kNo, Trans::kYes, alpha, beta});
}

TEST(Bf16Paths, EmptyProducts) {
  check_case({5, 6, 0, Trans::kNo, Trans::kNo, 1.0f, 0.0f});
  check_case({5, 6, 0, Trans::kYes, Trans::kNo, 1.0f, 0.5f});
  check_case({0, 6, 4, Trans::kNo, Trans::kNo, 1.0f, 0.0f});
}

// The bias row added by the product equals the reference plus the bias, for
// every transpose, an empty product (the bias alone), a reused primitive,
// and products of few rows by many columns, shared out by columns between
// the threads (few_rows.h).
TEST(Bf16Paths, AddsABiasRowToEveryRow) {
  const Trans no = Trans::kNo, yes = Trans::kYes;
  for (Trans ta : {no, yes})
    for (Trans tb : {no, yes})
      for (auto [M, N, K] :
           {std::tuple{1, 1, 1}, {13, 65, 31}, {300, 40, 96}, {300, 40, 96}, {5, 6, 0}, {1, 773, 64}, {32, 401, 37}}) {
        const Case g{M, N, K, ta, tb, 1.0f, 0.0f};
        Rng rng(static_cast<std::uint64_t>(M * 7 + N + K));
        Operand A(ta == yes ? K : M, ta == yes ? M : K, rng), B(tb == yes ? N : K, tb == yes ? K : N, rng);
        std::vector<float> bias(N);
        for (float& b : bias) b = rng.normal();
        const std::int64_t ldc = N + 2;
        std::vector<float> c(M * ldc, 7.0f), expected(M * ldc, 7.0f);
        for (std::int64_t i = 0; i < M; ++i)
          for (std::int64_t j = 0; j < N; ++j) c[i * ldc + j] = NAN, expected[i * ldc + j] = bias[j];
        gemm_bf16_ref(ta, tb, M, N, K, 1.0f, A.data.data(), A.ld, B.data.data(), B.ld, 1.0f, expected.data(), ldc);
        gemm_bf16_bias(ta, tb, M, N, K, A.data.data(), A.ld, B.data.data(), B.ld, bias.data(), c.data(), ldc);
        const double atol = 1e-5 * (1.0 + std::sqrt(static_cast<double>(K)));
        EXPECT_TRUE(test::all_close(std::span<const float>(c), std::span<const float>(expected), atol, 1e-5))
            << describe(g);  // the padding, 7 in both, is compared too
      }
}

// With a bf16 C the product writes each value rounded: the bits of the fp32
// product (with its bias) rounded by narrow, padding untouched; and results
// in bf16's subnormal range (scaled operands) come out as narrow rounds them
// or as zero, never otherwise.
TEST(Bf16Paths, WritesBf16RoundedAsTheFp32ProductThenNarrow) {
  const Trans no = Trans::kNo, yes = Trans::kYes;
  for (Trans tb : {no, yes})
    for (bool with_bias : {false, true})
      for (float scale : {1.0f, 1e-20f})
        for (auto [M, N, K] : {std::tuple{1, 1, 1}, {13, 65, 31}, {300, 40, 96}, {32, 401, 37}}) {
          Rng rng(static_cast<std::uint64_t>(M * 5 + N + K));
          Operand A(M, K, rng), B(tb == yes ? N : K, tb == yes ? K : N, rng);
          for (BF16& a : A.data) a.bits = float_to_bf16(bf16_to_float(a.bits) * scale);
          for (BF16& b : B.data) b.bits = float_to_bf16(bf16_to_float(b.bits) * scale);
          std::vector<float> bias(N);
          for (float& b : bias) b = with_bias ? rng.normal() * scale * scale : 0.0f;
          const std::int64_t ldc = N + 3;
          std::vector<float> c32(M * N);
          gemm_bf16_bias(no, tb, M, N, K, A.data.data(), A.ld, B.data.data(), B.ld, bias.data(), c32.data(), N);
          if (!with_bias) {  // no bias row at all: the same values as a zero one
            std::vector<float> none(M * N, NAN);
            gemm_bf16_bias(no, tb, M, N, K, A.data.data(), A.ld, B.data.data(), B.ld, nullptr, none.data(), N);
            for (std::size_t i = 0; i < none.size(); ++i) ASSERT_EQ(none[i], c32[i]) << "element " << i;
          }
          std::vector<BF16> want(M * ldc, BF16{0x1234}), got(M * ldc, BF16{0x1234});
          for (std::int64_t i = 0; i < M; ++i) narrow(want.data() + i * ldc, c32.data() + i * N, N);
          gemm_bf16_bias(no, tb, M, N, K, A.data.data(), A.ld, B.data.data(), B.ld, with_bias ? bias.data() : nullptr,
                         got.data(), ldc);
          int flushed = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            if (got[i].bits == want[i].bits) continue;
            const bool subnormal = (want[i].bits & 0x7F80u) == 0;  // exponent field zero
            ASSERT_TRUE(subnormal && (got[i].bits & 0x7FFFu) == 0)
                << "element " << i << ": " << got[i].bits << " against " << want[i].bits << " scale " << scale;
            ++flushed;
          }
          if (scale == 1.0f) {
            EXPECT_EQ(flushed, 0);
          }
        }
}

// The same shape twice reuses the cached primitive, from several threads at once.
TEST(Bf16Paths, CachedPrimitivesInsideAParallelRegion) {
  check_case({96, 72, 40, Trans::kNo, Trans::kYes, 1.0f, 1.0f});
  check_case({96, 72, 40, Trans::kNo, Trans::kYes, 1.0f, 1.0f}, true);
}

// The bf16 linear kernels equal the fp32 ones on the rounded values: x and
// W as stored, dy rounded to bf16 for the two products of backward.
TEST(Bf16Paths, LinearKernelsEqualFp32OnTheRoundedValues) {
  Rng rng(6);
  const std::int64_t N = 300, in = 24, out = 10;
  Tensor x = test::random_tensor({N, in}, rng), w = test::random_tensor({out, in}, rng);
  Tensor b = test::random_tensor({out}, rng), dy = test::random_tensor({N, out}, rng);
  Tensor xb = narrow_tensor(x, DType::kBF16), wb = bf16_weights(w.f32(), out, in);
  Tensor xr = widen_tensor(xb), wr = widen_tensor(wb), dyr = widen_tensor(narrow_tensor(dy, DType::kBF16));
  Tensor y1({N, out}), y2({N, out}), dx1({N, in}), dx2({N, in}), dw1({out, in}), dw2({out, in}), db1({out}), db2({out});
  linear_forward_bf16(y1.f32(), out, xb.data<BF16>(), in, wb.data<BF16>(), b.f32(), N, in, out);
  linear_backward_bf16(dx1.f32(), in, false, dw1.f32(), db1.f32(), dy.f32(), out, xb.data<BF16>(), in, wb.data<BF16>(),
                       N, in, out);
  linear_forward<float>(y2.f32(), out, xr.f32(), in, wr.f32(), b.f32(), N, in, out);
  linear_backward<float>(dx2.f32(), in, false, dw2.f32(), nullptr, dyr.f32(), out, xr.f32(), in, wr.f32(), N, in, out);
  linear_backward<float>(nullptr, in, false, nullptr, db2.f32(), dy.f32(), out, xr.f32(), in, wr.f32(), N, in, out);
  EXPECT_TRUE(test::all_close(y1, y2));
  EXPECT_TRUE(test::all_close(dx1, dx2));
  EXPECT_TRUE(test::all_close(dw1, dw2, 1e-4, 1e-5));  // sums of 300 rows in another order
  EXPECT_TRUE(test::all_close(db1, db2, 0, 0));        // the bias gradient sums fp32 dy, unrounded
}

// Bias gradients are column sums, shared between threads by blocks of
// columns: each column still sums its rows in order, the bits of the serial
// loop, with dy's rows strided and the columns not a whole number of blocks.
// The rounded dy the products read is the same rows rounded.
TEST(Bf16Paths, BiasGradientsSumEachColumnInRowOrder) {
  Rng rng(7);
  const std::int64_t N = 300, in = 8, out = 301, lddy = out + 3;
  Tensor x = test::random_tensor({N, in}, rng), w = test::random_tensor({out, in}, rng);
  Tensor dy = test::random_tensor({N, lddy}, rng);
  Tensor xb = narrow_tensor(x, DType::kBF16), wb = bf16_weights(w.f32(), out, in);
  std::vector<float> want(out, 0.5f), db_bf16(out, 0.5f), db_f32(out, 0.5f);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < out; ++o) want[o] += dy.f32()[n * lddy + o];
  Tensor dx1({N, in}), dx2({N, in}), dw1({out, in}), dw2({out, in});
  linear_backward_bf16(dx1.f32(), in, false, dw1.f32(), db_bf16.data(), dy.f32(), lddy, xb.data<BF16>(), in,
                       wb.data<BF16>(), N, in, out);
  linear_backward<float>(nullptr, in, false, nullptr, db_f32.data(), dy.f32(), lddy, nullptr, in, nullptr, N, in, out);
  EXPECT_EQ(db_bf16, want);
  EXPECT_EQ(db_f32, want);
  // dx and dW as fp32 products of the rounded values.
  Tensor dyr({N, out});
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < out; ++o)
      dyr.f32()[n * out + o] = bf16_to_float(float_to_bf16(dy.f32()[n * lddy + o]));
  Tensor xr = widen_tensor(xb), wr = widen_tensor(wb);
  linear_backward<float>(dx2.f32(), in, false, dw2.f32(), nullptr, dyr.f32(), out, xr.f32(), in, wr.f32(), N, in, out);
  EXPECT_TRUE(test::all_close(dx1, dx2, 1e-4, 1e-5));
  EXPECT_TRUE(test::all_close(dw1, dw2, 1e-4, 1e-5));
}

// Operands rounded for the products alone: bit for bit narrow()'s rounding
// (ties to even, infinities, NaN kept a NaN), sums added in the same pass;
// on bf16 units an input below fp32's normal range becomes a zero, which
// the units read as narrow()'s subnormal anyway: products on either
// rounding are the same bits.
TEST(Bf16Paths, OperandsRoundAsNarrowAndTheProductsSeeTheSameValues) {
  const bool units = bf16_path() != Bf16Path::kWiden;
  Rng rng(5);
  const std::int64_t n = 37;  // two whole vectors and a partial one
  std::vector<float> src(n);
  for (float& v : src) v = rng.normal();
  const float tie = bf16_to_float(0x3f81) + std::ldexp(1.0f, -8);  // halfway between two bf16 values
  const float specials[] = {tie, -tie, INFINITY, -INFINITY, NAN, 1.17549435e-38f, 3e-39f, -1e-40f, 0.0f, -0.0f};
  std::copy(std::begin(specials), std::end(specials), src.begin() + 20);
  std::vector<BF16> want(n), got(n), got_adding(n);
  narrow(want.data(), src.data(), n);
  round_operand(got.data(), src.data(), n);
  std::vector<float> sums(n, 0.25f);
  round_operand_adding(got_adding.data(), sums.data(), src.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    const bool subnormal = src[i] != 0.0f && std::fabs(src[i]) < 1.17549435e-38f;
    for (const std::vector<BF16>* g : {&got, &got_adding}) {
      if (std::isnan(src[i])) EXPECT_TRUE(std::isnan(bf16_to_float((*g)[i].bits))) << i;
      else if (subnormal && units) EXPECT_EQ((*g)[i].bits & 0x7fff, 0) << i << ": " << src[i];
      else EXPECT_EQ((*g)[i].bits, want[i].bits) << i << ": " << src[i];
    }
    if (!std::isnan(src[i])) EXPECT_EQ(sums[i], 0.25f + src[i]) << i;
  }
  // (1, n) times (n, 1) and (n, 1) times (1, n) on each rounding: the same bits.
  std::vector<float> finite(src);
  for (float& v : finite)
    if (!std::isfinite(v)) v = 1.5f;
  std::vector<BF16> a1(n), a2(n);
  narrow(a1.data(), finite.data(), n);
  round_operand(a2.data(), finite.data(), n);
  std::vector<BF16> ones(n, BF16{float_to_bf16(1.0f)});
  float dot1 = 0, dot2 = 0;
  gemm_bf16(Trans::kNo, Trans::kNo, 1, 1, n, 1.0f, a1.data(), n, ones.data(), 1, 0.0f, &dot1, 1);
  gemm_bf16(Trans::kNo, Trans::kNo, 1, 1, n, 1.0f, a2.data(), n, ones.data(), 1, 0.0f, &dot2, 1);
  EXPECT_EQ(dot1, dot2);
  std::vector<float> outer1(n * n), outer2(n * n);
  gemm_bf16(Trans::kNo, Trans::kNo, n, n, 1, 1.0f, a1.data(), 1, a1.data(), n, 0.0f, outer1.data(), n);
  gemm_bf16(Trans::kNo, Trans::kNo, n, n, 1, 1.0f, a2.data(), 1, a2.data(), n, 0.0f, outer2.data(), n);
  EXPECT_EQ(outer1, outer2);
}

// The path follows oneDNN's ISA: bf16 units where the CPU (and
// ONEDNN_MAX_CPU_ISA) allow them, widening otherwise; machine_info says which.
TEST(Bf16Path, FollowsOneDnnsIsa) {
  const MachineInfo m = machine_info();
  const Bf16Path p = bf16_path();
  EXPECT_EQ(m.bf16_path, bf16_path_name(p));
  if (m.gemm_isa == "avx512_core_amx") EXPECT_EQ(p, Bf16Path::kAmx);
  else if (m.gemm_isa == "avx512_core_bf16") EXPECT_EQ(p, Bf16Path::kAvx512Bf16);
  else EXPECT_EQ(p, Bf16Path::kWiden) << m.gemm_isa;
}

}  // namespace
}  // namespace multihead
