// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/gemm_bf16.h"

#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <vector>

#include "multihead/core/error.h"
#include "multihead/core/step_profile.h"
#include "multihead/kernels/half.h"
#include "few_rows.h"
#include "onednn_matmul.h"

namespace multihead {
namespace {

Bf16Path cpu_bf16_path() {
  // Read once: oneDNN fixes its ISA when it first dispatches.
  static const Bf16Path path = [] {
    const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto has = [&](dnnl_cpu_isa_t level) { return (isa & level) == static_cast<unsigned>(level); };
    if (has(dnnl_cpu_isa_avx512_core_amx)) return Bf16Path::kAmx;
    if (has(dnnl_cpu_isa_avx512_core_bf16)) return Bf16Path::kAvx512Bf16;
    return Bf16Path::kWiden;
  }();
  return path;
}

// A product of few rows shared out by columns between the threads
// (few_rows.h), each share a product of its own shape; else one call.
void onednn_gemm_bf16(const MatmulKey& k, const BF16* A, const BF16* B, void* C, const float* bias = nullptr) {
  const bool c_bf16 = k.c_type == dnnl_bf16;
  const bool shared = for_column_shares(k.M, k.N, [&](std::int64_t c0, std::int64_t n) {
    MatmulKey part = k;
    part.N = n;
    // Column c0 of op(B): column c0 of B (K, N), or row c0 of B stored (N, K).
    const BF16* b = k.tb ? B + c0 * k.ldb : B + c0;
    void* c = c_bf16 ? static_cast<void*>(static_cast<BF16*>(C) + c0) : static_cast<void*>(static_cast<float*>(C) + c0);
    onednn_matmul(part, A, b, c, bias != nullptr ? bias + c0 : nullptr);
  });
  if (!shared) onednn_matmul(k, A, B, C, bias);
}

}  // namespace

Bf16Path bf16_path() { return cpu_bf16_path(); }

const char* bf16_path_name(Bf16Path p) {
  switch (p) {
    case Bf16Path::kAmx: return "amx";
    case Bf16Path::kAvx512Bf16: return "avx512_bf16";
    case Bf16Path::kWiden: break;
  }
  return "fp32 (widened)";
}

void gemm_bf16(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const BF16* A,
               std::int64_t lda, const BF16* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  if (gemm_empty_product(M, N, K, beta, C, ldc)) return;
  if (bf16_path() != Bf16Path::kWiden) {
    const StepProfileScope profile(StepPart::kGemm);
    return onednn_gemm_bf16({M, N, K, lda, ldb, ldc, ta == Trans::kYes, tb == Trans::kYes, alpha, beta}, A, B, C);
  }
  // Stored shapes: A is (M, K) or, transposed, (K, M); B is (K, N) or (N, K).
  const bool tra = ta == Trans::kYes, trb = tb == Trans::kYes;
  std::vector<float> a_buf(static_cast<std::size_t>(M * K)), b_buf(static_cast<std::size_t>(K * N));
  std::int64_t lda32 = 0, ldb32 = 0;
  const float* a = rows_as_f32(A, lda, tra ? K : M, tra ? M : K, a_buf.data(), lda32);
  const float* b = rows_as_f32(B, ldb, trb ? N : K, trb ? K : N, b_buf.data(), ldb32);
  gemm(ta, tb, M, N, K, alpha, a, lda32, b, ldb32, beta, C, ldc);
}

namespace {

// C = op(A) op(B) (+ bias on every row, when not null) on oneDNN, C fp32 or
// bf16; false, doing nothing, where the products widen instead.
bool onednn_product(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, const BF16* A, std::int64_t lda,
                    const BF16* B, std::int64_t ldb, const float* bias, void* C, std::int64_t ldc, bool c_bf16) {
  if (K == 0 || bf16_path() == Bf16Path::kWiden) return false;
  const StepProfileScope profile(StepPart::kGemm);
  MatmulKey k{M, N, K, lda, ldb, ldc, ta == Trans::kYes, tb == Trans::kYes, 1.0f, 0.0f};
  k.bias = bias != nullptr;
  k.c_type = c_bf16 ? dnnl_bf16 : dnnl_f32;
  onednn_gemm_bf16(k, A, B, C, bias);
  return true;
}

}  // namespace

void gemm_bf16_bias(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, const BF16* A, std::int64_t lda,
                    const BF16* B, std::int64_t ldb, const float* bias, float* C, std::int64_t ldc) {
  if (M == 0 || N == 0 || onednn_product(ta, tb, M, N, K, A, lda, B, ldb, bias, C, ldc, false)) return;
  if (!bias) return gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
  // Rows seeded with the bias, the product added onto them.
  for (std::int64_t i = 0; i < M; ++i) std::copy(bias, bias + N, C + i * ldc);
  gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
}

void gemm_bf16_bias(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, const BF16* A, std::int64_t lda,
                    const BF16* B, std::int64_t ldb, const float* bias, BF16* C, std::int64_t ldc) {
  if (M == 0 || N == 0 || onednn_product(ta, tb, M, N, K, A, lda, B, ldb, bias, C, ldc, true)) return;
  // The fp32 product, then each row rounded.
  std::vector<float> c32(static_cast<std::size_t>(M * N));
  if (bias) gemm_bf16_bias(ta, tb, M, N, K, A, lda, B, ldb, bias, c32.data(), N);
  else gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, c32.data(), N);
  for (std::int64_t i = 0; i < M; ++i) narrow(C + i * ldc, c32.data() + i * N, N);
}

void gemm_bf16_ref(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const BF16* A,
                   std::int64_t lda, const BF16* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  auto a = [&](std::int64_t i, std::int64_t k) {
    return static_cast<double>(bf16_to_float((ta == Trans::kYes ? A[k * lda + i] : A[i * lda + k]).bits));
  };
  auto b = [&](std::int64_t k, std::int64_t j) {
    return static_cast<double>(bf16_to_float((tb == Trans::kYes ? B[j * ldb + k] : B[k * ldb + j]).bits));
  };
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) acc += a(i, k) * b(k, j);
      const double prev = beta == 0.0f ? 0.0 : static_cast<double>(beta) * C[i * ldc + j];
      C[i * ldc + j] = static_cast<float>(alpha * acc + prev);
    }
}

void to_bf16(BF16* dst, const float* src, std::int64_t n) {
  constexpr std::int64_t kChunk = std::int64_t{1} << 16;
  if (n < 4 * kChunk) return narrow(dst, src, n);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; i += kChunk) narrow(dst + i, src + i, std::min(kChunk, n - i));
}

namespace {

// 16 values (m: which exist) rounded by the units' conversion; with sums,
// each added into it.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline void round_16(BF16* dst, float* sums,
                                                                                     const float* src, __mmask16 m) {
  const __m512 v = _mm512_maskz_loadu_ps(m, src);
  if (sums) _mm512_mask_storeu_ps(sums, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, sums), v));
  _mm256_mask_storeu_epi16(dst, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_on_units(BF16* dst, float* sums,
                                                                                    const float* src, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) round_16(dst + i, sums ? sums + i : nullptr, src + i, 0xFFFF);
  if (i < n) round_16(dst + i, sums ? sums + i : nullptr, src + i, static_cast<__mmask16>((1u << (n - i)) - 1));
}

}  // namespace

void round_operand(BF16* dst, const float* src, std::int64_t n) {
  if (bf16_path() == Bf16Path::kWiden) return narrow(dst, src, n);
  round_on_units(dst, nullptr, src, n);
}

void round_operand_adding(BF16* dst, float* sums, const float* src, std::int64_t n) {
  if (bf16_path() == Bf16Path::kWiden) return narrow_adding(dst, sums, src, n);
  round_on_units(dst, sums, src, n);
}

}  // namespace multihead
