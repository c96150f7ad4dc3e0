// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/positions.h"

#include <algorithm>
#include <cmath>

#include "multihead/core/error.h"

namespace multihead {

std::vector<float> alibi_slopes(std::int64_t num_heads) {
  check<ConfigError>(num_heads > 0, "ALiBi needs at least one head, got {}", num_heads);
  auto power_of_two_slopes = [](std::int64_t n) {
    std::vector<float> s;
    for (std::int64_t h = 0; h < n; ++h)
      s.push_back(static_cast<float>(std::pow(2.0, -8.0 * static_cast<double>(h + 1) / static_cast<double>(n))));
    return s;
  };
  std::int64_t p = 1;
  while (p * 2 <= num_heads) p *= 2;
  std::vector<float> slopes = power_of_two_slopes(p);
  if (p < num_heads) {
    std::vector<float> extra = power_of_two_slopes(2 * p);
    for (std::int64_t i = 0; static_cast<std::int64_t>(slopes.size()) < num_heads; i += 2)
      slopes.push_back(extra[static_cast<std::size_t>(i)]);
  }
  return slopes;
}

namespace {

// The angle of pair i at position pos: pos * theta^(-2i / D), in double.
double rope_angle(std::int64_t pos, std::int64_t i, std::int64_t D, double theta) {
  return static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
}

// Rotates every head's pairs at each of the L positions by the (cos, sin)
// pairs cs (L, D/2, 2); sines negated where inverse.
template <typename T>
void rotate_by(HeadsView<T> x, std::int64_t B, std::int64_t L, std::int64_t H, std::int64_t D, const T* cs,
               bool inverse) {
  const std::int64_t half = D / 2;
  const T sign = inverse ? T(-1) : T(1);
#pragma omp parallel for schedule(static) if (B * L * H * D > (1 << 15))
  for (std::int64_t l = 0; l < L; ++l) {
    const T* row = cs + l * half * 2;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        T* p = x.at(b, h) + l * x.row_stride;
        for (std::int64_t i = 0; i < half; ++i) {
          const T c = row[2 * i], s = sign * row[2 * i + 1];
          const T a = p[2 * i], bb = p[2 * i + 1];
          p[2 * i] = a * c - bb * s;
          p[2 * i + 1] = a * s + bb * c;
        }
      }
  }
}

template <typename T>
void fill_pairs(T* cs, std::int64_t first, std::int64_t count, std::int64_t D, double theta) {
  const std::int64_t half = D / 2;
  for (std::int64_t l = 0; l < count; ++l)
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = rope_angle(first + l, i, D, theta);
      cs[(l * half + i) * 2] = static_cast<T>(std::cos(angle));
      cs[(l * half + i) * 2 + 1] = static_cast<T>(std::sin(angle));
    }
}

}  // namespace

template <typename T>
void rope_rotate(HeadsView<T> x, std::int64_t B, std::int64_t L, std::int64_t H, std::int64_t D, std::int64_t offset,
                 double theta, bool inverse) {
  check<ConfigError>(D % 2 == 0, "rotary embeddings need an even head dimension, got {}", D);
  std::vector<T> cs(static_cast<std::size_t>(L * D));
  fill_pairs(cs.data(), offset, L, D, theta);
  rotate_by(x, B, L, H, D, cs.data(), inverse);
}

const float* RopeTable::rows(std::int64_t offset, std::int64_t L, std::int64_t D, double theta) {
  check<ConfigError>(D % 2 == 0, "rotary embeddings need an even head dimension, got {}", D);
  check<ConfigError>(offset >= 0 && L >= 0, "RoPE positions must be non-negative, got {} positions from {}", L, offset);
  if (D != D_ || theta != theta_) D_ = D, theta_ = theta, positions_ = 0, cs_.clear();
  if (offset + L > positions_) {
    // Doubled as it grows, so a decoding step after another fills it rarely.
    const std::int64_t want = std::max(offset + L, 2 * positions_);
    cs_.resize(static_cast<std::size_t>(want * D));
    fill_pairs(cs_.data() + positions_ * D, positions_, want - positions_, D, theta);
    positions_ = want;
  }
  return cs_.data() + offset * D;
}

void rope_rotate(HeadsView<float> x, std::int64_t B, std::int64_t L, std::int64_t H, std::int64_t D, const float* cs,
                 bool inverse) {
  rotate_by(x, B, L, H, D, cs, inverse);
}

template void rope_rotate<float>(HeadsView<float>, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                 double, bool);
template void rope_rotate<double>(HeadsView<double>, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                  std::int64_t, double, bool);

}  // namespace multihead
