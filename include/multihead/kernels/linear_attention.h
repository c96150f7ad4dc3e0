// SPDX-License-Identifier: Apache-2.0
// Linear attention (Katharopoulos et al. 2020) with the feature map
// phi(x) = elu(x) + 1 > 0:
//   out_i = phi(q_i)^T S_i / (phi(q_i) . z_i + eps)
//   S_i = sum_j phi(k_j) v_j^T,  z_i = sum_j phi(k_j)
// over every unpadded key (non-causal), or over the keys up to query i's
// position (causal, bottom-right aligned: j <= i + S - L). Cost and memory
// are linear in the sequence length: the sums are a (D, Dv) state per head,
// kept as prefix sums in the causal form, which is also the recurrent form
// that generation steps through one token at a time. eps keeps the
// denominator away from zero.
//
// The kernels work on blocks of `chunk` queries, so that everything is a
// matrix product (gemm): a block's output is its queries against the state
// of the keys every query of the block sees, plus a masked (chunk, chunk)
// product with the keys only some of them see (causal); the state then
// takes the next block's keys in one product.
#pragma once

#include <cstdint>
#include <vector>

#include "multihead/kernels/attention_types.h"

namespace multihead {

template <typename T>
struct LinearAttentionArgs {
  const std::uint8_t* key_padding = nullptr;  // (B, S), nonzero: ignore the key
  bool causal = false;
  T eps = T(1e-6);
  std::int64_t chunk = 64;  // queries per block: the products' size
};

// out: (B, L, H, Dv) written; q (B, L, H, D), k (B, S, H, D), v (B, S, H, Dv).
template <typename T>
void linear_attention_forward(HeadsView<T> out, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                              const AttentionDims& dims, const LinearAttentionArgs<T>& args);

// Gradients written (not accumulated) into dq, dk, dv. Recomputes the sums
// in O(L) memory: a forward sweep over the blocks gives dq and the gradient
// of the keys each block sees in part; a backward sweep gives the rest of
// dk and dv.
template <typename T>
void linear_attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout,
                               HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                               const AttentionDims& dims, const LinearAttentionArgs<T>& args);

// The recurrent form of the causal sums: one head's state, advanced one
// token at a time, so generation keeps a constant-size cache.
template <typename T>
struct LinearAttentionState {
  std::vector<T> s;  // (D, Dv), sum of phi(k_j) v_j^T
  std::vector<T> z;  // (D), sum of phi(k_j)
};

// Adds key k (D) and value v (Dv) to the state, then writes the output (Dv)
// of query q (D) over everything added so far.
template <typename T>
void linear_attention_step(LinearAttentionState<T>& state, T* out, const T* q, const T* k, const T* v, std::int64_t D,
                           std::int64_t Dv, T eps);

}  // namespace multihead
