// SPDX-License-Identifier: Apache-2.0
// Positional encodings that act inside attention rather than on the input:
// rotary embeddings (RoPE) on queries and keys, and the ALiBi slopes (the
// bias itself is applied in the kernels' score computation, see
// ScorePositions::alibi_slopes).
#pragma once

#include <cstdint>
#include <vector>

#include "multihead/kernels/attention_types.h"

namespace multihead {

// The slopes of Press et al. (2022): for H a power of two, slope_h =
// 2^(-8 (h + 1) / H); otherwise those of the nearest lower power of two,
// followed by every other slope of the next power of two.
std::vector<float> alibi_slopes(std::int64_t num_heads);

// RoPE (Su et al. 2021): within each head, the pair (x[2i], x[2i+1]) at
// position p rotates by the angle p * theta^(-2i / D). x: (B, L, H, D) view,
// rotated in place; positions run from `offset`. inverse = true rotates back
// (the gradient of the rotation is its inverse). D must be even.
template <typename T>
void rope_rotate(HeadsView<T> x, std::int64_t B, std::int64_t L, std::int64_t H, std::int64_t D, std::int64_t offset,
                 double theta, bool inverse);

// RoPE's cosines and sines, made once per position and kept: a layer that
// rotates at every call (its queries and keys, a decoding step after
// another) reads them instead of computing L * D/2 of each in double each
// time, which took a fifth of a 20-token attention layer's time. The values
// are rope_rotate's own, so both rotate alike, bit for bit. Not safe to use
// from two threads at once (like the layer that owns it).
class RopeTable {
 public:
  // Rows for positions [offset, offset + L): (L, D/2) pairs (cos, sin),
  // valid until the next call.
  const float* rows(std::int64_t offset, std::int64_t L, std::int64_t D, double theta);

 private:
  std::int64_t D_ = 0, positions_ = 0;
  double theta_ = 0;
  std::vector<float> cs_;  // (positions_, D_/2, 2)
};

// rope_rotate with the pairs of RopeTable::rows(offset, L, D, theta).
void rope_rotate(HeadsView<float> x, std::int64_t B, std::int64_t L, std::int64_t H, std::int64_t D, const float* cs,
                 bool inverse);

}  // namespace multihead
