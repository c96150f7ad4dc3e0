// Affine map y = x W^T + b with PyTorch's nn.Linear layout: W is (out, in).
#pragma once

#include <cstdint>

namespace multihead {

// y: (N, out) row stride ldy; x: (N, in) row stride ldx; W: (out, in); b: (out) or null.
template <typename T>
void linear_forward(T* y, std::int64_t ldy, const T* x, std::int64_t ldx, const T* W, const T* b, std::int64_t N,
                    std::int64_t in, std::int64_t out);

// dx (N, in), row stride lddx: written (accumulate_dx = false) or added to; null to skip.
// dW (out, in) and db (out): added to (+=); db may be null.
// dy: (N, out) row stride lddy; x: (N, in) row stride ldx.
template <typename T>
void linear_backward(T* dx, std::int64_t lddx, bool accumulate_dx, T* dW, T* db, const T* dy, std::int64_t lddy,
                     const T* x, std::int64_t ldx, const T* W, std::int64_t N, std::int64_t in, std::int64_t out);

}  // namespace multihead
