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

#include "multihead/nn/gradient_probe.h"
#include "multihead/nn/transformer_layers.h"

namespace multihead {

class TransformerEncoder : public Module {
 public:
  TransformerEncoder(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg,
                     std::int64_t num_layers, bool final_norm);
  void init(Rng& rng) override;
  void release_saved() override;
  void set_checkpointing(bool on) { checkpoint_ = on; }

  // x: (B, L, d_model); x and the masks must outlive backward.
  Tensor forward(const Tensor& x, const AttentionMaskArgs& masks, const ForwardContext& ctx);
  Tensor backward(const Tensor& dy);
  // Incremental decoding: caches[i] belongs to layer i.
  Tensor forward_cached(const Tensor& x, std::vector<KvCache>& caches, std::int64_t capacity,
                        Precision p = Precision::kF32);
  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers_.size()); }
  TransformerEncoderLayer& layer(std::int64_t i) { return *layers_.at(static_cast<std::size_t>(i)); }
  void set_capture_weights(bool on) {
    for (auto& l : layers_) l->set_capture_weights(on);
  }
  // Each backward fills *probe (nn/gradient_probe.h) until set to null; the
  // forward before it must be in fp32.
  void set_gradient_probe(GradientProbe* probe);

 private:
  GradientProbe* probe_ = nullptr;
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers_;
  std::unique_ptr<LayerNorm> norm_;
  const ParamStore* store_;
  std::vector<std::int64_t> first_offset_;  // of each layer's parameters (ParamStore::grads_final_from)
  bool checkpoint_ = false;
  AttentionMaskArgs masks_;
  ForwardContext ctx_;
  bool forwarded_ = false;
  std::vector<SavedTensor> inputs_;  // checkpointing: inputs_[i], the input of layer i
  std::vector<Tensor> outputs_;      // fp32: outputs_[i], the output of layer i, read by layer i + 1's backward
};

// torch.nn.TransformerDecoder: decoder layers ("layers.{i}.") over a shared
// memory, and an optional final LayerNorm ("norm.").
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg,
                     std::int64_t num_layers, bool final_norm);
  void init(Rng& rng) override;
  void release_saved() override;
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
  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers_.size()); }
  TransformerDecoderLayer& layer(std::int64_t i) { return *layers_.at(static_cast<std::size_t>(i)); }
  void set_capture_weights(bool on) {
    for (auto& l : layers_) l->set_capture_weights(on);
  }

 private:
  std::vector<std::unique_ptr<TransformerDecoderLayer>> layers_;
  std::unique_ptr<LayerNorm> norm_;
  const ParamStore* store_;
  std::vector<std::int64_t> first_offset_;
  std::vector<Tensor> outputs_;  // fp32: as in TransformerEncoder
  bool forwarded_ = false;
};

}  // namespace multihead
