// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "multihead/core/rng.h"

namespace multihead {
namespace {

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(Philox, MatchesRandom123KnownAnswers) {
  auto zero = philox4x32(0, 0, 0);
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
  auto ones = philox4x32(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(ones[0], 0x408f276du);
  EXPECT_EQ(ones[1], 0x41c83b0eu);
  EXPECT_EQ(ones[2], 0xa20bc7c6u);
  EXPECT_EQ(ones[3], 0x6d5451fdu);
  // ctr = {243f6a88, 85a308d3, 13198a2e, 03707344}, key = {a4093822, 299f31d0}
  auto pi = philox4x32(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
  EXPECT_EQ(pi[0], 0xd16cfe09u);
  EXPECT_EQ(pi[1], 0x94fdccebu);
  EXPECT_EQ(pi[2], 0x5001e420u);
  EXPECT_EQ(pi[3], 0x24126ea1u);
}

TEST(Philox, UniformAtIsAPureFunctionOfItsCounter) {
  // Reading indices in any order (as threads would) gives the same values.
  std::vector<float> forward, backward(1000);
  for (std::uint64_t i = 0; i < 1000; ++i) forward.push_back(uniform_at(7, 3, i));
  for (std::uint64_t i = 1000; i-- > 0;) backward[i] = uniform_at(7, 3, i);
  EXPECT_EQ(forward, backward);
  EXPECT_NE(uniform_at(7, 3, 0), uniform_at(8, 3, 0));
  EXPECT_NE(uniform_at(7, 3, 0), uniform_at(7, 4, 0));
}

TEST(Philox, BatchEqualsOneBlockAtATime) {
  std::uint32_t out[4 * kPhiloxBatch];
  philox4x32_batch(0x1234567890abcdefull, 77, ~0ull - 5, out);  // the low counter word wraps inside the batch
  for (int i = 0; i < kPhiloxBatch; ++i) {
    auto block = philox4x32(0x1234567890abcdefull, 77, ~0ull - 5 + static_cast<std::uint64_t>(i));
    for (int lane = 0; lane < 4; ++lane) EXPECT_EQ(out[4 * i + lane], block[static_cast<std::size_t>(lane)]);
  }
}

TEST(Rng, SequentialStreamMatchesUniformAt) {
  Rng rng(42, 5);
  for (std::uint64_t i = 0; i < 37; ++i) EXPECT_EQ(rng.uniform(), uniform_at(42, 5, i));
}

TEST(Rng, UniformAndNormalHaveTheRightMoments) {
  Rng rng(1);
  const int n = 200000;
  double su = 0, su2 = 0, sn = 0, sn2 = 0;
  float umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    float u = rng.uniform();
    umin = std::min(umin, u), umax = std::max(umax, u);
    su += u, su2 += double(u) * u;
    double z = rng.normal();
    sn += z, sn2 += z * z;
  }
  EXPECT_GE(umin, 0.0f);
  EXPECT_LT(umax, 1.0f);
  // Standard errors: 0.29/sqrt(n) ~ 6.5e-4 for the uniform mean, 1/sqrt(n) ~ 2.2e-3 for the normal.
  EXPECT_NEAR(su / n, 0.5, 4e-3);
  EXPECT_NEAR(su2 / n - (su / n) * (su / n), 1.0 / 12.0, 2e-3);
  EXPECT_NEAR(sn / n, 0.0, 1.2e-2);
  EXPECT_NEAR(sn2 / n, 1.0, 1.5e-2);
}

}  // namespace
}  // namespace multihead
