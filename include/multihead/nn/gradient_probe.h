// SPDX-License-Identifier: Apache-2.0
// An observer of a TransformerEncoder's backward pass
// (TransformerEncoder::set_backward_observer, nn/backward_observer.h) that
// reports where the gradient of the stack's input comes from, and how the
// heads of each layer's self-attention share the gradient of the layer's
// input. The gradients experiment reads it (experiments/gradients.cpp).
// fp32 only.
#pragma once

#include <cstddef>
#include <vector>

#include "multihead/core/tensor.h"
#include "multihead/nn/backward_observer.h"

namespace multihead {

class GradientProbe : public BackwardObserver {
 public:
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
  // along its own query, key and value rows (in pre-LN layers carried back
  // through the norm in front of the attention).
  std::vector<std::vector<double>> head_gram;

  void stack_begins(const Tensor& dy, std::size_t layers) override;
  void before_layer(std::size_t l, const TransformerEncoderLayer& layer, const Tensor& dy) override;
  void after_layer(std::size_t l, const TransformerEncoderLayer& layer, const Tensor& dx) override;
  bool wants_head_shares() const override { return true; }
  void head_shares(const MultiheadAttention& attention, const Tensor& shares) override;

 private:
  const TransformerEncoderLayer* layer_ = nullptr;  // the layer whose backward runs
  std::size_t index_ = 0;
  Tensor along_residual_;  // what reaches the layer's output, carried to its input along the residual path
};

}  // namespace multihead
