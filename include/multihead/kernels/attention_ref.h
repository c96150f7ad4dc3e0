// SPDX-License-Identifier: Apache-2.0
// Reference scaled dot-product attention. It materialises the (L, S) weights
// per (batch, head) and is the oracle the fused kernels are tested against.
//
//   P = softmax(Q K^T * scale + mask [+ scale * Q rel_k^T])   (B, H, L, S), saved for backward
//   O = dropout(P) V [+ dropout(P) rel_v]
//
// A query row whose keys are all masked gets P = 0, so O = 0 and every
// gradient through it is 0 (PyTorch 1.13 returns NaN there).
#pragma once

#include <type_traits>

#include "multihead/kernels/attention_types.h"

namespace multihead {

// out: (B, L, H, Dv) view, written. probs: (B, H, L, S) contiguous, written.
// q: (B, L, H, D), k: (B, S, H, D), v: (B, S, H, Dv) views.
template <typename T>
void attention_ref_forward(HeadsView<T> out, T* probs, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                           const ScoreTerms<std::type_identity_t<T>>& terms, const AttentionDims& dims, T scale,
                           const AttentionDropout& dropout);

// Gradients of the forward above, written (not accumulated) into dq (B, L, H, D),
// dk (B, S, H, D) and dv (B, S, H, Dv). probs is the forward's saved P.
// terms: the forward's; only their relative positions matter here (the
// masking itself is already in probs), whose gradients are added into d_relative.
template <typename T>
void attention_ref_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, const T* probs, HeadsView<const T> dout,
                            HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                            const ScoreTerms<std::type_identity_t<T>>& terms, const AttentionDims& dims, T scale,
                            const AttentionDropout& dropout,
                            const RelativePositionGrads<std::type_identity_t<T>>& d_relative = {});

// The weights as nn.MultiheadAttention returns them: P after dropout (identity
// when dropout is off), per head (B, H, L, S) or averaged over heads (B, L, S).
template <typename T>
void attention_weights_from_probs(T* weights, const T* probs, const AttentionDims& dims, bool average_heads,
                                  const AttentionDropout& dropout);

}  // namespace multihead
