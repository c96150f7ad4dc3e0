// SPDX-License-Identifier: Apache-2.0
// Out-of-place matrix transpose, for packing Kᵀ and Vᵀ in the fused attention
// kernels. Our own SIMD code, so that its speed does not hang on a BLAS
// library recognising the CPU.
#pragma once

#include <cstdint>

namespace multihead {

// dst (cols, rows) = src (rows, cols)^T, row strides ldd >= rows and
// lds >= cols; the padding of dst's rows is left alone. Single-threaded.
void transpose(float* dst, std::int64_t ldd, const float* src, std::int64_t lds, std::int64_t rows, std::int64_t cols);
// The reference twin: one element at a time.
void transpose_ref(float* dst, std::int64_t ldd, const float* src, std::int64_t lds, std::int64_t rows,
                   std::int64_t cols);

}  // namespace multihead
