// SPDX-License-Identifier: Apache-2.0
// Register-blocked GEMM for attention tiles (Google Highway). Internal header.
//
//   C (M, N) = alpha * op(A) B  [+ C when accumulate]
//   op(A) = A (M, K), row stride lda,   or A^T with A stored (K, M) when kTransA
//   B (K, N) as a GemmB: blocks of columns, unit stride along N
//
// Every product in the fused attention kernels has this form once K^T or V^T
// is packed (Q K^T, P V, dO V^T, dS K, P^T dO, dS^T Q). The micro-kernel
// keeps a kRows x kVecs block of C in registers and streams one row of B and
// one column of A per step. With AVX-512's 32 registers the block is 6 x 4
// vectors (24, leaving room for 4 B vectors and a broadcast: 4 loads and 6
// broadcasts feed 24 FMAs); with the 16 of AVX2 and narrower targets it is
// 6 x 2 (12 + 2 + 1), since 6 x 4 there spills the accumulators to the stack
// on every step (measured on a Zen 3: the attention core at 36-43% of the
// sgemm rate). The driver takes B one block of columns (the
// micro-kernel's width) at a time and passes every row strip of A over it,
// so that the block stays in L1; B should be dense: rows of B kilobytes
// apart (K^T of a whole head, V read in place from the QKV buffer) map to a
// few L1 sets and defeat the prefetchers, and the products ran 20-30% slower
// (AMX Xeon, head dimension 64). pack_panels_t lays K^T or V^T out as one
// contiguous panel per block.
// Compiled once for each Highway target of the file that includes it (after
// hwy/foreach_target.h), into that target's namespace: the usual include
// guard, toggled by Highway on each pass.
#if defined(MULTIHEAD_KERNELS_TILE_GEMM_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MULTIHEAD_KERNELS_TILE_GEMM_H_
#undef MULTIHEAD_KERNELS_TILE_GEMM_H_
#else
#define MULTIHEAD_KERNELS_TILE_GEMM_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>

#include "multihead/kernels/transpose.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE::simd {

namespace hn_gemm = hwy::HWY_NAMESPACE;

inline constexpr int kGemmRows = 6;
#if HWY_TARGET <= HWY_AVX3
inline constexpr int kGemmVecs = 4;  // 32 vector registers
#else
inline constexpr int kGemmVecs = 2;  // 16 (AVX2) or fewer
#endif

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
      if (accumulate)
        out = hn::Add(out, tail ? hn::MaskedLoad(last_mask, d, crow + v * N) : hn::LoadU(d, crow + v * N));
      if (tail) hn::BlendedStore(out, last_mask, d, crow + v * N);
      else hn::StoreU(out, d, crow + v * N);
    }
  }
}

// Columns of B in a block of the micro-kernel: kGemmVecs vectors.
inline std::int64_t gemm_block_cols() {
  return static_cast<std::int64_t>(hn_gemm::Lanes(hn_gemm::ScalableTag<float>())) * kGemmVecs;
}

// The right-hand operand B (K, N) of tile_gemm: the columns of block j
// (gemm_block_cols() wide) start at at + j * block_stride, rows ld apart. A
// row-major matrix has its blocks side by side; panels hold each block as
// one (K, width) matrix of its own.
struct GemmB {
  const float* at;
  std::int64_t ld, block_stride;
};
inline GemmB row_major_b(const float* B, std::int64_t ld) { return {B, ld, gemm_block_cols()}; }

// Panels of B (K, N), W = gemm_block_cols(): block j at j * K * W floats,
// its rows W apart (the last block's too, if narrower), or N apart when N
// <= W (one block: B dense). panels_size is their size in floats.
inline std::int64_t panel_width(std::int64_t N) { return std::min(N, gemm_block_cols()); }
inline std::int64_t panels_size(std::int64_t K, std::int64_t N) {
  const std::int64_t w = panel_width(N);
  return w == 0 ? 0 : K * ((N + w - 1) / w * w);
}
inline GemmB panels_b(const float* at, std::int64_t K, std::int64_t N) {
  return {at, panel_width(N), K * gemm_block_cols()};
}

// Panels of B = src^T at dst, for src (N, K) rows lds apart (keys or values
// of a tile as the right-hand side of Q K^T or dO V^T); the panels' tail
// past N is left alone.
inline GemmB pack_panels_t(float* dst, const float* src, std::int64_t lds, std::int64_t N, std::int64_t K) {
  const std::int64_t W = gemm_block_cols(), ld = panel_width(N);
  for (std::int64_t n0 = 0; n0 < N; n0 += W)
    transpose(dst + (n0 / W) * K * W, ld, src + n0 * lds, lds, std::min(W, N - n0), K);
  return panels_b(dst, K, N);
}

// C rows (kRows, w) over one block of B, w <= gemm_block_cols() columns.
template <int kRows, bool kTransA>
inline void gemm_block(float* C, std::int64_t ldc, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
                       std::int64_t w, std::int64_t K, float alpha, bool accumulate) {
  const std::int64_t lanes = static_cast<std::int64_t>(hn_gemm::Lanes(hn_gemm::ScalableTag<float>()));
  const int vecs = static_cast<int>((w + lanes - 1) / lanes);
  const std::size_t last = static_cast<std::size_t>(w - (vecs - 1) * lanes);
  const bool partial = static_cast<std::int64_t>(last) < lanes;
#define MULTIHEAD_BLOCK(V)                                                                           \
  (partial ? gemm_micro<kRows, V, kTransA, true>(C, ldc, A, lda, B, ldb, K, alpha, accumulate, last) \
           : gemm_micro<kRows, V, kTransA, false>(C, ldc, A, lda, B, ldb, K, alpha, accumulate, last))
  // vecs <= kGemmVecs: w is at most one block.
  switch (vecs) {
    case 1: MULTIHEAD_BLOCK(1); break;
    case 2: MULTIHEAD_BLOCK(2); break;
    case 3: MULTIHEAD_BLOCK(std::min(3, kGemmVecs)); break;
    default: MULTIHEAD_BLOCK(kGemmVecs); break;
  }
#undef MULTIHEAD_BLOCK
}

template <bool kTransA>
inline void tile_gemm(float* C, std::int64_t ldc, const float* A, std::int64_t lda, GemmB B, std::int64_t M,
                      std::int64_t N, std::int64_t K, float alpha, bool accumulate) {
  // Row r of op(A) starts at A + r*lda, or at column r of A^T's storage.
  auto a_rows = [&](std::int64_t m0) { return kTransA ? A + m0 : A + m0 * lda; };
  const std::int64_t W = gemm_block_cols();
  for (std::int64_t n0 = 0; n0 < N; n0 += W) {
    const float* b = B.at + (n0 / W) * B.block_stride;
    const std::int64_t w = std::min(W, N - n0);
    float* c = C + n0;
    std::int64_t m0 = 0;
    for (; m0 + kGemmRows <= M; m0 += kGemmRows)
      gemm_block<kGemmRows, kTransA>(c + m0 * ldc, ldc, a_rows(m0), lda, b, B.ld, w, K, alpha, accumulate);
    switch (M - m0) {
      case 1: gemm_block<1, kTransA>(c + m0 * ldc, ldc, a_rows(m0), lda, b, B.ld, w, K, alpha, accumulate); break;
      case 2: gemm_block<2, kTransA>(c + m0 * ldc, ldc, a_rows(m0), lda, b, B.ld, w, K, alpha, accumulate); break;
      case 3: gemm_block<3, kTransA>(c + m0 * ldc, ldc, a_rows(m0), lda, b, B.ld, w, K, alpha, accumulate); break;
      case 4: gemm_block<4, kTransA>(c + m0 * ldc, ldc, a_rows(m0), lda, b, B.ld, w, K, alpha, accumulate); break;
      case 5: gemm_block<5, kTransA>(c + m0 * ldc, ldc, a_rows(m0), lda, b, B.ld, w, K, alpha, accumulate); break;
      default: break;
    }
  }
}

}  // namespace multihead::HWY_NAMESPACE::simd
HWY_AFTER_NAMESPACE();

#endif  // MULTIHEAD_KERNELS_TILE_GEMM_H_
