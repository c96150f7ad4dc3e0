// SPDX-License-Identifier: Apache-2.0
// LayerNorm over the last dimension, as torch.nn.LayerNorm:
//   y = (x - mean) / sqrt(var + eps) * gamma + beta, var biased (divides by d).
#pragma once

#include <cstdint>

#include "multihead/core/tensor.h"
#include "multihead/kernels/dropout.h"

namespace multihead {

// y, x: (N, d). mean, rstd: (N), saved for backward. gamma, beta: (d) or null
// (no affine transform).
template <typename T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, std::int64_t N,
                        std::int64_t d, T eps);

// dx (N, d) written; dgamma, dbeta (d) added to (+=), or null.
template <typename T>
void layer_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                         const T* gamma, std::int64_t N, std::int64_t d);

// The step after a Transformer sublayer, in one pass over the rows where
// torch runs three (dropout, the residual add, the norm):
//   h = x + dropout(s),  y = LayerNorm(h)
// s, x, y: (N, d) fp32. The dropout mask is that of dropout_inplace over the
// whole (N, d) tensor from index 0. h is written over s when write_sum, and
// into `saved` (N, d) rounded to T when saved is not null (the copy backward
// reads; with T = float and write_sum, s itself can serve). mean, rstd: (N).
// Element for element the same values as the three steps one after another.
template <typename T>
void residual_layer_norm_forward(float* y, float* mean, float* rstd, float* s, T* saved, const float* x,
                                 const float* gamma, const float* beta, std::int64_t N, std::int64_t d, float eps,
                                 const DropoutSpec& drop, bool write_sum);

// Its backward, with the gradients that meet at the norm's input and output
// summed on the way:
//   g  = dy + dy_extra                   (dy_extra null: g = dy)
//   dh = LayerNorm'(g) + dh_extra        (dh_extra null: none)
//   ds = dropout(dh), the same mask      (ds null: not written)
// h: the sum as saved by forward, (N, d) in T. dh, ds: (N, d) written;
// dgamma, dbeta (d) added to, or null. Post-norm layers pass the gradient
// reaching y from the next sublayer as dy_extra; pre-norm layers pass the
// residual's gradient as dh_extra.
template <typename T>
void residual_layer_norm_backward(float* dh, float* ds, float* dgamma, float* dbeta, const float* dy,
                                  const float* dy_extra, const float* dh_extra, const T* h, const float* mean,
                                  const float* rstd, const float* gamma, std::int64_t N, std::int64_t d,
                                  const DropoutSpec& drop);

}  // namespace multihead
