// SPDX-License-Identifier: Apache-2.0
// Parameter initialisers with PyTorch's formulas (torch.nn.init). The random
// streams differ from PyTorch's; the distributions are the same.
#pragma once

#include <cstdint>
#include <span>

#include "multihead/core/rng.h"

namespace multihead {

// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform(std::span<float> w, std::int64_t fan_in, std::int64_t fan_out, Rng& rng, float gain = 1.0f);
// N(0, std), std = gain * sqrt(2 / (fan_in + fan_out)).
void xavier_normal(std::span<float> w, std::int64_t fan_in, std::int64_t fan_out, Rng& rng, float gain = 1.0f);
class ParamStore;
// nn.Transformer's _reset_parameters: xavier_uniform on every parameter with
// two or more dimensions (fan_in = size(1) x receptive field, fan_out = size(0) x receptive field).
void xavier_uniform_all(ParamStore& store, Rng& rng);

// nn.Linear's default weight init, kaiming_uniform(a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void linear_default_uniform(std::span<float> w, std::int64_t fan_in, Rng& rng);

}  // namespace multihead
