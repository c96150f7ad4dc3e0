// SPDX-License-Identifier: Apache-2.0
// Fused attention that multiplies in bf16, for CPUs with bf16 matrix units
// (AMX tiles, AVX512-BF16 dot products), forward and backward.
//
// Each task takes a block of queries against every key it can see: the
// visible key tiles form runs of consecutive keys (a few hundred keys at
// most, so that a run's scores and weights stay in L2), and each run is one
// product per step, on AMX tiles against K and V laid out once per head
// where the CPU has them, otherwise one oneDNN bf16 matmul (gemm_bf16), with
// fp32 accumulation. Between the products the softmax runs in fp32: forward
// online across the runs (running maximum and sum, the output rescaled as
// the maximum grows, as FlashAttention does), backward from the saved lse.
// Memory stays linear in the sequence length (a few (q_block, run) buffers
// per thread). What is rounded to bf16, as FlashAttention does: Q, K, V
// (stored so), the weights P for P V, and in backward dO for dO V^T and
// P^T dO, and dS for dS K and dS^T Q. Scores, the softmax, lse, delta and
// every gradient stay fp32.
//
// Same arguments, layouts and semantics as attention_fused_forward /
// attention_fused_backward (masks, positions, sparse patterns, dropout,
// fully masked rows); attention_fused_*<BF16> call these when
// computes_in_bf16(DType::kBF16). tiles.q_block is the query block (twice
// that on AMX, whose products want taller blocks), tiles.k_block the key
// granularity at which masks skip keys.
#pragma once

#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_types.h"
#include "multihead/core/tensor.h"

namespace multihead {

// out: (B, L, H, Dv) view, written; lse: (B, H, L), written.
void attention_bf16_forward(HeadsView<BF16> out, float* lse, HeadsView<const BF16> q, HeadsView<const BF16> k,
                            HeadsView<const BF16> v, const ScoreTerms<float>& terms, const AttentionDims& dims,
                            float scale, const AttentionDropout& dropout, const AttentionTiles& tiles = {});

// dq, dk, dv: written, not accumulated; the relative-position gradients
// added into d_relative.
void attention_bf16_backward(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                             HeadsView<const BF16> out, HeadsView<const float> dout, HeadsView<const BF16> q,
                             HeadsView<const BF16> k, HeadsView<const BF16> v, const ScoreTerms<float>& terms,
                             const AttentionDims& dims, float scale, const AttentionDropout& dropout,
                             const AttentionTiles& tiles = {}, const RelativePositionGrads<float>& d_relative = {});

}  // namespace multihead
