// SPDX-License-Identifier: Apache-2.0
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
//
// A random value is a pure function of (seed, stream, index), so any thread
// can produce element i of a dropout mask without a shared generator state:
// results do not depend on the thread count, and backward (or a recomputed
// forward under gradient checkpointing) regenerates the same mask for free.
#pragma once

#include <array>
#include <cstdint>

namespace multihead {

// One Philox block: 4 random 32-bit words for a 128-bit counter and 64-bit key.
std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_hi, std::uint64_t counter_lo) noexcept;

// kPhiloxBatch consecutive blocks, counters (counter_hi, first_lo + i):
// out[4*i + lane] = philox4x32(key, counter_hi, first_lo + i)[lane]. Written
// lane-parallel so the compiler vectorises it (32x32->64-bit multiplies);
// about ten times faster than one block at a time.
inline constexpr int kPhiloxBatch = 16;
void philox4x32_batch(std::uint64_t key, std::uint64_t counter_hi, std::uint64_t first_lo,
                      std::uint32_t out[4 * kPhiloxBatch]) noexcept;

// Uniform in [0, 1) with 24 random bits (every value exactly representable).
inline float u32_to_unit_float(std::uint32_t x) noexcept { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// Element `index` of the uniform stream (seed, stream).
inline float uniform_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  auto block = philox4x32(seed, stream, index >> 2);
  return u32_to_unit_float(block[index & 3]);
}

// Sequential generator over one stream, for initialisation and sampling.
class Rng {
 public:
  explicit Rng(std::uint64_t seed, std::uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  float uniform();                    // [0, 1)
  float uniform(float lo, float hi);  // [lo, hi)
  float normal(float mean = 0.0f, float stddev = 1.0f);
  std::uint32_t next_u32();

 private:
  std::uint64_t seed_;
  std::uint64_t stream_;
  std::uint64_t counter_ = 0;
  std::array<std::uint32_t, 4> block_{};
  int lane_ = 4;  // 4 = block exhausted
};

}  // namespace multihead
