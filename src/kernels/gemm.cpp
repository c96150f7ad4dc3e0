// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/gemm.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>

#include "multihead/core/context.h"
#include "multihead/core/error.h"
#include "multihead/core/suggest.h"
#include "multihead/core/step_profile.h"
#include "few_rows.h"

namespace multihead {
namespace {

CBLAS_TRANSPOSE cblas_trans(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

// CBLAS takes int sizes; every size here comes from a validated tensor shape.
inline blasint bi(std::int64_t v) { return static_cast<blasint>(v); }

// Rows per thread below which one BLAS call keeps the work whole.
constexpr std::int64_t kMinRowsPerThread = 256;

template <typename T, typename Blas>
void gemm_any(Blas blas, Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha, const T* A,
              std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C, std::int64_t ldc) {
  if (gemm_empty_product(M, N, K, beta, C, ldc)) return;
  auto rows = [&](std::int64_t r0, std::int64_t m) {
    // Row r0 of op(A): row r0 of A, or column r0 of A stored (K, M).
    const T* a = ta == Trans::kNo ? A + r0 * lda : A + r0;
    blas(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), bi(m), bi(N), bi(K), alpha, a, bi(lda), B, bi(ldb), beta,
         C + r0 * ldc, bi(ldc));
  };
  // Tall products run as one single-threaded BLAS call per thread on a
  // share of the rows: OpenBLAS sees it is inside a parallel region and
  // stays on one thread. Measured faster than OpenBLAS's own threading on
  // the layer's projections (8.7 against 10.0 ms for 4096 x 512 by 512 x 512
  // on 2 threads), which synchronises its threads inside the call.
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads < 2 || M < kMinRowsPerThread * threads) return rows(0, M);
#pragma omp parallel num_threads(threads)
  {
    const Share s = share_of(M, omp_get_thread_num(), omp_get_num_threads());
    if (s.end > s.begin) rows(s.begin, s.end - s.begin);
  }
}

// oneDNN threads the call itself through OpenMP (but keeps a product of few
// rows on one thread: few_rows.h), and runs it on one thread when called
// inside a parallel region.
void onednn_sgemm_call(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
                       std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(ta == Trans::kYes ? 'T' : 'N', tb == Trans::kYes ? 'T' : 'N', M, N, K, alpha, A,
                                      lda, B, ldb, beta, C, ldc);
  check<Error>(st == dnnl_success, "oneDNN sgemm failed (status {}) for M={} N={} K={}", static_cast<int>(st), M, N, K);
}

void onednn_sgemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
                  std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  if (gemm_empty_product(M, N, K, beta, C, ldc)) return;
  const bool shared = for_column_shares(M, N, [&](std::int64_t c0, std::int64_t n) {
    // Column c0 of op(B): column c0 of B (K, N), or row c0 of B stored (N, K).
    const float* b = tb == Trans::kNo ? B + c0 : B + c0 * ldb;
    onednn_sgemm_call(ta, tb, M, n, K, alpha, A, lda, b, ldb, beta, C + c0, ldc);
  });
  if (!shared) onednn_sgemm_call(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// oneDNN's AVX2 sgemm runs products whose A is transposed (the weight gradients, Xᵀ·dY) at half
// of OpenBLAS's rate and the others alike (Zen 3, 2 threads: 2048 x 256 by K=512 accumulated, 76
// against 165 GFLOP/s; 768 x 256 by K=8192, 138 against 161; 8192 x 2048 by K=256 untransposed,
// 192 against 178): where oneDNN has no AVX-512 kernels, those products go to OpenBLAS.
bool transposed_a_on_openblas() {
  static const bool below_avx512 = !onednn_has_avx512();
  return below_avx512;
}

}  // namespace

bool onednn_has_avx512() {
  const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core);
  return (isa & avx512) == avx512;
}

GemmBackend parse_gemm_backend(std::string_view name) {
  if (name == "onednn") return GemmBackend::kOneDnn;
  if (name == "openblas") return GemmBackend::kOpenBlas;
  throw ConfigError(fmt::format("gemm backend must be onednn or openblas, got '{}'{}", name,
                                did_you_mean(name, {"onednn", "openblas"})));
}

const char* gemm_backend_name(GemmBackend backend) { return backend == GemmBackend::kOneDnn ? "onednn" : "openblas"; }

void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  const StepProfileScope profile(StepPart::kGemm);
  if (context().gemm == GemmBackend::kOneDnn && !(ta == Trans::kYes && transposed_a_on_openblas())) {
    return onednn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  gemm_any(cblas_sgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const double* A,
          std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C, std::int64_t ldc) {
  gemm_any(cblas_dgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace multihead
