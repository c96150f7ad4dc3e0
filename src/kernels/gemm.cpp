#include "multihead/kernels/gemm.h"

#include <cblas.h>

namespace multihead {
namespace {

CBLAS_TRANSPOSE cblas_trans(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

// CBLAS takes int sizes; every size here comes from a validated tensor shape.
inline blasint bi(std::int64_t v) { return static_cast<blasint>(v); }

// BLAS rejects K = 0 with zero leading dimensions; the product is then empty.
template <typename T>
void scale_only(std::int64_t M, std::int64_t N, T beta, T* C, std::int64_t ldc) {
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

template <typename T, typename Blas>
void gemm_any(Blas blas, Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, const T* A,
              std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C, std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_only(M, N, beta, C, ldc);
  blas(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), bi(M), bi(N), bi(K), alpha, A, bi(lda), B, bi(ldb), beta, C,
       bi(ldc));
}

}  // namespace

void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  gemm_any(cblas_sgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const double* A,
          std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C, std::int64_t ldc) {
  gemm_any(cblas_dgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace multihead
