// SPDX-License-Identifier: Apache-2.0
// What a backward pass through a TransformerEncoder can report beside the
// gradients (TransformerEncoder::set_gradient_probe): where the gradient of
// the stack's input comes from, and how the heads of each layer's
// self-attention share the gradient of the layer's input. The gradients
// experiment reads it (experiments/gradients.cpp). fp32 only.
#pragma once

#include <vector>

#include "multihead/core/tensor.h"

namespace multihead {

struct GradientProbe {
  // Every path from the stack's input to the loss enters a first sublayer
  // (the attention or the feed-forward block of some layer), or passes the
  // residual stream (and its norms) alone. The input's gradient split by
  // that entry: first_sublayer[l] (B, L, d_model) sums layer l's paths
  // (bottom layer first), residual_only the others. They sum to the input's
  // gradient. first_sublayer[l] is the input's gradient when what enters the
  // stack reaches layer l's sublayers along the residual stream and is
  // detached where it reaches any other layer's.
  std::vector<Tensor> first_sublayer;
  Tensor residual_only;
  // head_gram[l] (H * H, row-major): inner products of the heads' shares of
  // the gradient of layer l's input through its self-attention, each head's
  // along its own query, key and value rows (TransformerEncoderLayer::head_gram).
  std::vector<std::vector<double>> head_gram;
};

}  // namespace multihead
