// torch.nn.TransformerEncoder: a stack of encoder layers ("layers.{i}.") and
// an optional final LayerNorm ("norm."), with per-layer gradient
// checkpointing: a checkpointed layer frees its activations after forward
// and recomputes them in backward. The recomputation draws the same dropout
// masks (they are keyed by step and site), so gradients equal the plain run.
#pragma once

#include <memory>
#include <vector>

#include "multihead/nn/transformer_layers.h"

namespace multihead {

class TransformerEncoder : public Module {
 public:
  TransformerEncoder(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg,
                     std::int64_t num_layers, bool final_norm);
  void init(Rng& rng) override;
  void clear_cache() override;
  void set_checkpointing(bool on) { checkpoint_ = on; }

  // x: (B, L, d_model); x and the masks must outlive backward.
  Tensor forward(const Tensor& x, const AttentionMaskArgs& masks, const ForwardContext& ctx);
  Tensor backward(const Tensor& dy);
  // Incremental decoding: caches[i] belongs to layer i.
  Tensor forward_cached(const Tensor& x, std::vector<KvCache>& caches, std::int64_t capacity);
  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers_.size()); }
  TransformerEncoderLayer& layer(std::int64_t i) { return *layers_.at(static_cast<std::size_t>(i)); }
  void set_capture_weights(bool on) {
    for (auto& l : layers_) l->set_capture_weights(on);
  }

 private:
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers_;
  std::unique_ptr<LayerNorm> norm_;
  bool checkpoint_ = false;
  AttentionMaskArgs masks_;
  ForwardContext ctx_;
  const Tensor* input_ = nullptr;
  std::vector<Tensor> outputs_;  // outputs_[i]: output of layer i
};

// torch.nn.TransformerDecoder: decoder layers ("layers.{i}.") over a shared
// memory, and an optional final LayerNorm ("norm.").
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg,
                     std::int64_t num_layers, bool final_norm);
  void init(Rng& rng) override;
  void clear_cache() override;
  // x: (B, L, d_model), memory: (B, S, d_model); both, and the masks, must outlive backward.
  Tensor forward(const Tensor& x, const Tensor& memory, const AttentionMaskArgs& self_masks,
                 const AttentionMaskArgs& memory_masks, const ForwardContext& ctx);
  // Returns the gradients of x and of the memory (summed over the layers).
  TransformerDecoderLayer::Grads backward(const Tensor& dy);

 private:
  std::vector<std::unique_ptr<TransformerDecoderLayer>> layers_;
  std::unique_ptr<LayerNorm> norm_;
  std::vector<Tensor> outputs_;
};

}  // namespace multihead
