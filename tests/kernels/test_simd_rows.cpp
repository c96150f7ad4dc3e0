// SPDX-License-Identifier: Apache-2.0
// Each vectorised row primitive of simd_rows.h and the tile micro-kernel
// (tile_gemm.h) against a plain scalar loop: every length from 0 to two
// vectors and one more, so that the full-vector loops, the tails and the
// empty case all run, on pointers one float off the vector alignment.
// Element-wise results that round the same way must be equal; sums and
// exponentials, whose order or polynomial differs, within a few ULPs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "multihead/core/rng.h"
#include "simd_rows.h"
#include "tile_gemm.h"

namespace multihead {
namespace {

// The build's baseline Highway target, as this file is compiled.
namespace simd = HWY_NAMESPACE::simd;

std::int64_t lanes() { return static_cast<std::int64_t>(simd::hn::Lanes(simd::DF())); }

// n random values in [-4, 4) at an address one float past a 64-byte boundary.
struct Row {
  std::vector<float> storage;
  float* x;
  Row(std::int64_t n, Rng& rng) : storage(static_cast<std::size_t>(n + 32)) {
    auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
    x = storage.data() + ((64 - addr % 64) % 64) / sizeof(float) + 1;
    for (std::int64_t i = 0; i < n; ++i) x[i] = 8.0f * rng.uniform() - 4.0f;
  }
};

// |a - b| <= tol * scale, where scale bounds the size of the terms summed.
void expect_near_rel(double a, double b, double scale, double tol, const std::string& what) {
  EXPECT_LE(std::fabs(a - b), tol * std::max(scale, 1e-30)) << what << ": " << a << " vs " << b;
}

class SimdRows : public ::testing::TestWithParam<std::int64_t> {
 protected:
  std::int64_t n() const { return GetParam(); }
};

TEST_P(SimdRows, MaxSumAndDot) {
  Rng rng(static_cast<std::uint64_t>(n() + 1));
  Row a(n(), rng), b(n(), rng);
  float m = -std::numeric_limits<float>::infinity();
  double s = 0, abs_s = 0, d = 0, abs_d = 0;
  for (std::int64_t i = 0; i < n(); ++i) {
    m = std::max(m, a.x[i]);
    s += a.x[i], abs_s += std::fabs(a.x[i]);
    d += static_cast<double>(a.x[i]) * b.x[i], abs_d += std::fabs(static_cast<double>(a.x[i]) * b.x[i]);
  }
  EXPECT_EQ(simd::row_max(a.x, n()), m);  // -inf for n = 0
  // One NaN anywhere, in the vector part or the tail, makes the maximum NaN.
  for (std::int64_t at : {std::int64_t{0}, n() / 2, n() - 1}) {
    if (n() == 0) break;
    const float keep = a.x[at];
    a.x[at] = std::nanf("");
    EXPECT_TRUE(std::isnan(simd::row_max(a.x, n()))) << at;
    a.x[at] = keep;
  }
  EXPECT_TRUE(std::isnan(simd::max_keeping_nan(std::nanf(""), 1.0f)));
  EXPECT_TRUE(std::isnan(simd::max_keeping_nan(-std::numeric_limits<float>::infinity(), std::nanf(""))));
  expect_near_rel(simd::row_sum(a.x, n()), s, abs_s, 1e-6, "row_sum");
  expect_near_rel(simd::dot(a.x, b.x, n()), d, abs_d, 1e-6, "dot");
}

TEST_P(SimdRows, ScaleAndAddScalarAreExact) {
  Rng rng(static_cast<std::uint64_t>(n() + 2));
  Row a(n(), rng), b(n(), rng);
  const std::vector<float> a0(a.x, a.x + n()), b0(b.x, b.x + n());
  const float guard = a.x[n()];  // the element past the row must not be written
  simd::scale_row(a.x, n(), 0.37f);
  simd::add_scalar(b.x, n(), -1.25f);
  for (std::int64_t i = 0; i < n(); ++i) {
    EXPECT_EQ(a.x[i], a0[static_cast<std::size_t>(i)] * 0.37f) << i;
    EXPECT_EQ(b.x[i], b0[static_cast<std::size_t>(i)] + -1.25f) << i;
  }
  EXPECT_EQ(a.x[n()], guard);
}

TEST_P(SimdRows, ExpShiftSumWithinTwoUlps) {
  Rng rng(static_cast<std::uint64_t>(n() + 3));
  Row a(n(), rng);
  const std::vector<float> x0(a.x, a.x + n());
  const float sum = simd::exp_shift_sum(a.x, n(), 1.5f);
  double want_sum = 0;
  for (std::int64_t i = 0; i < n(); ++i) {
    const double want = std::exp(static_cast<double>(x0[static_cast<std::size_t>(i)]) - 1.5);
    want_sum += want;
    EXPECT_LE(std::fabs(a.x[i] - want), 2 * std::numeric_limits<float>::epsilon() * want) << i;
  }
  expect_near_rel(sum, want_sum, want_sum, 1e-6, "exp sum");
}

TEST_P(SimdRows, SoftmaxGradients) {
  Rng rng(static_cast<std::uint64_t>(n() + 4));
  Row dp(n(), rng), p(n(), rng), pd(n(), rng), dq(n(), rng);
  for (std::int64_t i = 0; i < n(); ++i) dq.x[i] = dp.x[i];
  const std::vector<float> dp0(dp.x, dp.x + n());
  simd::softmax_grad_row(dp.x, p.x, n(), 0.3f);
  simd::dropout_softmax_grad_row(dq.x, p.x, pd.x, n(), 0.3f);
  for (std::int64_t i = 0; i < n(); ++i) {
    const float g = dp0[static_cast<std::size_t>(i)];
    EXPECT_EQ(dp.x[i], p.x[i] * (g - 0.3f)) << i;
    // pd * dp - p * delta with one fused multiply-add: within an ULP of the terms' size.
    const double want = static_cast<double>(pd.x[i]) * g - static_cast<double>(p.x[i]) * 0.3;
    expect_near_rel(dq.x[i], want, std::fabs(pd.x[i] * g) + std::fabs(p.x[i] * 0.3f), 2e-7, "dropout grad");
  }
}

TEST_P(SimdRows, EluPlusOne) {
  Rng rng(static_cast<std::uint64_t>(n() + 5));
  Row x(n(), rng), y(n(), rng);
  simd::elu_plus_one(y.x, x.x, n());
  for (std::int64_t i = 0; i < n(); ++i) {
    const double want = x.x[i] > 0 ? x.x[i] + 1.0 : std::exp(static_cast<double>(x.x[i]));
    EXPECT_LE(std::fabs(y.x[i] - want), 2 * std::numeric_limits<float>::epsilon() * want) << i;
  }
}

// C (M, N) = alpha op(A) B (+ C), op(A) = A or A^T, against three loops in double.
TEST_P(SimdRows, TileGemmEveryShapeAndAccumulate) {
  const std::int64_t N = n();
  Rng rng(static_cast<std::uint64_t>(N + 6));
  for (std::int64_t M : {1, 5, 7, 13})
    for (std::int64_t K : {1, 3, 17})
      for (bool trans : {false, true})
        for (bool accumulate : {false, true}) {
          const std::int64_t lda = (trans ? M : K) + 1, ldb = N + 2, ldc = N + 3;
          Row A((trans ? K : M) * lda, rng), B(K * ldb, rng), C(M * ldc, rng);
          std::vector<double> want(static_cast<std::size_t>(M * N));
          for (std::int64_t i = 0; i < M; ++i)
            for (std::int64_t j = 0; j < N; ++j) {
              double acc = 0;
              for (std::int64_t k = 0; k < K; ++k)
                acc += static_cast<double>(trans ? A.x[k * lda + i] : A.x[i * lda + k]) * B.x[k * ldb + j];
              want[static_cast<std::size_t>(i * N + j)] = 0.5 * acc + (accumulate ? C.x[i * ldc + j] : 0.0);
            }
          const std::vector<float> before(C.x, C.x + M * ldc);
          const simd::GemmB b = simd::row_major_b(B.x, ldb);
          if (trans) simd::tile_gemm<true>(C.x, ldc, A.x, lda, b, M, N, K, 0.5f, accumulate);
          else simd::tile_gemm<false>(C.x, ldc, A.x, lda, b, M, N, K, 0.5f, accumulate);
          for (std::int64_t i = 0; i < M; ++i) {
            for (std::int64_t j = 0; j < N; ++j)
              ASSERT_NEAR(C.x[i * ldc + j], want[static_cast<std::size_t>(i * N + j)], 1e-5 * (K + 1) * 16)
                  << "M=" << M << " N=" << N << " K=" << K << " trans=" << trans << " accumulate=" << accumulate;
            for (std::int64_t j = N; j < ldc && i * ldc + j < M * ldc; ++j)  // the padding is left alone
              ASSERT_EQ(C.x[i * ldc + j], before[static_cast<std::size_t>(i * ldc + j)]);
          }
        }
}

// B over several of the micro-kernel's column blocks, as a row-major
// matrix and as panels of src^T (pack_panels_t), against loops in double:
// the same values either way, every block and the tail block in place.
TEST(TileGemm, PanelsAndRowMajorAcrossColumnBlocks) {
  const std::int64_t W = simd::gemm_block_cols();
  Rng rng(21);
  for (std::int64_t N : {W - 1, W, W + 1, 3 * W + 5})
    for (std::int64_t K : {1, 32, 33}) {
      const std::int64_t M = 13, lda = K + 2, lds = K + 1, ldc = N + 1;
      Row A(M * lda, rng), src(N * lds, rng), C(M * ldc, rng);  // src (N, K): B = src^T
      std::vector<float> Bt(static_cast<std::size_t>(K * N));   // B (K, N) row-major
      for (std::int64_t k = 0; k < K; ++k)
        for (std::int64_t j = 0; j < N; ++j) Bt[static_cast<std::size_t>(k * N + j)] = src.x[j * lds + k];
      std::vector<float> panels(static_cast<std::size_t>(simd::panels_size(K, N)));
      const simd::GemmB packed = simd::pack_panels_t(panels.data(), src.x, lds, N, K);
      for (const simd::GemmB& b : {simd::row_major_b(Bt.data(), N), packed}) {
        simd::tile_gemm<false>(C.x, ldc, A.x, lda, b, M, N, K, 1.0f, false);
        for (std::int64_t i = 0; i < M; ++i)
          for (std::int64_t j = 0; j < N; ++j) {
            double want = 0;
            for (std::int64_t k = 0; k < K; ++k) want += static_cast<double>(A.x[i * lda + k]) * src.x[j * lds + k];
            ASSERT_NEAR(C.x[i * ldc + j], want, 1e-5 * (K + 1) * 16)
                << "N=" << N << " K=" << K << " panels=" << (b.at == packed.at) << " i=" << i << " j=" << j;
          }
      }
    }
}

std::vector<std::int64_t> lengths() {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i <= 2 * lanes() + 1; ++i) v.push_back(i);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Lengths, SimdRows, ::testing::ValuesIn(lengths()),
                         [](const auto& p) { return fmt::format("n{}", p.param); });

}  // namespace
}  // namespace multihead
