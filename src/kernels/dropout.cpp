// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/dropout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "multihead/core/rng.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dropout.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"

// The masks in vectors, once for each Highway target.
HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// Bits [at, at + nb) of a row of keep bits, nb < 64 (LSB first in 64-bit
// words): a vector's mask at a time, at most 16 lanes of floats on x86.
void put_bits(std::uint64_t* bits, std::int64_t at, std::uint64_t v, int nb) {
  const std::int64_t w = at >> 6;
  const int sh = static_cast<int>(at & 63);
  const std::uint64_t m = (std::uint64_t{1} << nb) - 1;
  bits[w] = (bits[w] & ~(m << sh)) | (v << sh);
  if (sh + nb > 64) {
    const int spill = sh + nb - 64;
    const std::uint64_t ms = (std::uint64_t{1} << spill) - 1;
    bits[w + 1] = (bits[w + 1] & ~ms) | (v >> (64 - sh));
  }
}

std::uint64_t get_bits(const std::uint64_t* bits, std::int64_t at, int nb) {
  const std::int64_t w = at >> 6;
  const int sh = static_cast<int>(at & 63);
  std::uint64_t v = bits[w] >> sh;
  if (sh + nb > 64) v |= bits[w + 1] << (64 - sh);
  return v & ((std::uint64_t{1} << nb) - 1);
}

// y[j] = r[j] >= threshold ? x[j] * ks : 0 for j < n, in float vectors (y may
// be x); with bits, also bit at + j of bits = whether element j is kept.
void apply_mask(float* y, const float* x, const std::uint16_t* r, std::int64_t n, std::uint32_t threshold, float ks,
                std::uint64_t* bits, std::int64_t at) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<std::int32_t, decltype(df)> di;
  const hn::Rebind<std::uint16_t, decltype(df)> d16;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const hn::Rebind<std::uint32_t, decltype(df)> du;
  // r >= threshold as r > threshold - 1: draws are below 65536, so the
  // signed 32-bit comparison is exact.
  const auto below = hn::Set(di, static_cast<std::int32_t>(threshold) - 1);
  const auto vk = hn::Set(df, ks);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto keep = hn::RebindMask(df, hn::Gt(hn::BitCast(di, hn::PromoteTo(du, hn::LoadU(d16, r + j))), below));
    hn::StoreU(hn::IfThenElseZero(keep, hn::Mul(hn::LoadU(df, x + j), vk)), df, y + j);
    if (bits) {
      std::uint8_t m[8] = {};
      hn::StoreMaskBits(df, keep, m);
      std::uint64_t v = 0;
      std::memcpy(&v, m, sizeof(v));
      put_bits(bits, at + j, v, static_cast<int>(N));
    }
  }
  for (; j < n; ++j) {
    const bool keep = r[j] >= threshold;
    y[j] = keep ? x[j] * ks : 0.0f;
    if (bits) put_bits(bits, at + j, keep ? 1 : 0, 1);
  }
}

}  // namespace

void dropout_row_from_bits(float* y, const float* x, std::int64_t n, const DropoutSpec& spec, const std::uint64_t* bits,
                           std::int64_t at) {
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const float ks = dropout_scale<float>(spec);
  const auto vk = hn::Set(df, ks);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    const std::uint64_t v = get_bits(bits, at + j, static_cast<int>(N));
    std::uint8_t m[8];
    std::memcpy(m, &v, sizeof(v));
    const auto keep = hn::LoadMaskBits(df, m);
    hn::StoreU(hn::IfThenElseZero(keep, hn::Mul(hn::LoadU(df, x + j), vk)), df, y + j);
  }
  for (; j < n; ++j) y[j] = get_bits(bits, at + j, 1) ? x[j] * ks : 0.0f;
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(apply_mask);
HWY_EXPORT(dropout_row_from_bits);

namespace {

// Elements a Philox batch serves: 8 per block.
constexpr std::uint64_t kSpan = std::uint64_t{8} * kPhiloxBatch;

// The batch's 16-bit draws: element e of the span is half e mod 2 of word
// e / 2 of the batch's output, which in memory (little-endian, as on every
// target built for) is simply the e-th 16-bit value.
void draws16(const DropoutSpec& spec, std::uint64_t first, std::uint16_t r[kSpan]) {
  std::uint32_t words[4 * kPhiloxBatch];
  philox4x32_batch(spec.seed, spec.stream, first / 8, words);
  static_assert(sizeof(words) == kSpan * sizeof(std::uint16_t));
  std::memcpy(r, words, sizeof(words));
}

// Elements [lo, hi) of x into y (which may be x), element j having index
// base + j in the stream.
// With bits (float only), element j's keep bit goes to bit at + j of bits.
template <typename T>
void dropout_range(T* y, const T* x, std::int64_t lo, std::int64_t hi, std::uint64_t base, const DropoutSpec& spec,
                   T ks, std::uint64_t* bits = nullptr, std::int64_t at = 0) {
  const std::uint32_t threshold = dropout_threshold(spec.p);
  alignas(64) std::uint16_t r[kSpan];
  std::uint64_t idx = base + static_cast<std::uint64_t>(lo);
  const std::uint64_t end = base + static_cast<std::uint64_t>(hi);
  while (idx < end) {
    const std::uint64_t first = idx / kSpan * kSpan;  // aligned to a batch of blocks
    draws16(spec, first, r);
    const std::uint64_t stop = std::min(end, first + kSpan);
    const T* xs = x + (idx - base);
    T* ys = y + (idx - base);
    const std::uint16_t* rs = r + (idx - first);
    const auto n = static_cast<std::int64_t>(stop - idx);
    if constexpr (std::is_same_v<T, float>) {
      MULTIHEAD_DISPATCH(apply_mask)(ys, xs, rs, n, threshold, ks, bits, at + static_cast<std::int64_t>(idx - base));
    } else {
      for (std::int64_t j = 0; j < n; ++j) ys[j] = rs[j] >= threshold ? xs[j] * ks : T(0);
    }
    idx = stop;
  }
}

}  // namespace

std::uint32_t dropout_threshold(float p) {
  return static_cast<std::uint32_t>(std::clamp(std::lround(static_cast<double>(p) * 65536.0), 0L, 65536L));
}

bool dropout_keep_at(const DropoutSpec& spec, std::uint64_t index) {
  const auto block = philox4x32(spec.seed, spec.stream, index / 8);
  const std::uint32_t word = block[(index / 2) % 4];
  return ((word >> (16 * (index % 2))) & 0xFFFFu) >= dropout_threshold(spec.p);
}

template <typename T>
void dropout_inplace(T* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec) {
  const T ks = dropout_scale<T>(spec);
  // Short spans (attention dropout, a row at a time inside the kernels'
  // parallel regions) run here: even a parallel construct whose if clause
  // is false costs a team setup, and there are millions of rows per step.
  constexpr std::int64_t kChunk = std::int64_t{1} << 14;
  if (n < 4 * kChunk) return dropout_range(x, x, 0, n, base, spec, ks);
    // The mask is a function of each element's index alone, so any split of
    // the elements between threads gives the same result.
#pragma omp parallel for schedule(static)
  for (std::int64_t lo = 0; lo < n; lo += kChunk) dropout_range(x, x, lo, std::min(n, lo + kChunk), base, spec, ks);
}

void dropout_row(float* y, const float* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec) {
  dropout_range(y, x, 0, n, base, spec, dropout_scale<float>(spec));
}

void dropout_row(float* y, const float* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec,
                 std::uint64_t* bits, std::int64_t at) {
  dropout_range(y, x, 0, n, base, spec, dropout_scale<float>(spec), bits, at);
}

void dropout_row_from_bits(float* y, const float* x, std::int64_t n, const DropoutSpec& spec, const std::uint64_t* bits,
                           std::int64_t at) {
  MULTIHEAD_DISPATCH(dropout_row_from_bits)(y, x, n, spec, bits, at);
}

template void dropout_inplace<float>(float*, std::int64_t, std::uint64_t, const DropoutSpec&);
template void dropout_inplace<double>(double*, std::int64_t, std::uint64_t, const DropoutSpec&);

}  // namespace multihead
#endif  // HWY_ONCE
