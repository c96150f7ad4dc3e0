// Register-blocked GEMM for attention tiles (Google Highway). Internal header.
//
//   C (M, N) = alpha * op(A) B  [+ C when accumulate]
//   op(A) = A (M, K), row stride lda,   or A^T with A stored (K, M) when kTransA
//   B (K, N), row stride ldb, unit stride along N
//
// Every product in the fused attention kernels has this form once K^T or V^T
// is packed (Q K^T, P V, dO V^T, dS K, P^T dO, dS^T Q). The micro-kernel
// keeps a kRows x kVecs block of C in registers (6 x 4 vectors: 24 of the
// 32 AVX-512 registers, leaving room for 4 B vectors and a broadcast) and
// streams one row of B and one column of A per step: 4 loads and 6
// broadcasts feed 24 FMAs. Tiles are small and hot in L1/L2, so no packing
// of A or B beyond the caller's K^T / V^T is needed.
#pragma once

#include <hwy/highway.h>

#include <cstdint>

namespace multihead::simd {

namespace hn_gemm = hwy::HWY_NAMESPACE;

inline constexpr int kGemmRows = 6;
inline constexpr int kGemmVecs = 4;

// kPartial: the last vector of the block holds only last_lanes columns. A
// compile-time flag, so the inner loop has no branch: with one, GCC keeps the
// accumulators in memory instead of registers and runs 3x slower.
template <int kRows, int kVecs, bool kTransA, bool kPartial>
inline void gemm_micro(float* C, std::int64_t ldc, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
                       std::int64_t K, float alpha, bool accumulate, std::size_t last_lanes) {
  namespace hn = hn_gemm;
  const hn::ScalableTag<float> d;
  const std::size_t N = hn::Lanes(d);
  const auto last_mask = hn::FirstN(d, last_lanes);
  constexpr bool partial = kPartial;
  using V = decltype(hn::Zero(d));
  V c[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) c[r][v] = hn::Zero(d);
  for (std::int64_t k = 0; k < K; ++k) {
    const float* brow = B + k * ldb;
    V b[kVecs];
    for (int v = 0; v < kVecs; ++v)
      b[v] = (v == kVecs - 1 && partial) ? hn::MaskedLoad(last_mask, d, brow + v * N) : hn::LoadU(d, brow + v * N);
    for (int r = 0; r < kRows; ++r) {
      const auto a = hn::Set(d, kTransA ? A[k * lda + r] : A[r * lda + k]);
      for (int v = 0; v < kVecs; ++v) c[r][v] = hn::MulAdd(a, b[v], c[r][v]);
    }
  }
  const auto va = hn::Set(d, alpha);
  for (int r = 0; r < kRows; ++r) {
    float* crow = C + r * ldc;
    for (int v = 0; v < kVecs; ++v) {
      const bool tail = v == kVecs - 1 && partial;
      auto out = hn::Mul(c[r][v], va);
      if (accumulate) out = hn::Add(out, tail ? hn::MaskedLoad(last_mask, d, crow + v * N) : hn::LoadU(d, crow + v * N));
      if (tail) hn::BlendedStore(out, last_mask, d, crow + v * N);
      else hn::StoreU(out, d, crow + v * N);
    }
  }
}

template <int kRows, bool kTransA>
inline void gemm_rows(float* C, std::int64_t ldc, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
                      std::int64_t N, std::int64_t K, float alpha, bool accumulate) {
  const hn_gemm::ScalableTag<float> d;
  const std::int64_t lanes = static_cast<std::int64_t>(hn_gemm::Lanes(d));
  const std::int64_t block = lanes * kGemmVecs;
  std::int64_t n0 = 0;
  for (; n0 + block <= N; n0 += block)
    gemm_micro<kRows, kGemmVecs, kTransA, false>(C + n0, ldc, A, lda, B + n0, ldb, K, alpha, accumulate,
                                                 static_cast<std::size_t>(lanes));
  const std::int64_t rest = N - n0;
  if (rest <= 0) return;
  const int vecs = static_cast<int>((rest + lanes - 1) / lanes);
  const std::size_t last = static_cast<std::size_t>(rest - (vecs - 1) * lanes);
  const bool partial = static_cast<std::int64_t>(last) < lanes;
  float* c = C + n0;
  const float* b = B + n0;
#define MULTIHEAD_TAIL(V)                                                                         \
  (partial ? gemm_micro<kRows, V, kTransA, true>(c, ldc, A, lda, b, ldb, K, alpha, accumulate, last) \
           : gemm_micro<kRows, V, kTransA, false>(c, ldc, A, lda, b, ldb, K, alpha, accumulate, last))
  switch (vecs) {
    case 1: MULTIHEAD_TAIL(1); break;
    case 2: MULTIHEAD_TAIL(2); break;
    case 3: MULTIHEAD_TAIL(3); break;
    default: MULTIHEAD_TAIL(4); break;
  }
#undef MULTIHEAD_TAIL
}

template <bool kTransA>
inline void tile_gemm(float* C, std::int64_t ldc, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
                      std::int64_t M, std::int64_t N, std::int64_t K, float alpha, bool accumulate) {
  // Row r of op(A) starts at A + r*lda, or at column r of A^T's storage.
  auto a_rows = [&](std::int64_t m0) { return kTransA ? A + m0 : A + m0 * lda; };
  std::int64_t m0 = 0;
  for (; m0 + kGemmRows <= M; m0 += kGemmRows)
    gemm_rows<kGemmRows, kTransA>(C + m0 * ldc, ldc, a_rows(m0), lda, B, ldb, N, K, alpha, accumulate);
  switch (M - m0) {
    case 1: gemm_rows<1, kTransA>(C + m0 * ldc, ldc, a_rows(m0), lda, B, ldb, N, K, alpha, accumulate); break;
    case 2: gemm_rows<2, kTransA>(C + m0 * ldc, ldc, a_rows(m0), lda, B, ldb, N, K, alpha, accumulate); break;
    case 3: gemm_rows<3, kTransA>(C + m0 * ldc, ldc, a_rows(m0), lda, B, ldb, N, K, alpha, accumulate); break;
    case 4: gemm_rows<4, kTransA>(C + m0 * ldc, ldc, a_rows(m0), lda, B, ldb, N, K, alpha, accumulate); break;
    case 5: gemm_rows<5, kTransA>(C + m0 * ldc, ldc, a_rows(m0), lda, B, ldb, N, K, alpha, accumulate); break;
    default: break;
  }
}

}  // namespace multihead::simd
