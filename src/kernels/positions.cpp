#include "multihead/kernels/positions.h"

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

template <typename T>
void rope_rotate(HeadsView<T> x, std::int64_t B, std::int64_t L, std::int64_t H, std::int64_t D, std::int64_t offset,
                 double theta, bool inverse) {
  check<ConfigError>(D % 2 == 0, "rotary embeddings need an even head dimension, got {}", D);
  const std::int64_t half = D / 2;
  std::vector<double> freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) freq[static_cast<std::size_t>(i)] = std::pow(theta, -2.0 * i / D);
#pragma omp parallel for schedule(static) if (B * L * D > (1 << 14))
  for (std::int64_t l = 0; l < L; ++l) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(offset + l) * freq[static_cast<std::size_t>(i)];
      const T c = static_cast<T>(std::cos(angle)), s = static_cast<T>(inverse ? -std::sin(angle) : std::sin(angle));
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h) {
          T* p = x.at(b, h) + l * x.row_stride + 2 * i;
          const T a = p[0], bb = p[1];
          p[0] = a * c - bb * s;
          p[1] = a * s + bb * c;
        }
    }
  }
}

template void rope_rotate<float>(HeadsView<float>, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                 std::int64_t, double, bool);
template void rope_rotate<double>(HeadsView<double>, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                  std::int64_t, double, bool);

}  // namespace multihead
