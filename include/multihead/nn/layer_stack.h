// SPDX-License-Identifier: Apache-2.0
// What the encoder and decoder stacks (nn/encoder.h) share: layers of one
// kind named "layers.{i}.", each declared after a gradient boundary (its
// parameters' gradients are final once its backward is done:
// ParamStore::grads_final_from), an optional final LayerNorm "norm.", and
// their initialisation and release. Each stack adds its own forward and
// backward over them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "multihead/core/error.h"
#include "multihead/nn/transformer_layers.h"

namespace multihead {

template <typename Layer>
class LayerStack : public Module {
 public:
  LayerStack(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg, std::int64_t num_layers,
             bool final_norm)
      : store_(&store) {
    check<ConfigError>(num_layers > 0, "num_layers must be positive, got {}", num_layers);
    for (std::int64_t i = 0; i < num_layers; ++i) {
      first_offset_.push_back(store.add_grads_boundary());
      layers_.push_back(std::make_unique<Layer>(store, prefix + "layers." + std::to_string(i) + ".", cfg));
    }
    if (final_norm) norm_ = std::make_unique<LayerNorm>(store, prefix + "norm.", cfg.d_model, cfg.layer_norm_eps);
  }

  void init(Rng& rng) override {
    for (auto& l : layers_) l->init(rng);
    if (norm_) norm_->init(rng);
  }
  // The layers' and the norm's saved activations, then the stack's own.
  void release_saved() override {
    for (auto& l : layers_) l->release_saved();
    if (norm_) norm_->release_saved();
    release_own();
  }

  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers_.size()); }
  Layer& layer(std::int64_t i) { return *layers_.at(static_cast<std::size_t>(i)); }
  void set_capture_weights(bool on) {
    for (auto& l : layers_) l->set_capture_weights(on);
  }

 protected:
  // What the stack itself keeps from forward for backward.
  virtual void release_own() = 0;

  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<LayerNorm> norm_;
  const ParamStore* store_;
  std::vector<std::int64_t> first_offset_;  // of each layer's parameters (ParamStore::grads_final_from)
};

}  // namespace multihead
