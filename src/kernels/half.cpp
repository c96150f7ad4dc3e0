// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/half.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "multihead/core/error.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/half.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"

// The conversions in vectors, once for each Highway target.
HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

namespace {

// The bf16 bits of u's lanes (fp32 bit patterns), as float_to_bf16, in the
// low halves of the lanes.
template <class DU, class V>
V bf16_bits(DU du, V u) {
  const auto one = hn::Set(du, 1u), bias = hn::Set(du, 0x7FFFu), abs_mask = hn::Set(du, 0x7FFFFFFFu);
  const auto inf = hn::Set(du, 0x7F800000u), quiet = hn::Set(du, 0x400000u);
  const auto rounded = hn::Add(u, hn::Add(bias, hn::And(hn::ShiftRight<16>(u), one)));
  const auto nan = hn::Gt(hn::And(u, abs_mask), inf);
  return hn::ShiftRight<16>(hn::IfThenElse(nan, hn::Or(u, quiet), rounded));
}

// Stores the low halves of bits' lanes: they fit 16 bits, so the saturating
// signed demotion is exact.
template <class DU, class V>
void store_bf16(DU du, V bits, std::uint16_t* dst) {
  const hn::Rebind<std::uint16_t, DU> d16;
  const hn::RebindToSigned<DU> di;
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, bits)), d16, dst);
}

}  // namespace

void convert_f32_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n) {
  const hn::ScalableTag<std::uint32_t> du;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(du));
  std::int64_t i = 0;
  for (; i + N <= n; i += N)
    store_bf16(du, bf16_bits(du, hn::LoadU(du, reinterpret_cast<const std::uint32_t*>(src + i))), dst + i);
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

void narrow_adding(BF16* dst, float* sums, const float* src, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  auto* out = reinterpret_cast<std::uint16_t*>(dst);
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, src + i);
    hn::StoreU(hn::Add(hn::LoadU(df, sums + i), v), df, sums + i);
    store_bf16(du, bf16_bits(du, hn::BitCast(du, v)), out + i);
  }
  for (; i < n; ++i) sums[i] += src[i], out[i] = float_to_bf16(src[i]);
}

void convert_bf16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) {
  const hn::ScalableTag<std::uint32_t> du;
  const hn::Rebind<std::uint16_t, decltype(du)> d16;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(du));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto w = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, src + i)));
    hn::StoreU(w, du, reinterpret_cast<std::uint32_t*>(dst + i));
  }
  for (; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void convert_f32_to_f16(std::uint16_t* dst, const float* src, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, src + i)), dh, reinterpret_cast<hwy::float16_t*>(dst + i));
  for (; i < n; ++i) dst[i] = float_to_f16(src[i]);
}

void convert_f16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(src + i))), df, dst + i);
  for (; i < n; ++i) dst[i] = f16_to_float(src[i]);
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(convert_f32_to_bf16);
HWY_EXPORT(narrow_adding);
HWY_EXPORT(convert_bf16_to_f32);
HWY_EXPORT(convert_f32_to_f16);
HWY_EXPORT(convert_f16_to_f32);

// bf16 is the top half of an fp32. Round to nearest even by adding 0x7FFF
// plus the lowest kept bit before truncating; a NaN is truncated instead
// (with its quiet bit set), since the rounding could carry it to infinity.
std::uint16_t float_to_bf16(float x) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// fp16: sign, 5 exponent bits (bias 15), 10 mantissa bits.
std::uint16_t float_to_f16(float x) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);   // NaN
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds past 65504: infinity
  if (a < 0x38800000u) {
    // Subnormal (or zero) in fp16: the value in units of 2^-24, rounded to even.
    const float f = std::fabs(x) * 16777216.0f;  // exact: a power-of-two scale
    const float r = std::nearbyint(f);           // the default rounding mode: to nearest even
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(r));
  }
  // Normal: re-bias the exponent, round the 13 dropped mantissa bits to even.
  std::uint32_t h = ((a >> 13) - ((127 - 15) << 10));
  const std::uint32_t rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: still right
  return static_cast<std::uint16_t>(sign | h);
}

float f16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  std::uint32_t u;
  if (exp == 0x1Fu) {
    u = sign | 0x7F800000u | (man << 13);  // infinity or NaN
  } else if (exp == 0) {
    const float f = static_cast<float>(man) * (1.0f / 16777216.0f);  // subnormal: man * 2^-24
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else {
    u = sign | ((exp + (127 - 15)) << 23) | (man << 13);
  }
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

void convert_f32_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n) noexcept {
  MULTIHEAD_DISPATCH(convert_f32_to_bf16)(dst, src, n);
}

void narrow_adding(BF16* dst, float* sums, const float* src, std::int64_t n) noexcept {
  MULTIHEAD_DISPATCH(narrow_adding)(dst, sums, src, n);
}

void convert_bf16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) noexcept {
  MULTIHEAD_DISPATCH(convert_bf16_to_f32)(dst, src, n);
}

void convert_f32_to_f16(std::uint16_t* dst, const float* src, std::int64_t n) noexcept {
  MULTIHEAD_DISPATCH(convert_f32_to_f16)(dst, src, n);
}

void convert_f16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) noexcept {
  MULTIHEAD_DISPATCH(convert_f16_to_f32)(dst, src, n);
}

namespace {

// Converts in parallel blocks: large activations are converted by all cores.
constexpr std::int64_t kConvertBlock = 1 << 14;

template <typename F>
void blocked(std::int64_t n, F&& f) {
  const std::int64_t blocks = (n + kConvertBlock - 1) / kConvertBlock;
#pragma omp parallel for schedule(static) if (blocks > 4)
  for (std::int64_t i = 0; i < blocks; ++i) {
    const std::int64_t i0 = i * kConvertBlock;
    f(i0, std::min(kConvertBlock, n - i0));
  }
}

}  // namespace

Tensor narrow_tensor(const Tensor& x, DType to) {
  const float* src = x.f32();
  Tensor out = Tensor::empty(x.shape(), to);
  if (to == DType::kF32) {
    blocked(x.numel(), [&](std::int64_t i, std::int64_t n) { widen(out.f32() + i, src + i, n); });
  } else if (to == DType::kBF16) {
    blocked(x.numel(), [&](std::int64_t i, std::int64_t n) { narrow(out.data<BF16>() + i, src + i, n); });
  } else if (to == DType::kF16) {
    blocked(x.numel(), [&](std::int64_t i, std::int64_t n) { narrow(out.data<F16>() + i, src + i, n); });
  } else {
    throw Error(fmt::format("cannot store activations as {}", dtype_name(to)));
  }
  return out;
}

Tensor widen_tensor(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape());
  float* dst = out.f32();
  if (x.dtype() == DType::kBF16) {
    blocked(x.numel(), [&](std::int64_t i, std::int64_t n) { widen(dst + i, x.data<BF16>() + i, n); });
  } else if (x.dtype() == DType::kF16) {
    blocked(x.numel(), [&](std::int64_t i, std::int64_t n) { widen(dst + i, x.data<F16>() + i, n); });
  } else {
    blocked(x.numel(), [&](std::int64_t i, std::int64_t n) { widen(dst + i, x.f32() + i, n); });
  }
  return out;
}

void round_to_storage(Tensor& x, DType to) {
  if (to == DType::kF32) return;
  check<Error>(to == DType::kBF16 || to == DType::kF16, "cannot store activations as {}", dtype_name(to));
  float* p = x.f32();
  blocked(x.numel(), [&](std::int64_t i, std::int64_t n) {
    std::uint16_t tmp[kConvertBlock];
    if (to == DType::kBF16) {
      convert_f32_to_bf16(tmp, p + i, n);
      convert_bf16_to_f32(p + i, tmp, n);
    } else {
      convert_f32_to_f16(tmp, p + i, n);
      convert_f16_to_f32(p + i, tmp, n);
    }
  });
}

}  // namespace multihead
#endif  // HWY_ONCE
