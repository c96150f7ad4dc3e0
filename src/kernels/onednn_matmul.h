// SPDX-License-Identifier: Apache-2.0
// oneDNN's matmul primitive, created once per product shape and bound once
// per thread: the bf16 products (AMX, AVX512-BF16) and, on AMX, the int8
// ones, whose BLAS-like gemm_u8s8s32 takes a path there several times slower
// than the primitive's AMX-INT8 kernels. Internal header of the GEMM backends.
#pragma once

#include <oneapi/dnnl/dnnl.h>

#include <cstddef>
#include <cstdint>

namespace multihead {

// One product's shape: C (M, N) = alpha op(A) op(B) (+ beta C) (+ bias, one
// fp32 value per column), A (M, K) or stored transposed, B (K, N) or stored
// (N, K). alpha and beta become an output scale and a sum post-op.
struct MatmulKey {
  std::int64_t M, N, K, lda, ldb, ldc;
  bool ta, tb;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  dnnl_data_type_t a_type = dnnl_bf16, b_type = dnnl_bf16, c_type = dnnl_f32;
  // B in the primitive's own layout (onednn_pack_b's copy) rather than as
  // ldb and tb say.
  bool packed_b = false;
  bool operator==(const MatmulKey&) const = default;
};

// For a key with packed_b: the layout the primitive reads B in, its size in
// bytes, and B (stored as k's ldb and tb say) reordered into it.
dnnl_memory_desc_t onednn_packed_b_layout(const MatmulKey& k);
std::size_t onednn_packed_b_bytes(const MatmulKey& k);
void onednn_pack_b(const MatmulKey& k, const void* B, void* packed);

// Runs the product on oneDNN's primitive for k (created on first use, kept
// for later calls of the same shape; a stream of new shapes starts the cache
// over past 1024). Throws Error where oneDNN has no primitive for it.
void onednn_matmul(const MatmulKey& k, const void* A, const void* B, void* C, const float* bias = nullptr);

}  // namespace multihead
