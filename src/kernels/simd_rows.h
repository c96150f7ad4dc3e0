// SPDX-License-Identifier: Apache-2.0
// Vectorised row operations for the fused attention kernels (Google
// Highway). Internal header.
// Compiled once for each Highway target of the file that includes it (after
// hwy/foreach_target.h), into that target's namespace: the usual include
// guard, toggled by Highway on each pass.
#if defined(MULTIHEAD_KERNELS_SIMD_ROWS_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MULTIHEAD_KERNELS_SIMD_ROWS_H_
#undef MULTIHEAD_KERNELS_SIMD_ROWS_H_
#else
#define MULTIHEAD_KERNELS_SIMD_ROWS_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE::simd {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
// Enough floats for the widest vector Highway targets (AVX-512: 16).
inline constexpr int kMaxLanes = 64;

// Largest element of x (n); -inf for n == 0; NaN when any element is NaN
// (a row of NaN scores must not pass for a fully masked one).
inline float row_max(const float* x, std::int64_t n) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto nan = hn::FirstN(d, 0);  // no lane
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto v = hn::LoadU(d, x + j);
    nan = hn::Or(nan, hn::IsNaN(v));
    vmax = hn::Max(vmax, v);
  }
  float m = hn::GetLane(hn::MaxOfLanes(d, vmax));
  bool any_nan = !hn::AllFalse(d, nan);
  for (; j < n; ++j) {
    any_nan = any_nan || std::isnan(x[j]);
    m = x[j] > m ? x[j] : m;
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

// max(a, b), NaN when either is (std::max keeps its first argument against a NaN).
inline float max_keeping_nan(float a, float b) { return std::isnan(a) || std::isnan(b) ? a + b : std::max(a, b); }

// p 2^n for n a whole number in every lane, multiplied rather than added
// into p's bits, so that a NaN p stays NaN whatever n became. The same value
// either way where 2^n is a normal float (-126 <= n <= 127): p 2^n rounded
// once. On AVX-512 one scalef; elsewhere 2^n built in the exponent field,
// eight instructions with the product, four of them Highway's guard of its
// float-to-integer conversion against out-of-range lanes (about a quarter
// of exp_softmax).
template <class D, class V>
inline V times_pow2(D d, V p, V n) {
#if HWY_TARGET <= HWY_AVX3
  (void)d;
  // The zero-masked form with every lane kept: GCC 12's unmasked scalef
  // passes an undefined vector through, and -Wmaybe-uninitialized says so.
  return V{_mm512_maskz_scalef_ps(0xFFFF, p.raw, n.raw)};
#else
  const hn::RebindToSigned<D> di;
  return hn::Mul(p, hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)))));
#endif
}

// exp(x) for the softmax's arguments: a score less its row's maximum or
// log-sum-exp, so at most a rounding error above 0, or -inf where masked.
// The Cephes expf scheme: n = round(x log2 e), r = x - n ln 2 in two parts,
// a polynomial for exp(r), times 2^n built in the exponent bits. Within
// 1 ULP of exp computed in double for -87.33 <= x <= 88 on the arguments of
// tests/kernels/test_simd_exp.cpp (Highway's Exp measured 1 ULP there too);
// exactly 0 below ln(FLT_MIN) = -87.34, -inf included, where exp is
// subnormal or smaller.
// NaN stays NaN, as in PyTorch's softmax: Highway's Exp returns 0 for NaN,
// which would silently drop a NaN score from its row.
template <class D, class V>
inline V exp_softmax(D d, V x) {
  const auto n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  auto r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);  // ln 2's high part: n times it is exact
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);    // and the rest
  auto p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::MulAdd(hn::Mul(p, r), r, hn::Add(r, hn::Set(d, 1.0f)));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, -87.33654f)), times_pow2(d, p, n));
}

// dst[j] = elu(x[j]) + 1: x + 1 above 0, exp(x) otherwise (NaN stays NaN).
// The feature map of linear attention.
inline void elu_plus_one(float* dst, const float* x, std::int64_t n) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto v = hn::LoadU(d, x + j);
    const auto pos = hn::Gt(v, hn::Zero(d));
    const auto e = exp_softmax(d, hn::IfThenZeroElse(pos, v));
    hn::StoreU(hn::IfThenElse(pos, hn::Add(v, hn::Set(d, 1.0f)), e), d, dst + j);
  }
  for (; j < n; ++j) dst[j] = x[j] > 0.0f ? x[j] + 1.0f : std::exp(x[j]);
}

// 2^x within 3e-6 relative for x <= 0 (n = round(x), a degree-4 polynomial
// for 2^(x - n), minimax on [-1/2, 1/2], times 2^n), exactly 0 below -126
// (-inf included), NaN kept. Coarser than exp_softmax, and about half its
// instructions: for weights that are rounded to bf16 (steps of 2^-8) before
// any product reads them.
template <class D, class V>
inline V exp2_coarse(D d, V x) {
  const auto n = hn::Round(x);
  const auto f = hn::Sub(x, n);
  auto p = hn::Set(d, 9.570101276e-3f);
  p = hn::MulAdd(p, f, hn::Set(d, 5.591785908e-2f));
  p = hn::MulAdd(p, f, hn::Set(d, 2.402474433e-1f));
  p = hn::MulAdd(p, f, hn::Set(d, 6.931217909e-1f));
  p = hn::MulAdd(p, f, hn::Set(d, 9.999992847e-1f));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, -126.0f)), times_pow2(d, p, n));
}

// x[j] = e(x[j]) in place, for e a vector function of (tag, vector) that
// takes -inf to 0; returns the sum of the results.
template <class E>
inline float exp_row_sum(float* x, std::int64_t n, E e) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto vsum = hn::Zero(d), vsum2 = hn::Zero(d);
  std::int64_t j = 0;
  // Two vectors a step: their exponentials are independent chains, which
  // keeps both FMA pipes busy.
  for (; j + 2 * N <= n; j += 2 * N) {
    const auto e0 = e(d, hn::LoadU(d, x + j));
    const auto e1 = e(d, hn::LoadU(d, x + j + N));
    hn::StoreU(e0, d, x + j);
    hn::StoreU(e1, d, x + j + N);
    vsum = hn::Add(vsum, e0);
    vsum2 = hn::Add(vsum2, e1);
  }
  vsum = hn::Add(vsum, vsum2);
  for (; j + N <= n; j += N) {
    auto v = e(d, hn::LoadU(d, x + j));
    hn::StoreU(v, d, x + j);
    vsum = hn::Add(vsum, v);
  }
  if (j < n) {
    // Tail through a full vector padded with -inf (e gives 0 there).
    alignas(64) float buf[kMaxLanes];
    for (std::int64_t t = 0; t < N; ++t) buf[t] = j + t < n ? x[j + t] : -std::numeric_limits<float>::infinity();
    auto v = e(d, hn::Load(d, buf));
    hn::Store(v, d, buf);
    for (std::int64_t t = 0; j + t < n; ++t) x[j + t] = buf[t];
    vsum = hn::Add(vsum, v);
  }
  return hn::GetLane(hn::SumOfLanes(d, vsum));
}

// x[j] = exp(scale x[j] - shift) in place; returns the sum of the results.
// The compiler may fuse the product and the difference into one rounding;
// with scale 1 both are the plain difference. Masked (-inf) scores become
// exactly 0 for scale > 0. The scale lets a kernel scale raw scores in the
// pass that reads them anyway.
inline float exp_shift_sum(float* x, std::int64_t n, float shift, float scale = 1.0f) {
  const DF d;
  const auto vs = hn::Set(d, shift), vk = hn::Set(d, scale);
  return exp_row_sum(x, n, [&](auto t, auto v) { return exp_softmax(t, hn::Sub(hn::Mul(v, vk), vs)); });
}

// The same through exp2_coarse, scale and shift taken into base 2 (one
// fused multiply-add an element): within about 1e-5 relative for shifts up
// to a few hundred, for the bf16 kernel's weights. scale > 0.
inline float exp_shift_sum_coarse(float* x, std::int64_t n, float shift, float scale = 1.0f) {
  const DF d;
  constexpr float kLog2e = 1.44269504088896341f;
  const auto vs = hn::Set(d, shift * kLog2e), vk = hn::Set(d, scale * kLog2e);
  return exp_row_sum(x, n, [&](auto t, auto v) { return exp2_coarse(t, hn::MulSub(v, vk, vs)); });
}

// x[j] = op(x[j], a) for op one of Highway's binary ops (Add, Mul, ...).
template <class Op>
inline void with_scalar(float* x, std::int64_t n, float a, Op op) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, a);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(op(hn::LoadU(d, x + j), va), d, x + j);
  if (j < n) {  // the tail through a zero-padded vector
    alignas(64) float buf[kMaxLanes] = {};
    std::copy(x + j, x + n, buf);
    hn::Store(op(hn::Load(d, buf), va), d, buf);
    std::copy(buf, buf + (n - j), x + j);
  }
}

// dst[j] = a src[j] for a row of output that nothing reads soon (a head's
// rows of the (B, L, 3E) gradient of Q, K, V, which the in-projection reads
// from memory after every head is done): whole aligned vectors go by
// non-temporal stores (the lines are not read first, and the kernel's own
// buffers stay in the caches), the rest as usual. Call hwy::FlushStream()
// before the rows are read elsewhere.
inline void stream_scaled_row(float* dst, const float* src, std::int64_t n, float a) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t j = 0;
  if (reinterpret_cast<std::uintptr_t>(dst) % (N * sizeof(float)) == 0) {
    const auto va = hn::Set(d, a);
    for (; j + N <= n; j += N) hn::Stream(hn::Mul(va, hn::LoadU(d, src + j)), d, dst + j);
  }
  for (; j < n; ++j) dst[j] = a * src[j];
}

// Asks for the lines of n bytes at p ahead of use. A head's rows lie far
// apart in the (B, L, E) tensors, further than the hardware prefetchers
// look, so a loop over them asks kRowsAhead rows ahead.
inline constexpr std::int64_t kRowsAhead = 8;
inline void prefetch_bytes(const void* p, std::int64_t n) {
  const auto* c = static_cast<const char*>(p);
  for (std::int64_t b = 0; b < n; b += 64) __builtin_prefetch(c + b);
}

// dst = src, n bytes, as stream_scaled_row writes: for a row of the
// attention output, which the out-projection reads after every head is done.
inline void stream_copy(void* dst, const void* src, std::int64_t n) {
  const hn::ScalableTag<std::uint8_t> d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto* out = static_cast<std::uint8_t*>(dst);
  const auto* in = static_cast<const std::uint8_t*>(src);
  std::int64_t j = 0;
  if (reinterpret_cast<std::uintptr_t>(out) % N == 0)
    for (; j + N <= n; j += N) hn::Stream(hn::LoadU(d, in + j), d, out + j);
  if (j < n) std::memcpy(out + j, in + j, static_cast<std::size_t>(n - j));
}

// x[j] *= a
inline void scale_row(float* x, std::int64_t n, float a) {
  with_scalar(x, n, a, [](auto u, auto v) { return hn::Mul(u, v); });
}

// x[j] += a
inline void add_scalar(float* x, std::int64_t n, float a) {
  with_scalar(x, n, a, [](auto u, auto v) { return hn::Add(u, v); });
}

// sum_j x[j]
inline float row_sum(const float* x, std::int64_t n) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  auto acc = hn::Zero(d);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) acc = hn::Add(acc, hn::LoadU(d, x + j));
  float s = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; j < n; ++j) s += x[j];
  return s;
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
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, p + j), hn::Sub(hn::LoadU(d, dp + j), vd)), d, dp + j);
  for (; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

// ds[j] = pd[j] * dp[j] - p[j] * delta, in place over dp: the softmax's
// gradient under dropout, with pd the dropped weights (p times the mask) and
// dp the gradient of the dropped weights. Where p is 0 both terms are, so
// the mask itself is not needed.
inline void dropout_softmax_grad_row(float* dp, const float* p, const float* pd, std::int64_t n, float delta) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto vd = hn::Set(d, delta);
  std::int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(hn::MulSub(hn::LoadU(d, pd + j), hn::LoadU(d, dp + j), hn::Mul(hn::LoadU(d, p + j), vd)), d, dp + j);
  for (; j < n; ++j) dp[j] = pd[j] * dp[j] - p[j] * delta;
}

}  // namespace multihead::HWY_NAMESPACE::simd
HWY_AFTER_NAMESPACE();

#endif  // MULTIHEAD_KERNELS_SIMD_ROWS_H_
