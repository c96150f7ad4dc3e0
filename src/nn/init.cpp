#include "multihead/nn/init.h"

#include <cmath>

namespace multihead {

void xavier_uniform(std::span<float> w, std::int64_t fan_in, std::int64_t fan_out, Rng& rng, float gain) {
  const float a = gain * std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  for (float& x : w) x = rng.uniform(-a, a);
}

void xavier_normal(std::span<float> w, std::int64_t fan_in, std::int64_t fan_out, Rng& rng, float gain) {
  const float sd = gain * std::sqrt(2.0f / static_cast<float>(fan_in + fan_out));
  for (float& x : w) x = rng.normal(0.0f, sd);
}

void linear_default_uniform(std::span<float> w, std::int64_t fan_in, Rng& rng) {
  const float a = 1.0f / std::sqrt(static_cast<float>(fan_in));
  for (float& x : w) x = rng.uniform(-a, a);
}

}  // namespace multihead
