// 16-bit floating-point storage: bfloat16 and IEEE half (fp16). Values are
// stored as raw 16-bit patterns and computed on in fp32. Conversions round
// to nearest even, keep NaN a NaN and infinities infinite; fp16 overflows to
// infinity above 65504. The array conversions are vectorised (F16C for fp16
// where the CPU has it, integer SIMD for bf16).
#pragma once

#include <cstdint>

namespace multihead {

std::uint16_t float_to_bf16(float x) noexcept;
float bf16_to_float(std::uint16_t b) noexcept;
std::uint16_t float_to_f16(float x) noexcept;
float f16_to_float(std::uint16_t h) noexcept;

void convert_f32_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n) noexcept;
void convert_bf16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) noexcept;
void convert_f32_to_f16(std::uint16_t* dst, const float* src, std::int64_t n) noexcept;
void convert_f16_to_f32(float* dst, const std::uint16_t* src, std::int64_t n) noexcept;

}  // namespace multihead
