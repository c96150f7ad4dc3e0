// SPDX-License-Identifier: Apache-2.0
// 16-bit floating-point storage: bfloat16 and IEEE half (fp16). Values are
// stored as raw 16-bit patterns and computed on in fp32. Conversions round
// to nearest even, keep NaN a NaN and infinities infinite; fp16 overflows to
// infinity above 65504. The array conversions are vectorised (F16C for fp16
// where the CPU has it, integer SIMD for bf16).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "multihead/core/tensor.h"

namespace multihead {

std::uint16_t float_to_bf16(float x) noexcept;
// bf16 is the top half of an fp32: widening is a shift (inline, for loops
// that read one stored value at a time).
inline float bf16_to_float(std::uint16_t b) noexcept { return std::bit_cast<float>(std::uint32_t{b} << 16); }
std::uint16_t float_to_f16(float x) noexcept;
float f16_to_float(std::uint16_t h) noexcept;

void convert_f32_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n) noexcept;
void convert_bf16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) noexcept;
void convert_f32_to_f16(std::uint16_t* dst, const float* src, std::int64_t n) noexcept;
void convert_f16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) noexcept;

// By element type, for kernels templated on their storage (float, BF16, F16):
// widen reads n stored values into fp32, narrow rounds n fp32 values into
// storage. For float both are copies.
inline void widen(float* dst, const float* src, std::int64_t n) noexcept {
  if (dst != src) std::memcpy(dst, src, sizeof(float) * static_cast<std::size_t>(n));
}
inline void widen(float* dst, const BF16* src, std::int64_t n) noexcept {
  convert_bf16_to_f32(dst, reinterpret_cast<const std::uint16_t*>(src), n);
}
inline void widen(float* dst, const F16* src, std::int64_t n) noexcept {
  convert_f16_to_f32(dst, reinterpret_cast<const std::uint16_t*>(src), n);
}
inline void narrow(float* dst, const float* src, std::int64_t n) noexcept { widen(dst, src, n); }
inline void narrow(BF16* dst, const float* src, std::int64_t n) noexcept {
  convert_f32_to_bf16(reinterpret_cast<std::uint16_t*>(dst), src, n);
}
inline void narrow(F16* dst, const float* src, std::int64_t n) noexcept {
  convert_f32_to_f16(reinterpret_cast<std::uint16_t*>(dst), src, n);
}

// dst = src rounded to bf16 (as narrow) and sums[j] += src[j], in one pass:
// a row of a gradient rounded for bf16 products while its column sums (a
// bias gradient) are taken.
void narrow_adding(BF16* dst, float* sums, const float* src, std::int64_t n) noexcept;

// n rows of w values, row stride lds, stored as T, as fp32: float storage is
// read where it lies (no copy); BF16 / F16 rows are widened into buf, packed
// with stride w. ld receives the stride of what is returned.
template <typename T>
const float* rows_as_f32(const T* src, std::int64_t lds, std::int64_t n, std::int64_t w, float* buf,
                         std::int64_t& ld) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    ld = lds;
    return src;
  } else {
    for (std::int64_t r = 0; r < n; ++r) widen(buf + r * w, src + r * lds, w);
    ld = w;
    return buf;
  }
}

// x (F32) converted to dtype `to` (F32, BF16 or F16): a new tensor; a clone when to is F32.
Tensor narrow_tensor(const Tensor& x, DType to);
// x (F32, BF16 or F16) as a new F32 tensor.
Tensor widen_tensor(const Tensor& x);
// Rounds x (F32) in place to the nearest values of dtype `to`, so that a
// later narrow to it is exact. Nothing to do for F32.
void round_to_storage(Tensor& x, DType to);

}  // namespace multihead
