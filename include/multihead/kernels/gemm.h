// Row-major GEMM: C = alpha * op(A) op(B) + beta * C.
// Overloaded for float (the library) and double (the gradient checks).
//
// float products go to one of two BLAS backends, chosen per process:
//   kOneDnn   oneDNN's sgemm (the default). It picks its kernels from the CPU
//             at run time, AVX-512 included, and threads through the same
//             OpenMP runtime as our kernels.
//   kOpenBlas OpenBLAS's cblas_sgemm, whose kernels follow OpenBLAS's own CPU
//             detection and the OPENBLAS_CORETYPE environment variable.
// double products always go to OpenBLAS (oneDNN has no dgemm).
#pragma once

#include <cstdint>
#include <string_view>

namespace multihead {

enum class Trans : bool { kNo = false, kYes = true };

enum class GemmBackend { kOneDnn, kOpenBlas };

void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();
// "onednn" or "openblas"; anything else throws ConfigError.
GemmBackend parse_gemm_backend(std::string_view name);
const char* gemm_backend_name(GemmBackend backend);

// op(A): (M, K), op(B): (K, N), C: (M, N); lda/ldb/ldc are row strides.
void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);
void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const double* A,
          std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C, std::int64_t ldc);

}  // namespace multihead
