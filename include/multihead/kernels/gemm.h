// SPDX-License-Identifier: Apache-2.0
// Row-major GEMM: C = alpha * op(A) op(B) + beta * C.
// Overloaded for float (the library) and double (the gradient checks).
//
// float products go to the BLAS backend of the calling thread's context
// (core/context.h: oneDNN unless it names OpenBLAS).
// double products always go to OpenBLAS (oneDNN has no dgemm).
#pragma once

#include <cstdint>
#include <string_view>

#include "multihead/core/context.h"

namespace multihead {

enum class Trans : bool { kNo = false, kYes = true };

// "onednn" or "openblas"; anything else throws ConfigError.
GemmBackend parse_gemm_backend(std::string_view name);
const char* gemm_backend_name(GemmBackend backend);

// Whether oneDNN runs AVX-512 kernels here (its effective ISA, which ONEDNN_MAX_CPU_ISA caps).
bool onednn_has_avx512();

// op(A): (M, K), op(B): (K, N), C: (M, N); lda/ldb/ldc are row strides.
void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);
void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const double* A,
          std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C, std::int64_t ldc);

// A product with nothing to multiply, as every GEMM here treats it: nothing
// to do when M or N is 0, and C = beta C (0 where beta is 0, NaN or not)
// when K is 0, where BLAS would reject zero leading dimensions. Returns
// whether the product was empty (and so is done).
template <typename T>
bool gemm_empty_product(std::int64_t M, std::int64_t N, std::int64_t K, T beta, T* C, std::int64_t ldc) {
  if (M == 0 || N == 0) return true;
  if (K != 0) return false;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
  return true;
}

}  // namespace multihead
