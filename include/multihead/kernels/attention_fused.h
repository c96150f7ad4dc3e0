// SPDX-License-Identifier: Apache-2.0
// Fused ("flash") attention on the CPU, forward and backward.
//
// Queries and keys are processed in tiles with an online softmax (running
// max m and sum l per query row, the output tile rescaled when m grows), so
// the (L, S) score matrix never exists in memory: forward keeps only the
// per-row log-sum-exp, lse = m + log(l), and backward recomputes each tile's
// weights as P = exp(S - lse). Semantics equal attention_ref_forward /
// attention_ref_backward, masks, dropout and fully masked rows included
// (such a row gets lse = +inf, so every recomputed weight is exactly 0).
//
// Threads: forward parallelises over (batch, head, query block), backward
// over (batch, head), so each thread owns whole rows of dQ and whole key
// blocks of dK and dV: no atomics. GEMMs on tiles call single-threaded BLAS.
#pragma once

#include <cstdint>

#include "multihead/kernels/attention_types.h"

namespace multihead {

// How the products on tiles are computed: our register-blocked SIMD
// micro-kernel, or single-threaded BLAS calls. Both are kept so the choice
// stays measurable (docs/BENCHMARKS.md). kAuto takes BLAS for heads of at
// most kBlasTileMaxDim dimensions, where each score gets too few FMAs to
// hide the micro-kernel's stores, and the micro-kernel otherwise.
enum class TileGemm : std::uint8_t { kAuto, kMicroKernel, kBlas };
inline constexpr std::int64_t kBlasTileMaxDim = 8;

// Tile sizes, in rows. The defaults come from the sweep in docs/BENCHMARKS.md.
struct AttentionTiles {
  std::int64_t q_block = 96;   // query rows per tile: a multiple of the micro-kernel's 6 rows
  std::int64_t k_block = 256;  // key rows per tile
  TileGemm gemm = TileGemm::kAuto;
};

// Q, K, V and O are stored as T: float, or BF16 / F16 for mixed precision
// (tiles are widened to fp32 as they are read, O rounded as it is written;
// everything else, lse and the gradients included, is fp32). BF16 on a CPU
// with bf16 matrix units (computes_in_bf16) multiplies in bf16 instead:
// forward and backward go to attention_bf16.h. The weights are always
// recomputed in fp32.

// out: (B, L, H, Dv) view, written; lse: (B, H, L), written.
// q: (B, L, H, D), k: (B, S, H, D), v: (B, S, H, Dv) views.
template <typename T>
void attention_fused_forward(HeadsView<T> out, float* lse, HeadsView<const T> q, HeadsView<const T> k,
                             HeadsView<const T> v, const ScoreTerms<float>& terms, const AttentionDims& dims,
                             float scale, const AttentionDropout& dropout, const AttentionTiles& tiles = {});

// dq (B, L, H, D), dk (B, S, H, D), dv (B, S, H, Dv): written, not accumulated.
// out and lse are the forward's results; dout is the gradient of out. The
// relative-position embeddings' gradients are added into d_relative.
template <typename T>
void attention_fused_backward(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                              HeadsView<const T> out, HeadsView<const float> dout, HeadsView<const T> q,
                              HeadsView<const T> k, HeadsView<const T> v, const ScoreTerms<float>& terms,
                              const AttentionDims& dims, float scale, const AttentionDropout& dropout,
                              const AttentionTiles& tiles = {}, const RelativePositionGrads<float>& d_relative = {});

// The weights nn.MultiheadAttention returns, recomputed tile by tile from the
// saved lse: (B, H, L, S) per head, or (B, L, S) averaged over heads; after
// dropout when dropout is active.
template <typename T>
void attention_fused_weights(float* weights, bool average_heads, const float* lse, HeadsView<const T> q,
                             HeadsView<const T> k, const ScoreTerms<float>& terms, const AttentionDims& dims,
                             float scale, const AttentionDropout& dropout, const AttentionTiles& tiles = {});

}  // namespace multihead
