// SPDX-License-Identifier: Apache-2.0
// Affine map y = x W^T + b with PyTorch's nn.Linear layout: W is (out, in).
#pragma once

#include <cstdint>

#include "multihead/core/tensor.h"

namespace multihead {

// y: (N, out) row stride ldy; x: (N, in) row stride ldx; W: (out, in); b: (out) or null.
template <typename T>
void linear_forward(T* y, std::int64_t ldy, const T* x, std::int64_t ldx, const T* W, const T* b, std::int64_t N,
                    std::int64_t in, std::int64_t out);

// The same with W given transposed, Wt: (in, out). oneDNN's sgemm runs
// x W^T up to a quarter slower than x Wt when `in` is long and `out` short
// (measured on the feed-forward block's second product, in 2048 and out 256,
// AVX-512): a layer whose W serves many row blocks transposes it once.
template <typename T>
void linear_forward_t(T* y, std::int64_t ldy, const T* x, std::int64_t ldx, const T* Wt, const T* b, std::int64_t N,
                      std::int64_t in, std::int64_t out);

// dx (N, in), row stride lddx: written (accumulate_dx = false) or added to; null to skip.
// dW (out, in) and db (out): added to (+=); db may be null.
// dy: (N, out) row stride lddy; x: (N, in) row stride ldx.
template <typename T>
void linear_backward(T* dx, std::int64_t lddx, bool accumulate_dx, T* dW, T* db, const T* dy, std::int64_t lddy,
                     const T* x, std::int64_t ldx, const T* W, std::int64_t N, std::int64_t in, std::int64_t out);

// The same with x stored as X: float, or BF16 / F16 for activations kept in
// 16 bits; y, dx, dW, db, dy and W are fp32. BF16 x computes in bf16 where
// the CPU has bf16 units (bf16_path() != kWiden; W is rounded each call,
// unless W16 is W already rounded: ParamStore::bf16); otherwise, and for
// F16, x is widened to fp32 a block of rows at a time inside the kernel,
// never as a whole.
template <typename X>
void linear_forward_stored(float* y, std::int64_t ldy, const X* x, std::int64_t ldx, const float* W, const float* b,
                           std::int64_t N, std::int64_t in, std::int64_t out, const BF16* W16 = nullptr);
template <typename X>
void linear_backward_stored(float* dx, std::int64_t lddx, bool accumulate_dx, float* dW, float* db, const float* dy,
                            std::int64_t lddy, const X* x, std::int64_t ldx, const float* W, std::int64_t N,
                            std::int64_t in, std::int64_t out);

// bf16 compute, for mixed precision on a CPU with bf16 matrix units
// (kernels/gemm_bf16.h): x and W in bf16, every product accumulated in fp32;
// y, dx, dW, db and dy are fp32. Backward rounds dy to bf16 for its two
// products, as the gradient of an autocast bf16 matmul is.
void linear_forward_bf16(float* y, std::int64_t ldy, const BF16* x, std::int64_t ldx, const BF16* W, const float* b,
                         std::int64_t N, std::int64_t in, std::int64_t out);
// y rounded to bf16 as the product writes it: for outputs that would only
// be narrowed (the attention projections).
void linear_forward_bf16(BF16* y, std::int64_t ldy, const BF16* x, std::int64_t ldx, const BF16* W, const float* b,
                         std::int64_t N, std::int64_t in, std::int64_t out);
void linear_backward_bf16(float* dx, std::int64_t lddx, bool accumulate_dx, float* dW, float* db, const float* dy,
                          std::int64_t lddy, const BF16* x, std::int64_t ldx, const BF16* W, std::int64_t N,
                          std::int64_t in, std::int64_t out);
// The products of linear_backward_bf16 for a dy already rounded to bf16
// (dense, (N, out)) by the kernel that made it; no db.
void linear_backward_bf16_rounded(float* dx, std::int64_t lddx, bool accumulate_dx, float* dW, const BF16* dy,
                                  const BF16* x, std::int64_t ldx, const BF16* W, std::int64_t N, std::int64_t in,
                                  std::int64_t out);

// W (rows, cols) fp32 rounded to a new BF16 tensor, for the bf16 kernels.
Tensor bf16_weights(const float* W, std::int64_t rows, std::int64_t cols);

}  // namespace multihead
