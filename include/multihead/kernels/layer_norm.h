// LayerNorm over the last dimension, as torch.nn.LayerNorm:
//   y = (x - mean) / sqrt(var + eps) * gamma + beta, var biased (divides by d).
#pragma once

#include <cstdint>

namespace multihead {

// y, x: (N, d). mean, rstd: (N), saved for backward. gamma, beta: (d) or null
// (no affine transform).
template <typename T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, std::int64_t N,
                        std::int64_t d, T eps);

// dx (N, d) written; dgamma, dbeta (d) added to (+=), or null.
template <typename T>
void layer_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                         const T* gamma, std::int64_t N, std::int64_t d);

}  // namespace multihead
