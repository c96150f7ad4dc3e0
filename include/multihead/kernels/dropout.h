// SPDX-License-Identifier: Apache-2.0
// Inverted dropout from the counter-based generator. Element i of a stream
// draws 16 random bits, r(i) = bits [16 (i mod 2), 16 (i mod 2) + 16) of word
// (i / 2) mod 4 of Philox block i / 8 (so one block serves 8 elements), and is
// kept when r(i) >= round(65536 p), then scaled by 1/(1-p). The mask is a pure
// function of (seed, stream, i): backward and recomputation under gradient
// checkpointing regenerate it instead of storing it. The keep probability is
// 1 - p to within 2^-17 (PyTorch's own draws are 24-bit floats).
#pragma once

#include <cstdint>

namespace multihead {

struct DropoutSpec {
  float p = 0.0f;
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  bool active() const { return p > 0.0f; }
};

// round(65536 p): r(i) below it drops element i (65536 drops everything).
std::uint32_t dropout_threshold(float p);

// The factor kept elements are scaled by, 1 / (1 - p) (1 when nothing is
// dropped; 0 when everything is, where no element is kept).
template <typename T>
T dropout_scale(const DropoutSpec& spec) {
  return spec.p < 1.0f ? T(1) / (T(1) - static_cast<T>(spec.p)) : T(0);
}

// The reference twin of the masks: whether element `index` of the stream is kept.
bool dropout_keep_at(const DropoutSpec& spec, std::uint64_t index);

// x[j] *= keep(base + j) / (1 - p), in place over n elements.
template <typename T>
void dropout_inplace(T* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec);

// y[j] = x[j] keep(base + j) / (1 - p) for a row, without threads (y may be
// x): the same values as dropout_inplace, for callers already inside a
// parallel region or dropping into another buffer.
void dropout_row(float* y, const float* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec);

// Keep bits, one per element, bit k of a row in bit k % 64 of 64-bit word
// k / 64: a pass that drops a row again (attention's backward) can read them
// instead of drawing the mask a second time, for the same values.
// dropout_row that also writes element j's keep bit at bit `at + j` of bits.
void dropout_row(float* y, const float* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec,
                 std::uint64_t* bits, std::int64_t at);
// y[j] = x[j] bit(at + j) / (1 - p): dropout_row's values from its recorded bits.
void dropout_row_from_bits(float* y, const float* x, std::int64_t n, const DropoutSpec& spec, const std::uint64_t* bits,
                           std::int64_t at);

}  // namespace multihead
