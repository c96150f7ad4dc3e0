// SPDX-License-Identifier: Apache-2.0
// torch.nn.TransformerEncoderLayer and TransformerDecoderLayer (batch-first),
// with their state_dict names: self_attn.*, multihead_attn.*, linear1.*,
// linear2.*, norm1.*, norm2.*, norm3.*.
//
//   post-LN (default, as in the original Transformer):
//     x = norm1(x + dropout1(SA(x)))            x = norm2(x + dropout2(FF(x)))
//   pre-LN (norm_first):
//     x = x + dropout1(SA(norm1(x)))            x = x + dropout2(FF(norm2(x)))
//   FF(x) = linear2(dropout(activation(linear1(x))))
// The decoder adds cross-attention to a memory between the two blocks.
#pragma once

#include <cstdint>
#include <string>

#include "multihead/kernels/activations.h"
#include "multihead/nn/basic_layers.h"
#include "multihead/nn/multi_head_attention.h"

namespace multihead {

// Constructor arguments, with PyTorch's names and defaults.
struct TransformerLayerConfig {
  std::int64_t d_model = 512;
  std::int64_t nhead = 8;
  std::int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::kRelu;
  double layer_norm_eps = 1e-5;
  bool norm_first = false;
  AttentionImpl attention_impl = AttentionImpl::kFused;
  // Positions inside self-attention (rope, alibi, relative); see multi_head_attention.h.
  AttentionPositions positions = AttentionPositions::kNone;
  double rope_theta = 10000.0;
  std::int64_t relative_clip = 16;
  bool relative_values = true;
  AttentionPattern pattern;  // of self-attention; see multi_head_attention.h

  // The bounds of the layer's sizes, the same wherever a config sets them
  // (these keys, and the model section's).
  static constexpr Range kWidth = between(1, kMaxWidth);
  static constexpr Range kFeedforward = between(1, kMaxFeedforward);
  static constexpr Range kHeads = between(1, kMaxWidth);  // and at most d_model: validate()'s
  static constexpr Range kDropout = between(0, 1);
  static constexpr Range kNormEps = positive();

  // The constructor's keys as PyTorch names them (apply's module JSON);
  // d_model and nhead have no default there. nhead's bound, [1, d_model],
  // follows d_model and is validate()'s.
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& c) {
    k.required("d_model", c.d_model, kWidth).doc("the layer's width");
    k.required("nhead", c.nhead, kHeads).doc("attention heads (d_model divisible by it)");
    k("dim_feedforward", c.dim_feedforward, kFeedforward).doc("the feed-forward block's hidden width");
    k("dropout", c.dropout, kDropout).doc("dropout on the attention weights and the sublayers' outputs");
    k.named("activation", c.activation, activation_name, parse_activation).doc("the feed-forward block's activation");
    k("layer_norm_eps", c.layer_norm_eps, kNormEps).doc("LayerNorm's epsilon");
    k("norm_first", c.norm_first).doc("LayerNorm before each sublayer (pre-LN) instead of after");
    AttentionPattern::keys(k, c.pattern);
  }

  MultiheadAttentionConfig attention() const;
  void validate() const;
};

// Masks of one attention call, nn.MultiheadAttention polarity (see multi_head_attention.h).
struct AttentionMaskArgs {
  const Tensor* key_padding_mask = nullptr;  // (B, S)
  const Tensor* attn_mask = nullptr;         // (L, S) or (B*H, L, S)
  CausalAlign causal = CausalAlign::kNone;
};

// linear2(dropout(activation(linear1(x)))), run by blocks of rows: the
// rows are independent, so the fp32 intermediates (and their gradients in
// backward) exist for one block at a time, and what is kept for backward is
// written in the storage precision as each block finishes.
class FeedForward {
 public:
  FeedForward(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg);
  void init(Rng& rng);
  void release_saved();
  Tensor forward(const Tensor& x, const ForwardContext& ctx);  // (..., d) -> (..., d); x as Linear::forward
  Tensor backward(const Tensor& dy);

 private:
  ParamStore* store_;
  Activation act_;
  Linear linear1_, linear2_;  // the parameters; the block calls the kernels itself
  Dropout dropout_;
  SavedTensor x_;  // (N, d)
  Tensor pre_;     // (N, F) linear1 output, before the activation, as stored; gelu only
  Tensor hid_;     // (N, F) after activation and dropout: linear2's input, as stored
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg);
  void init(Rng& rng) override;
  void release_saved() override;
  // x: (B, L, d_model); must outlive backward.
  Tensor forward(const Tensor& x, const AttentionMaskArgs& masks, const ForwardContext& ctx);
  Tensor backward(const Tensor& dy);
  const TransformerLayerConfig& config() const { return cfg_; }
  // Incremental decoding (eval mode, causal): the layer over T new positions,
  // attending to the cached ones too.
  Tensor forward_cached(const Tensor& x, KvCache& cache, std::int64_t capacity, Precision p = Precision::kF32);
  // Keep the per-head self-attention weights (B, H, L, L) of each forward,
  // for inspection; they come from the fused kernel's saved log-sum-exp.
  void set_capture_weights(bool on) { capture_ = on; }
  const Tensor& attention_weights() const { return weights_; }
  MultiheadAttention& self_attention() { return self_attn_; }

  // For backward observers (nn/backward_observer.h), fp32 only. Between
  // forward and backward: the gradient of the layer's input that dy (of its
  // output) sends along the residual path alone, through no sublayer (pre-LN:
  // dy itself; post-LN: back through norm2 and norm1).
  Tensor residual_gradient(const Tensor& dy) const;
  // The gradient of the layer's input that g, a gradient of self-attention's
  // input, becomes (pre-LN: back through norm1, whose statistics are saved
  // until the layer's backward passes it; post-LN: g itself). (..., d_model).
  Tensor attention_input_gradient(const Tensor& g) const;
  const MultiheadAttention& self_attention() const { return self_attn_; }

 private:
  void release_saved(const ForwardContext& ctx);

  TransformerLayerConfig cfg_;
  bool capture_ = false;
  Tensor weights_;
  MultiheadAttention self_attn_;
  FeedForward ff_;
  LayerNorm norm1_, norm2_;
  Dropout dropout1_, dropout2_;
  std::uint32_t attn_site_;
  // Saved activations (those the sub-modules read again in backward).
  Tensor n1_, h1_, y1_, n2_, h2_;
};

class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg);
  void init(Rng& rng) override;
  void release_saved() override;
  // x: (B, L, d_model) target, memory: (B, S, d_model); both must outlive backward.
  Tensor forward(const Tensor& x, const Tensor& memory, const AttentionMaskArgs& self_masks,
                 const AttentionMaskArgs& memory_masks, const ForwardContext& ctx);
  struct Grads {
    Tensor x, memory;
  };
  Grads backward(const Tensor& dy);
  // Incremental decoding (eval mode): the layer over T new target positions
  // (B, T, d_model), self-attending to the cached ones too, and attending to
  // the memory's keys and values projected once (cache_memory).
  // memory_padding: (B, S), true = padding, or null.
  void cache_memory(const Tensor& memory, KvCache& cache, Precision p = Precision::kF32) const {
    multihead_attn_.cache_memory(memory, cache, p);
  }
  Tensor forward_cached(const Tensor& x, KvCache& self_cache, const KvCache& memory, const Tensor* memory_padding,
                        std::int64_t capacity, Precision p = Precision::kF32);
  // Keep the per-head weights of each forward_cached, (B, H, T, positions
  // cached) for the self-attention, (B, H, T, S) for the cross-attention:
  // which earlier target positions and which memory positions the new ones read.
  void set_capture_weights(bool on) { capture_ = on; }
  const Tensor& self_attention_weights() const { return self_weights_; }
  const Tensor& cross_attention_weights() const { return weights_; }

 private:
  void release_saved(const ForwardContext& ctx);

  TransformerLayerConfig cfg_;
  bool capture_ = false;
  Tensor self_weights_, weights_;
  MultiheadAttention self_attn_, multihead_attn_;
  FeedForward ff_;
  LayerNorm norm1_, norm2_, norm3_;
  Dropout dropout1_, dropout2_, dropout3_;
  std::uint32_t self_site_, cross_site_;
  Tensor n1_, h1_, y1_, n2_, h2_, y2_, n3_, h3_;
};

}  // namespace multihead
