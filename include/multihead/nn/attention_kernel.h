// SPDX-License-Identifier: Apache-2.0
// The attention kernel a module runs on heads stored as T: for bf16 storage
// on a CPU that multiplies in bf16 (computes_in_bf16), the bf16 kernel
// (attention_bf16.h); otherwise the fused kernel, which for 16-bit storage
// widens the values and computes in fp32. The kernels themselves never
// choose another: this is the one place that does.
#pragma once

#include <type_traits>

#include "multihead/kernels/attention_bf16.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/gemm_bf16.h"

namespace multihead {

template <typename T>
void attention_stored_forward(HeadsView<T> out, float* lse, HeadsView<const T> q, HeadsView<const T> k,
                              HeadsView<const T> v, const ScoreTerms<float>& terms, const AttentionDims& dims,
                              float scale, const AttentionDropout& dropout, const AttentionTiles& tiles = {}) {
  if constexpr (std::is_same_v<T, BF16>)
    if (computes_in_bf16(DType::kBF16))
      return attention_bf16_forward(out, lse, q, k, v, terms, dims, scale, dropout, tiles);
  attention_fused_forward<T>(out, lse, q, k, v, terms, dims, scale, dropout, tiles);
}

template <typename T>
void attention_stored_backward(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                               HeadsView<const T> out, HeadsView<const float> dout, HeadsView<const T> q,
                               HeadsView<const T> k, HeadsView<const T> v, const ScoreTerms<float>& terms,
                               const AttentionDims& dims, float scale, const AttentionDropout& dropout,
                               const AttentionTiles& tiles = {}, const RelativePositionGrads<float>& d_relative = {}) {
  if constexpr (std::is_same_v<T, BF16>)
    if (computes_in_bf16(DType::kBF16))
      return attention_bf16_backward(dq, dk, dv, lse, out, dout, q, k, v, terms, dims, scale, dropout, tiles,
                                     d_relative);
  attention_fused_backward<T>(dq, dk, dv, lse, out, dout, q, k, v, terms, dims, scale, dropout, tiles, d_relative);
}

}  // namespace multihead
