// Row-major GEMM over CBLAS (OpenBLAS): C = alpha * op(A) op(B) + beta * C.
// Overloaded for float (the library) and double (the gradient checks).
#pragma once

#include <cstdint>

namespace multihead {

enum class Trans : bool { kNo = false, kYes = true };

// op(A): (M, K), op(B): (K, N), C: (M, N); lda/ldb/ldc are row strides.
void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);
void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const double* A,
          std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C, std::int64_t ldc);

}  // namespace multihead
