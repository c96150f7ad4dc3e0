// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/init.h"

#include <cmath>

#include "multihead/nn/param_store.h"

namespace multihead {

void xavier_uniform(std::span<float> w, std::int64_t fan_in, std::int64_t fan_out, Rng& rng, float gain) {
  const float a = gain * std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  for (float& x : w) x = rng.uniform(-a, a);
}

void xavier_normal(std::span<float> w, std::int64_t fan_in, std::int64_t fan_out, Rng& rng, float gain) {
  const float sd = gain * std::sqrt(2.0f / static_cast<float>(fan_in + fan_out));
  for (float& x : w) x = rng.normal(0.0f, sd);
}

void xavier_uniform_all(ParamStore& store, Rng& rng) {
  for (std::size_t h = 0; h < store.entries().size(); ++h) {
    const auto& e = store.entry(h);
    if (e.shape.size() < 2) continue;
    std::int64_t receptive = 1;
    for (std::size_t i = 2; i < e.shape.size(); ++i) receptive *= e.shape[i];
    xavier_uniform(store.data_span(h), e.shape[1] * receptive, e.shape[0] * receptive, rng);
  }
}

void linear_default_uniform(std::span<float> w, std::int64_t fan_in, Rng& rng) {
  const float a = 1.0f / std::sqrt(static_cast<float>(fan_in));
  for (float& x : w) x = rng.uniform(-a, a);
}

}  // namespace multihead
