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

// The same with x stored as X: float, or BF16 / F16 for activations kept in
// 16 bits. x is widened to fp32 a block of rows at a time inside the kernel,
// never as a whole; y, dx, dW, db, dy and W are fp32.
template <typename X>
void linear_forward_stored(float* y, std::int64_t ldy, const X* x, std::int64_t ldx, const float* W, const float* b,
                           std::int64_t N, std::int64_t in, std::int64_t out);
template <typename X>
void linear_backward_stored(float* dx, std::int64_t lddx, bool accumulate_dx, float* dW, float* db, const float* dy,
                            std::int64_t lddy, const X* x, std::int64_t ldx, const float* W, std::int64_t N,
                            std::int64_t in, std::int64_t out);

}  // namespace multihead
