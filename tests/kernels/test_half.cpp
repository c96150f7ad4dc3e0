// SPDX-License-Identifier: Apache-2.0
// bf16 and fp16 conversions: rounding, specials, and the vectorised paths
// against the scalar ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "multihead/core/rng.h"
#include "multihead/kernels/half.h"

namespace multihead {
namespace {

float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST(Bf16, RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000u)), 0x3F80);  // halfway: to the even 0x3F80
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000u)), 0x3F82);  // halfway: to the even 0x3F82
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001u)), 0x3F81);  // above halfway: up
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds past the largest bf16
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7F800001u)))));  // a NaN that rounding would make inf
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  for (std::uint32_t b = 0; b < 65536; ++b) {  // every bf16 survives the round trip
    const float x = bf16_to_float(static_cast<std::uint16_t>(b));
    if (!std::isnan(x)) {
      EXPECT_EQ(float_to_bf16(x), b);
    }
  }
}

TEST(Fp16, RoundsToNearestEvenOverflowsAndSubnormals) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);               // halfway to 65536: to the even, infinity
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // halfway to it: to the even, zero
  EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // halfway: to even
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float x = f16_to_float(static_cast<std::uint16_t>(h));
    if (!std::isnan(x)) {
      EXPECT_EQ(float_to_f16(x), h);
    }
  }
}

TEST(HalfArrays, VectorisedEqualsScalar) {
  Rng rng(1);
  std::vector<float> x;
  for (int i = 0; i < 5000; ++i) {
    const float m = rng.normal();
    x.push_back(std::ldexp(m, static_cast<int>(rng.next_u32() % 60) - 30));  // subnormal to overflow in fp16
  }
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(65520.0f);
  x.push_back(std::ldexp(1.0f, -25));
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  std::vector<std::uint16_t> b(x.size()), h(x.size());
  std::vector<float> back(x.size());
  convert_f32_to_bf16(b.data(), x.data(), n);
  convert_f32_to_f16(h.data(), x.data(), n);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(b[i], float_to_bf16(x[i])) << x[i];
    EXPECT_EQ(h[i], float_to_f16(x[i])) << x[i];
  }
  convert_bf16_to_f32(back.data(), b.data(), n);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], bf16_to_float(b[i]));
  convert_f16_to_f32(back.data(), h.data(), n);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], f16_to_float(h[i]));
  // Relative error of a normal value: at most half a unit in the last place.
  for (std::size_t i = 0; i < 1000; ++i) {
    const float xi = x[i];
    if (std::fabs(xi) < 1e-4f || std::fabs(xi) > 60000.0f) continue;
    EXPECT_LE(std::fabs(f16_to_float(h[i]) - xi), std::ldexp(std::fabs(xi), -11) * 1.0001f);
    EXPECT_LE(std::fabs(bf16_to_float(b[i]) - xi), std::ldexp(std::fabs(xi), -8) * 1.0001f);
  }
}

}  // namespace
}  // namespace multihead
