// SPDX-License-Identifier: Apache-2.0
// GELU in float vectors (src/kernels/gelu.cpp), dispatched to the CPU's
// Highway target: the activations' float path (activations.cpp). Internal
// header of src/kernels.
#pragma once

#include <cstdint>

namespace multihead {

// y = gelu(x), (n); y may alias x. tanh_approx: F.gelu(approximate="tanh").
void gelu_forward(float* y, const float* x, std::int64_t n, bool tanh_approx);
// dx = gelu'(x) dy, (n); dx may alias dy.
void gelu_backward(float* dx, const float* dy, const float* x, std::int64_t n, bool tanh_approx);

}  // namespace multihead
