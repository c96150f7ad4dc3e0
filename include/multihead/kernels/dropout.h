// Inverted dropout from the counter-based generator: element i of a stream is
// kept when uniform_at(seed, stream, i) >= p and then scaled by 1/(1-p). The
// mask is a pure function of (seed, stream, i): backward and recomputation
// under gradient checkpointing regenerate it instead of storing it.
#pragma once

#include <cstdint>

namespace multihead {

struct DropoutSpec {
  float p = 0.0f;
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  bool active() const { return p > 0.0f; }
};

// x[j] *= keep(base + j) / (1 - p), in place over n elements.
template <typename T>
void dropout_inplace(T* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec);

}  // namespace multihead
