// SPDX-License-Identifier: Apache-2.0
// torch.nn.TransformerEncoder: a stack of encoder layers ("layers.{i}.") and
// an optional final LayerNorm ("norm."), with per-layer gradient
// checkpointing: a checkpointed layer frees its activations after forward
// and recomputes them in backward. The recomputation draws the same dropout
// masks (they are keyed by step and site), so gradients equal the plain run.
//
// In bf16 / fp16 the activations between layers are rounded to 16-bit values
// and each layer keeps only 16-bit copies of what its backward reads; a
// checkpointed layer's input is kept in 16 bits too.
#pragma once

#include <memory>
#include <vector>

#include "multihead/nn/backward_observer.h"
#include "multihead/nn/layer_stack.h"
#include "multihead/nn/transformer_layers.h"

namespace multihead {

class TransformerEncoder : public LayerStack<TransformerEncoderLayer> {
 public:
  using LayerStack::LayerStack;
  void set_checkpointing(bool on) { checkpoint_ = on; }

  // x: (B, L, d_model); x and the masks must outlive backward.
  Tensor forward(const Tensor& x, const AttentionMaskArgs& masks, const ForwardContext& ctx);
  Tensor backward(const Tensor& dy);
  // Incremental decoding: caches[i] belongs to layer i.
  Tensor forward_cached(const Tensor& x, std::vector<KvCache>& caches, std::int64_t capacity,
                        Precision p = Precision::kF32);
  // Each backward shows *observer its layers' gradients, and each layer's
  // self-attention its heads' (nn/backward_observer.h), until set to null;
  // the forward before it must be in fp32.
  void set_backward_observer(BackwardObserver* observer);

 private:
  void release_own() override;

  BackwardObserver* observer_ = nullptr;
  bool checkpoint_ = false;
  AttentionMaskArgs masks_;
  ForwardContext ctx_;
  bool forwarded_ = false;
  std::vector<SavedTensor> inputs_;  // checkpointing: inputs_[i], the input of layer i
  std::vector<Tensor> outputs_;      // fp32: outputs_[i], the output of layer i, read by layer i + 1's backward
};

// torch.nn.TransformerDecoder: decoder layers ("layers.{i}.") over a shared
// memory, and an optional final LayerNorm ("norm.").
class TransformerDecoder : public LayerStack<TransformerDecoderLayer> {
 public:
  using LayerStack::LayerStack;
  // x: (B, L, d_model), memory: (B, S, d_model); both, and the masks, must outlive backward.
  Tensor forward(const Tensor& x, const Tensor& memory, const AttentionMaskArgs& self_masks,
                 const AttentionMaskArgs& memory_masks, const ForwardContext& ctx);
  // Returns the gradients of x and of the memory (summed over the layers).
  TransformerDecoderLayer::Grads backward(const Tensor& dy);
  // Incremental decoding: cache_memory projects the memory into every
  // layer's cross-attention keys and values once (memory_caches[i] for layer
  // i); forward_cached then runs T new positions, self_caches[i] holding
  // layer i's keys and values of the positions before. The rows equal those
  // of forward() over the whole target with a causal mask.
  void cache_memory(const Tensor& memory, std::vector<KvCache>& memory_caches, Precision p = Precision::kF32) const;
  Tensor forward_cached(const Tensor& x, std::vector<KvCache>& self_caches, const std::vector<KvCache>& memory_caches,
                        const Tensor* memory_padding, std::int64_t capacity, Precision p = Precision::kF32);

 private:
  void release_own() override;

  std::vector<Tensor> outputs_;  // fp32: as in TransformerEncoder
  bool forwarded_ = false;
};

}  // namespace multihead
