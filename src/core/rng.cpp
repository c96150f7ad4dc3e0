// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/rng.h"

#include <cmath>
#include <numbers>

#include "philox_constants.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/rng.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/dispatch.h"

// The batch in vectors, once for each Highway target.
HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {

using namespace philox;

// Eight (AVX-512) or four (AVX2) blocks per vector: each 32-bit Philox word
// sits in the low half of a 64-bit lane, where MulEven's 32x32->64-bit
// multiply reads it. Lane 2k computes block g + k and lane 2k + 1 block
// g + lanes/2 + k: with words 0 and 1 (and 2 and 3) then paired in one
// 64-bit lane, InterleaveLower holds blocks g .. g + lanes/2 - 1 with their
// words in order, InterleaveUpper the next lanes/2 blocks, and two vector
// stores write the output (a scalar transpose cost as much as a third of
// the rounds).
void philox4x32_batch(std::uint64_t key, std::uint64_t counter_hi, std::uint64_t first_lo,
                      std::uint32_t out[4 * kPhiloxBatch]) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<std::uint64_t> d64;
  const hn::Repartition<std::uint32_t, decltype(d64)> d32;
  const std::size_t lanes = hn::Lanes(d64);
  const auto low = hn::Set(d64, 0xFFFFFFFFull);
  const auto m0 = hn::Set(d32, kMul0), m1 = hn::Set(d32, kMul1);
  const auto hi_lo = hn::Set(d64, counter_hi & 0xFFFFFFFFull), hi_hi = hn::Set(d64, counter_hi >> 32);
  constexpr bool kPairs = HWY_TARGET != HWY_SCALAR;  // whole 128-bit parts to interleave in
  alignas(64) std::uint64_t offset[64];
  for (std::size_t j = 0; j < lanes; ++j) offset[j] = kPairs ? j / 2 + (j % 2) * (lanes / 2) : j;
  const auto lane_offset = hn::Load(d64, offset);
  alignas(64) std::uint64_t w[4][64];
  for (std::size_t g = 0; g < static_cast<std::size_t>(kPhiloxBatch); g += lanes) {
    const auto lo = hn::Add(hn::Set(d64, first_lo + g), lane_offset);
    auto c0 = hn::And(lo, low), c1 = hn::ShiftRight<32>(lo), c2 = hi_lo, c3 = hi_hi;
    std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
    for (int r = 0; r < kRounds; ++r) {
      const auto p0 = hn::MulEven(m0, hn::BitCast(d32, c0));
      const auto p1 = hn::MulEven(m1, hn::BitCast(d32, c2));
      const auto n0 = hn::Xor(hn::Xor(hn::ShiftRight<32>(p1), c1), hn::Set(d64, k0));
      const auto n2 = hn::Xor(hn::Xor(hn::ShiftRight<32>(p0), c3), hn::Set(d64, k1));
      c1 = hn::And(p1, low);
      c3 = hn::And(p0, low);
      c0 = n0;
      c2 = n2;
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    if constexpr (kPairs) {
      const auto w01 = hn::Or(c0, hn::ShiftLeft<32>(c1)), w23 = hn::Or(c2, hn::ShiftLeft<32>(c3));
      auto* out64 = reinterpret_cast<std::uint64_t*>(out);  // block i: 64-bit words 2i, 2i + 1
      hn::StoreU(hn::InterleaveLower(d64, w01, w23), d64, out64 + 2 * g);
      hn::StoreU(hn::InterleaveUpper(d64, w01, w23), d64, out64 + 2 * g + lanes);
    } else {
      hn::Store(c0, d64, w[0] + g);
      hn::Store(c1, d64, w[1] + g);
      hn::Store(c2, d64, w[2] + g);
      hn::Store(c3, d64, w[3] + g);
    }
  }
  if constexpr (!kPairs)
    for (int i = 0; i < kPhiloxBatch; ++i)
      for (int lane = 0; lane < 4; ++lane) out[4 * i + lane] = static_cast<std::uint32_t>(w[lane][i]);
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(philox4x32_batch);

using namespace philox;

namespace {

inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

}  // namespace

std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_hi,
                                        std::uint64_t counter_lo) noexcept {
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo), c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi), c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int r = 0; r < kRounds; ++r) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    std::uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

void philox4x32_batch(std::uint64_t key, std::uint64_t counter_hi, std::uint64_t first_lo,
                      std::uint32_t out[4 * kPhiloxBatch]) noexcept {
  MULTIHEAD_DISPATCH(philox4x32_batch)(key, counter_hi, first_lo, out);
}

std::uint32_t Rng::next_u32() {
  if (lane_ == 4) {
    block_ = philox4x32(seed_, stream_, counter_++);
    lane_ = 0;
  }
  return block_[static_cast<std::size_t>(lane_++)];
}

float Rng::uniform() { return u32_to_unit_float(next_u32()); }

float Rng::uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }

float Rng::normal(float mean, float stddev) {
  // Box-Muller; 1 - u keeps the log argument in (0, 1].
  double u1 = 1.0 - static_cast<double>(uniform());
  double u2 = static_cast<double>(uniform());
  double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return mean + stddev * static_cast<float>(z);
}

}  // namespace multihead
#endif  // HWY_ONCE
