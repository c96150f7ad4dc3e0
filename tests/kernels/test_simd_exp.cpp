// SPDX-License-Identifier: Apache-2.0
// The fused kernels' softmax exponentials (simd::exp_shift_sum, on Highway's
// contrib Exp) against exp in double, ULP by ULP, over the arguments the
// kernels give it; its edges (0, -inf, underflow, NaN); its tails and sums.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "simd_rows.h"
#include "test_util.h"

namespace multihead {
namespace {

// The build's baseline Highway target, as this file is compiled.
namespace simd = HWY_NAMESPACE::simd;

// exp of every x through exp_shift_sum with no shift.
std::vector<float> row_exp(std::vector<float> x) {
  simd::exp_shift_sum(x.data(), static_cast<std::int64_t>(x.size()), 0.0f);
  return x;
}

// Distance in units in the last place between two non-negative floats.
std::int64_t ulps(float a, float b) {
  return std::abs(static_cast<std::int64_t>(std::bit_cast<std::int32_t>(a)) - std::bit_cast<std::int32_t>(b));
}

std::int64_t max_ulps(const std::vector<float>& x, const std::vector<float>& y) {
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x[i])));
    worst = std::max(worst, ulps(y[i], want));
  }
  return worst;
}

TEST(SimdExp, WithinOneUlpOverTheSoftmaxDomain) {
  // Every 97th float from -87.33 up to 0 (a softmax argument is a score less
  // its row's maximum or log-sum-exp), then floats just above 0 (rounding
  // can put an argument there), then uniform samples of [0, 88].
  std::vector<float> x;
  for (std::uint32_t b = std::bit_cast<std::uint32_t>(-87.33f); b > 0x80000000u; b -= 97)
    x.push_back(std::bit_cast<float>(b));
  for (float v = 0x1p-30f; v <= 0x1p-10f; v *= 1.001f) x.push_back(v);
  Rng rng(5);
  for (int i = 0; i < 100000; ++i) x.push_back(88.0f * rng.uniform());
  EXPECT_LE(max_ulps(x, row_exp(x)), 1) << "over " << x.size() << " arguments";
}

TEST(SimdExp, EdgesOfTheDomain) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {0.0f, -0.0f, -inf, -105.0f, -1e30f, -87.33f, 1e-7f, -1e-7f, std::nanf("")};
  const std::vector<float> y = row_exp(x);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  for (int i : {2, 3, 4}) EXPECT_EQ(y[i], 0.0f) << x[i] << ": masked scores must give exactly 0";
  EXPECT_GT(y[5], 0.0f);
  for (int i : {5, 6, 7}) EXPECT_LE(ulps(y[i], static_cast<float>(std::exp(static_cast<double>(x[i])))), 1) << x[i];
  EXPECT_TRUE(std::isnan(y[8])) << "a NaN score must stay NaN, got " << y[8];
}

TEST(SimdExp, ShiftSumCoversEveryTailLength) {
  Rng rng(11);
  for (std::int64_t n = 1; n <= 40; ++n) {
    std::vector<float> row(n);
    for (float& v : row) v = 6.0f * rng.normal();
    row[n / 2] = -std::numeric_limits<float>::infinity();  // a masked score
    const float shift = 3.0f;
    double want_sum = 0.0;
    std::vector<float> want(n);
    for (std::int64_t j = 0; j < n; ++j) {
      // The kernel subtracts in float; exp then sees the rounded difference.
      want[j] = static_cast<float>(std::exp(static_cast<double>(row[j] - shift)));
      want_sum += want[j];
    }
    const float sum = simd::exp_shift_sum(row.data(), n, shift);
    EXPECT_EQ(row[n / 2], 0.0f) << "n=" << n;
    for (std::int64_t j = 0; j < n; ++j) EXPECT_LE(ulps(row[j], want[j]), 2) << "n=" << n << " j=" << j;
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum + 1e-30) << "n=" << n;
  }
}

// With a scale: within a few ULP of exp(scale x - shift) in double (the
// product may be rounded on its own, up to ~4 ULP of the result at these
// magnitudes, or fused with the difference); masked scores still give 0.
TEST(SimdExp, ScaledShiftSumCoversEveryTailLength) {
  Rng rng(12);
  for (std::int64_t n = 1; n <= 40; ++n) {
    std::vector<float> row(n);
    for (float& v : row) v = 6.0f * rng.normal();
    row[n / 2] = -std::numeric_limits<float>::infinity();
    const float scale = 0.17677669f, shift = 0.5f;
    double want_sum = 0.0;
    std::vector<float> want(n);
    for (std::int64_t j = 0; j < n; ++j) {
      want[j] = static_cast<float>(std::exp(static_cast<double>(scale) * row[j] - shift));
      want_sum += want[j];
    }
    const float sum = simd::exp_shift_sum(row.data(), n, shift, scale);
    EXPECT_EQ(row[n / 2], 0.0f) << "n=" << n;
    for (std::int64_t j = 0; j < n; ++j) EXPECT_LE(ulps(row[j], want[j]), 6) << "n=" << n << " j=" << j;
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum + 1e-30) << "n=" << n;
  }
}

// The bf16 kernel's exponentials (exp_shift_sum_coarse): exp(scale x -
// shift) within 3e-6 relative plus what rounding scale x - shift in base 2
// costs (a few float ULPs of the argument), against exp in double, over
// the softmax domain with the scales and shifts the kernel passes; exactly
// 0 where the argument is below ln(FLT_MIN) or -inf, NaN kept, every tail.
TEST(SimdExp, CoarseWithinItsBoundOverTheSoftmaxDomain) {
  for (const auto& [scale, shift] : {std::pair{1.0f, 0.0f}, std::pair{0.125f, 3.0f}, std::pair{1.0f, -40.0f}}) {
    std::vector<float> x;
    for (float v = -87.0f / scale; v <= 1e-6f; v += 0.0137f / scale) x.push_back(v + shift / scale);
    std::vector<float> y = x;
    const float sum = simd::exp_shift_sum_coarse(y.data(), static_cast<std::int64_t>(y.size()), shift, scale);
    double want_sum = 0.0, worst = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double arg = static_cast<double>(scale) * x[i] - shift, want = std::exp(arg);
      want_sum += want;
      const double tol = 3e-6 + 4.0 * std::ldexp(1.0, -24) * (std::fabs(scale * x[i]) + std::fabs(shift)) * 1.4427;
      worst = std::max(worst, std::fabs(y[i] - want) / want / tol);
    }
    EXPECT_LE(worst, 1.0) << "scale " << scale << " shift " << shift << ": worst error over its bound";
    EXPECT_NEAR(sum, want_sum, 4e-6 * want_sum) << "scale " << scale << " shift " << shift;
  }
}

TEST(SimdExp, CoarseEdgesAndTails) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -inf, -87.4f, -1e30f, -87.3f, std::nanf(""), -1.0f};
  simd::exp_shift_sum_coarse(x.data(), static_cast<std::int64_t>(x.size()), 0.0f);
  EXPECT_NEAR(x[0], 1.0f, 1e-6f);
  for (int i : {1, 2, 3}) EXPECT_EQ(x[i], 0.0f) << i << ": masked or underflowing scores must give exactly 0";
  EXPECT_GT(x[4], 0.0f);
  EXPECT_TRUE(std::isnan(x[5])) << "a NaN score must stay NaN, got " << x[5];
  EXPECT_NEAR(x[6], std::exp(-1.0f), 3e-6f * std::exp(-1.0f));
  Rng rng(12);
  for (std::int64_t n = 1; n <= 40; ++n) {
    std::vector<float> row(n);
    for (float& v : row) v = -std::fabs(4.0f * rng.normal());
    row[n / 2] = -inf;
    std::vector<float> got = row;
    const float sum = simd::exp_shift_sum_coarse(got.data(), n, 0.0f);
    double want_sum = 0.0;
    for (std::int64_t j = 0; j < n; ++j) {
      const double want = std::exp(static_cast<double>(row[j]));
      want_sum += want;
      EXPECT_NEAR(got[j], want, 4e-6 * want) << "n=" << n << " j=" << j;
    }
    EXPECT_NEAR(sum, want_sum, 4e-6 * want_sum) << "n=" << n;
  }
}

}  // namespace
}  // namespace multihead
