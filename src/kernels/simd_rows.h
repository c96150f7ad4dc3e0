// Vectorised row operations for the fused attention kernels (Google Highway,
// compiled for the build machine's widest vectors). Internal header.
#pragma once

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cstdint>
#include <limits>

namespace multihead::simd {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
// Enough floats for the widest vector Highway targets (AVX-512: 16).
inline constexpr int kMaxLanes = 64;

// Largest element of x (n); -inf for n == 0.
inline float row_max(const float* x, std::int64_t n) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
  std::int64_t j = 0;
  for (; j + N <= n; j += N) vmax = hn::Max(vmax, hn::LoadU(d, x + j));
  float m = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// x[j] = exp(x[j] - shift) in place; returns the sum of the results.
// Highway's Exp is accurate to about 1 ULP and returns 0 below -104, so
// masked (-inf) scores become exactly 0.
inline float exp_shift_sum(float* x, std::int64_t n, float shift) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, shift);
  auto vsum = hn::Zero(d);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + j), vs));
    hn::StoreU(e, d, x + j);
    vsum = hn::Add(vsum, e);
  }
  if (j < n) {
    // Tail through a full vector padded with -inf (exp gives 0 there).
    alignas(64) float buf[kMaxLanes];
    for (std::int64_t t = 0; t < N; ++t) buf[t] = j + t < n ? x[j + t] : -std::numeric_limits<float>::infinity();
    auto e = hn::Exp(d, hn::Sub(hn::Load(d, buf), vs));
    hn::Store(e, d, buf);
    for (std::int64_t t = 0; j + t < n; ++t) x[j + t] = buf[t];
    vsum = hn::Add(vsum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, vsum));
}

// x[j] *= a
inline void scale_row(float* x, std::int64_t n, float a) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, a);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), va), d, x + j);
  for (; j < n; ++j) x[j] *= a;
}

// sum_j x[j] * y[j]
inline float dot(const float* x, const float* y, std::int64_t n) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto acc = hn::Zero(d);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) acc = hn::MulAdd(hn::LoadU(d, x + j), hn::LoadU(d, y + j), acc);
  float s = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; j < n; ++j) s += x[j] * y[j];
  return s;
}

// ds[j] = p[j] * (dp[j] - delta), in place over dp.
inline void softmax_grad_row(float* dp, const float* p, std::int64_t n, float delta) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto vd = hn::Set(d, delta);
  std::int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(hn::Mul(hn::LoadU(d, p + j), hn::Sub(hn::LoadU(d, dp + j), vd)), d, dp + j);
  for (; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

// x[j] *= m[j]
inline void mul_rows(float* x, const float* m, std::int64_t n) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), hn::LoadU(d, m + j)), d, x + j);
  for (; j < n; ++j) x[j] *= m[j];
}

}  // namespace multihead::simd
