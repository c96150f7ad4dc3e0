// SPDX-License-Identifier: Apache-2.0
// What a backward pass shows a research tool, at the points such a tool
// needs: the modules call an observer there and keep nothing for it. One
// interface for every such hook, so that the layers carry no tool's state
// (the gradient probe, nn/gradient_probe.h, is one observer). Set on a
// TransformerEncoder, which hands it to its layers' self-attention. The
// tensors are fp32: a stack refuses an observer after a 16-bit forward.
#pragma once

#include <cstddef>

#include "multihead/core/tensor.h"

namespace multihead {

class TransformerEncoderLayer;
class MultiheadAttention;

class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;

  // A stack's backward begins: dy, the gradient of its top layer's output
  // (past the final norm), over `layers` layers.
  virtual void stack_begins(const Tensor& dy, std::size_t layers) {}
  // Layer l is about to take dy back to its input (its activations still
  // saved: TransformerEncoderLayer::residual_gradient can be asked now).
  virtual void before_layer(std::size_t l, const TransformerEncoderLayer& layer, const Tensor& dy) {}
  // Layer l has given dx, the gradient of its input.
  virtual void after_layer(std::size_t l, const TransformerEncoderLayer& layer, const Tensor& dx) {}

  // Whether head_shares should be computed (an extra product per head).
  virtual bool wants_head_shares() const { return false; }
  // Inside a self-attention's backward (a key/value head per query head):
  // each head's share of the input's gradient, (H, B, L, E), head h's the
  // gradient along its own query, key and value rows of the in-projection,
  // through its columns of out_proj and its own attention. They sum to the
  // input's gradient. Within the enclosing layer's backward, before the
  // norm in front of the attention takes its gradient back.
  virtual void head_shares(const MultiheadAttention& attention, const Tensor& shares) {}
};

}  // namespace multihead
