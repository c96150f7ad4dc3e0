// SPDX-License-Identifier: Apache-2.0
// gemm on both fp32 backends against a double-precision triple loop: every
// transpose combination, padded row strides, alpha and beta, empty products,
// calls from inside a parallel region, products tall enough for the
// OpenBLAS row split, and wide ones of few rows for the oneDNN column split.
#include <omp.h>

#include <vector>

#include "multihead/core/error.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/transpose.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close;

struct GemmCase {
  std::int64_t M, N, K;
  Trans ta, tb;
  float alpha, beta;
};

// Operands stored with a row stride of cols + 3, so a kernel that assumes
// packed rows reads the padding (NaN) and fails.
struct Operand {
  std::int64_t rows, cols, ld;
  std::vector<float> data;
  Operand(std::int64_t r, std::int64_t c, Rng& rng) : rows(r), cols(c), ld(c + 3), data(r * (c + 3), NAN) {
    for (std::int64_t i = 0; i < r; ++i)
      for (std::int64_t j = 0; j < c; ++j) data[i * ld + j] = rng.normal();
  }
  float at(std::int64_t i, std::int64_t j) const { return data[i * ld + j]; }
};

// C (M, N) after the product, compared to the loop in double; padding checked untouched.
void check_case(const GemmCase& g, GemmBackend backend, bool in_parallel_region) {
  Rng rng(static_cast<std::uint64_t>(g.M * 131 + g.N * 17 + g.K));
  const bool ta = g.ta == Trans::kYes, tb = g.tb == Trans::kYes;
  Operand A(ta ? g.K : g.M, ta ? g.M : g.K, rng), B(tb ? g.N : g.K, tb ? g.K : g.N, rng), C(g.M, g.N, rng);
  for (std::int64_t i = 0; i < g.M; ++i)
    for (std::int64_t j = g.N; j < C.ld; ++j) C.data[i * C.ld + j] = 7.0f;  // padding that must survive
  std::vector<double> expected(g.M * g.N);
  for (std::int64_t i = 0; i < g.M; ++i)
    for (std::int64_t j = 0; j < g.N; ++j) {
      double acc = 0.0;
      for (std::int64_t p = 0; p < g.K; ++p)
        acc += static_cast<double>(ta ? A.at(p, i) : A.at(i, p)) * (tb ? B.at(j, p) : B.at(p, j));
      expected[i * g.N + j] = g.alpha * acc + (g.beta == 0.0f ? 0.0 : g.beta * static_cast<double>(C.at(i, j)));
    }
  if (g.beta == 0.0f)  // beta = 0 must ignore C, NaN included
    for (std::int64_t i = 0; i < g.M; ++i)
      for (std::int64_t j = 0; j < g.N; ++j) C.data[i * C.ld + j] = NAN;

  RuntimeContext ctx = context();
  ctx.gemm = backend;
  const ContextBinding bound(ctx);
  auto call = [&] {
    gemm(g.ta, g.tb, g.M, g.N, g.K, g.alpha, A.data.data(), A.ld, B.data.data(), B.ld, g.beta, C.data.data(), C.ld);
  };
  if (in_parallel_region) {
#pragma omp parallel num_threads(2)
    {
      const ContextBinding worker(ctx);  // whichever thread runs it, under the test's backend
#pragma omp single
      call();
    }
  } else {
    call();
  }

  std::vector<float> actual(g.M * g.N);
  for (std::int64_t i = 0; i < g.M; ++i)
    for (std::int64_t j = 0; j < g.N; ++j) {
      actual[i * g.N + j] = C.at(i, j);
      for (std::int64_t pad = g.N; pad < C.ld; ++pad) ASSERT_EQ(C.data[i * C.ld + pad], 7.0f) << "row " << i;
    }
  // Each sum has K products of unit normals: rounding grows like sqrt(K).
  const double atol = 1e-5 * (1.0 + std::sqrt(static_cast<double>(g.K))) * (1.0 + std::abs(g.alpha));
  EXPECT_TRUE(all_close(std::span<const float>(actual), std::span<const double>(expected), atol, 1e-5))
      << gemm_backend_name(backend) << " M=" << g.M << " N=" << g.N << " K=" << g.K << " ta=" << ta << " tb=" << tb
      << " alpha=" << g.alpha << " beta=" << g.beta << (in_parallel_region ? " in a parallel region" : "");
}

class GemmBackends : public ::testing::TestWithParam<GemmBackend> {};

TEST_P(GemmBackends, MatchesTheDoubleLoopForEveryTransposeAndOddSizes) {
  const Trans no = Trans::kNo, yes = Trans::kYes;
  for (Trans ta : {no, yes})
    for (Trans tb : {no, yes})
      for (auto [M, N, K] : {std::tuple{1, 1, 1}, {7, 5, 3}, {13, 65, 31}, {64, 17, 129}})
        check_case({M, N, K, ta, tb, 1.0f, 0.0f}, GetParam(), false);
}

TEST_P(GemmBackends, AppliesAlphaAndBeta) {
  for (auto [alpha, beta] : {std::pair{0.5f, 1.0f}, {-2.0f, 0.25f}, {1.0f, -1.0f}})
    check_case({9, 23, 11, Trans::kNo, Trans::kYes, alpha, beta}, GetParam(), false);
}

TEST_P(GemmBackends, EmptyInnerDimensionScalesC) {
  check_case({5, 6, 0, Trans::kNo, Trans::kNo, 1.0f, 0.0f}, GetParam(), false);
  check_case({5, 6, 0, Trans::kYes, Trans::kNo, 1.0f, 0.5f}, GetParam(), false);
}

TEST_P(GemmBackends, InsideAParallelRegion) {
  check_case({96, 72, 40, Trans::kNo, Trans::kYes, 1.0f, 1.0f}, GetParam(), true);
}

// Tall enough (M >= 256 rows per thread) that the OpenBLAS backend splits the
// rows between threads; uneven so the last share is short.
TEST_P(GemmBackends, TallProducts) {
  check_case({1037, 48, 64, Trans::kNo, Trans::kYes, 1.0f, 1.0f}, GetParam(), false);
  check_case({1037, 48, 64, Trans::kYes, Trans::kNo, 1.0f, 0.0f}, GetParam(), false);
}

// Few rows by many columns (decoding steps), which oneDNN's backend splits by
// columns between threads: three threads, so the shares are uneven, for
// every transpose, one row included.
TEST_P(GemmBackends, WideProductsOfFewRows) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  for (Trans ta : {Trans::kNo, Trans::kYes})
    for (Trans tb : {Trans::kNo, Trans::kYes})
      for (auto [M, N, K] : {std::tuple{1, 773, 64}, {32, 401, 37}, {128, 200, 16}})
        check_case({M, N, K, ta, tb, 1.0f, 0.5f}, GetParam(), false);
  omp_set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(Both, GemmBackends, ::testing::Values(GemmBackend::kOneDnn, GemmBackend::kOpenBlas),
                         [](const auto& p) { return std::string(gemm_backend_name(p.param)); });

TEST(GemmBackend, NamesRoundTripAndUnknownNamesAreRefused) {
  for (GemmBackend b : {GemmBackend::kOneDnn, GemmBackend::kOpenBlas})
    EXPECT_EQ(parse_gemm_backend(gemm_backend_name(b)), b);
  try {
    parse_gemm_backend("mkl");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "gemm backend must be onednn or openblas, got 'mkl'");
  }
}

// The SIMD transpose works in 4 x 4 blocks: every size from 1 to 9 each way
// meets every remainder, against the one-element-at-a-time twin.
TEST(Transpose, MatchesItsReferenceTwinAtEveryRemainder) {
  for (std::int64_t rows = 1; rows <= 9; ++rows)
    for (std::int64_t cols = 1; cols <= 9; ++cols) {
      Rng rng(static_cast<std::uint64_t>(rows * 10 + cols));
      Operand src(rows, cols, rng);
      const std::int64_t ldd = rows + 2;
      std::vector<float> got(cols * ldd, -1.0f), want(cols * ldd, -1.0f);
      transpose(got.data(), ldd, src.data.data(), src.ld, rows, cols);
      transpose_ref(want.data(), ldd, src.data.data(), src.ld, rows, cols);
      ASSERT_EQ(got, want) << rows << "x" << cols;
    }
}

TEST(Transpose, OddSizesAndPaddedStrides) {
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 3}, {65, 17}, {512, 64}}) {
    Rng rng(static_cast<std::uint64_t>(rows * 100 + cols));
    Operand src(rows, cols, rng);       // row stride cols + 3
    const std::int64_t ldd = rows + 5;  // padding that must survive
    std::vector<float> dst(cols * ldd, 9.0f);
    transpose(dst.data(), ldd, src.data.data(), src.ld, rows, cols);
    for (std::int64_t c = 0; c < cols; ++c)
      for (std::int64_t r = 0; r < ldd; ++r)
        ASSERT_EQ(dst[c * ldd + r], r < rows ? src.at(r, c) : 9.0f) << rows << "x" << cols << " at " << c << "," << r;
  }
}

}  // namespace
}  // namespace multihead
