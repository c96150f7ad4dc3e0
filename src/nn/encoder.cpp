#include "multihead/nn/encoder.h"

namespace multihead {

TransformerEncoder::TransformerEncoder(ParamStore& store, const std::string& prefix,
                                       const TransformerLayerConfig& cfg, std::int64_t num_layers, bool final_norm) {
  check<ConfigError>(num_layers > 0, "num_layers must be positive, got {}", num_layers);
  for (std::int64_t i = 0; i < num_layers; ++i)
    layers_.push_back(
        std::make_unique<TransformerEncoderLayer>(store, prefix + "layers." + std::to_string(i) + ".", cfg));
  if (final_norm) norm_ = std::make_unique<LayerNorm>(store, prefix + "norm.", cfg.d_model, cfg.layer_norm_eps);
}

void TransformerEncoder::init(Rng& rng) {
  for (auto& l : layers_) l->init(rng);
  if (norm_) norm_->init(rng);
}

void TransformerEncoder::clear_cache() {
  for (auto& l : layers_) l->clear_cache();
  if (norm_) norm_->clear_cache();
  outputs_.clear();
  input_ = nullptr;
}

Tensor TransformerEncoder::forward(const Tensor& x, const AttentionMaskArgs& masks, const ForwardContext& ctx) {
  masks_ = masks;
  ctx_ = ctx;
  input_ = &x;
  outputs_.clear();
  outputs_.reserve(layers_.size());  // no reallocation: layers hold pointers to these
  const Tensor* in = &x;
  for (auto& layer : layers_) {
    outputs_.push_back(layer->forward(*in, masks, ctx));
    if (checkpoint_) layer->clear_cache();
    in = &outputs_.back();
  }
  if (norm_) return norm_->forward(outputs_.back());
  return outputs_.back().clone();
}

Tensor TransformerEncoder::forward_cached(const Tensor& x, std::vector<KvCache>& caches, std::int64_t capacity) {
  caches.resize(layers_.size());
  Tensor h = layers_[0]->forward_cached(x, caches[0], capacity);
  for (std::size_t i = 1; i < layers_.size(); ++i) h = layers_[i]->forward_cached(h, caches[i], capacity);
  if (!norm_) return h;
  Tensor out = norm_->forward(h);
  norm_->clear_cache();
  return out;
}

Tensor TransformerEncoder::backward(const Tensor& dy) {
  check(input_ != nullptr, "TransformerEncoder::backward called without a preceding forward");
  Tensor g = norm_ ? norm_->backward(dy) : dy.clone();
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const Tensor& in = i == 0 ? *input_ : outputs_[i - 1];
    if (checkpoint_) layers_[i]->forward(in, masks_, ctx_);  // recompute the activations, same dropout masks
    g = layers_[i]->backward(g);
    if (checkpoint_) layers_[i]->clear_cache();
  }
  return g;
}

TransformerDecoder::TransformerDecoder(ParamStore& store, const std::string& prefix,
                                       const TransformerLayerConfig& cfg, std::int64_t num_layers, bool final_norm) {
  check<ConfigError>(num_layers > 0, "num_layers must be positive, got {}", num_layers);
  for (std::int64_t i = 0; i < num_layers; ++i)
    layers_.push_back(
        std::make_unique<TransformerDecoderLayer>(store, prefix + "layers." + std::to_string(i) + ".", cfg));
  if (final_norm) norm_ = std::make_unique<LayerNorm>(store, prefix + "norm.", cfg.d_model, cfg.layer_norm_eps);
}

void TransformerDecoder::init(Rng& rng) {
  for (auto& l : layers_) l->init(rng);
  if (norm_) norm_->init(rng);
}

void TransformerDecoder::clear_cache() {
  for (auto& l : layers_) l->clear_cache();
  if (norm_) norm_->clear_cache();
  outputs_.clear();
}

Tensor TransformerDecoder::forward(const Tensor& x, const Tensor& memory, const AttentionMaskArgs& self_masks,
                                   const AttentionMaskArgs& memory_masks, const ForwardContext& ctx) {
  outputs_.clear();
  outputs_.reserve(layers_.size());
  const Tensor* in = &x;
  for (auto& layer : layers_) {
    outputs_.push_back(layer->forward(*in, memory, self_masks, memory_masks, ctx));
    in = &outputs_.back();
  }
  if (norm_) return norm_->forward(outputs_.back());
  return outputs_.back().clone();
}

TransformerDecoderLayer::Grads TransformerDecoder::backward(const Tensor& dy) {
  check(!outputs_.empty(), "TransformerDecoder::backward called without a preceding forward");
  TransformerDecoderLayer::Grads total;
  total.x = norm_ ? norm_->backward(dy) : dy.clone();
  for (std::size_t i = layers_.size(); i-- > 0;) {
    TransformerDecoderLayer::Grads g = layers_[i]->backward(total.x);
    total.x = std::move(g.x);
    if (total.memory.defined()) add_inplace(total.memory, g.memory);
    else total.memory = std::move(g.memory);
  }
  return total;
}

}  // namespace multihead
