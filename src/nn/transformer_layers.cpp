#include "multihead/nn/transformer_layers.h"

namespace multihead {

MultiheadAttentionConfig TransformerLayerConfig::attention() const {
  MultiheadAttentionConfig c;
  c.embed_dim = d_model;
  c.num_heads = nhead;
  c.dropout = dropout;
  c.positions = positions;
  c.rope_theta = rope_theta;
  c.relative_clip = relative_clip;
  c.relative_values = relative_values;
  static_cast<AttentionPattern&>(c) = pattern;
  return c;
}

void TransformerLayerConfig::validate() const {
  check<ConfigError>(d_model > 0, "d_model must be positive, got {}", d_model);
  check<ConfigError>(nhead > 0, "nhead must be positive, got {}", nhead);
  check<ConfigError>(d_model % nhead == 0, "d_model ({}) must be divisible by nhead ({})", d_model, nhead);
  check<ConfigError>(dim_feedforward > 0, "dim_feedforward must be positive, got {}", dim_feedforward);
  check<ConfigError>(dropout >= 0.0 && dropout <= 1.0, "dropout must be in [0, 1], got {}", dropout);
  check<ConfigError>(layer_norm_eps > 0.0, "layer_norm_eps must be positive, got {}", layer_norm_eps);
}

namespace {

MultiheadAttentionCall attention_call(const TransformerLayerConfig& cfg, const AttentionMaskArgs& m,
                                      const ForwardContext& ctx, std::uint32_t site) {
  MultiheadAttentionCall c;
  c.need_weights = false;
  c.causal = m.causal;
  c.training = ctx.training;
  c.dropout_seed = ctx.seed;
  c.dropout_stream = ctx.stream(site);
  c.impl = cfg.attention_impl;
  return c;
}

const TransformerLayerConfig& validated(const TransformerLayerConfig& cfg) {
  cfg.validate();
  return cfg;
}

}  // namespace

FeedForward::FeedForward(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg)
    : act_(cfg.activation),
      linear1_(store, prefix + "linear1.", cfg.d_model, cfg.dim_feedforward),
      linear2_(store, prefix + "linear2.", cfg.dim_feedforward, cfg.d_model),
      dropout_(store, cfg.dropout) {}

void FeedForward::init(Rng& rng) {
  linear1_.init(rng);
  linear2_.init(rng);
}

void FeedForward::clear_cache() {
  linear1_.clear_cache();
  linear2_.clear_cache();
  pre_ = Tensor();
  hid_ = Tensor();
}

Tensor FeedForward::forward(const Tensor& x, const ForwardContext& ctx) {
  pre_ = linear1_.forward(x);
  hid_ = Tensor::empty(pre_.shape());
  activation_forward(act_, hid_.f32(), pre_.f32(), pre_.numel());
  dropout_.forward_inplace(hid_, ctx);
  return linear2_.forward(hid_);
}

Tensor FeedForward::backward(const Tensor& dy) {
  Tensor dh = linear2_.backward(dy);
  dropout_.backward_inplace(dh);
  activation_backward(act_, dh.f32(), dh.f32(), pre_.f32(), dh.numel());
  return linear1_.backward(dh);
}

TransformerEncoderLayer::TransformerEncoderLayer(ParamStore& store, const std::string& prefix,
                                                 const TransformerLayerConfig& cfg)
    : cfg_(validated(cfg)),
      self_attn_(store, prefix + "self_attn.", cfg.attention()),
      ff_(store, prefix, cfg),
      norm1_(store, prefix + "norm1.", cfg.d_model, cfg.layer_norm_eps),
      norm2_(store, prefix + "norm2.", cfg.d_model, cfg.layer_norm_eps),
      dropout1_(store, cfg.dropout),
      dropout2_(store, cfg.dropout),
      attn_site_(store.new_random_site()) {}

void TransformerEncoderLayer::init(Rng& rng) {
  self_attn_.init(rng);
  ff_.init(rng);
  norm1_.init(rng);
  norm2_.init(rng);
}

void TransformerEncoderLayer::clear_cache() {
  self_attn_.clear_cache();
  ff_.clear_cache();
  norm1_.clear_cache();
  norm2_.clear_cache();
  n1_ = Tensor(), h1_ = Tensor(), y1_ = Tensor(), n2_ = Tensor(), h2_ = Tensor();
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const AttentionMaskArgs& m, const ForwardContext& ctx) {
  MultiheadAttentionCall call = attention_call(cfg_, m, ctx, attn_site_);
  call.need_weights = capture_;
  call.average_attn_weights = false;
  auto attend = [&](const Tensor& in) {
    MultiheadAttentionOutput o = self_attn_.forward_self(in, m.key_padding_mask, m.attn_mask, call);
    if (capture_) weights_ = std::move(o.weights);
    return std::move(o.output);
  };
  if (!cfg_.norm_first) {
    Tensor sa = attend(x);
    dropout1_.forward_inplace(sa, ctx);
    add_inplace(sa, x);
    h1_ = std::move(sa);
    y1_ = norm1_.forward(h1_);
    Tensor ff = ff_.forward(y1_, ctx);
    dropout2_.forward_inplace(ff, ctx);
    add_inplace(ff, y1_);
    h2_ = std::move(ff);
    return norm2_.forward(h2_);
  }
  n1_ = norm1_.forward(x);
  Tensor sa = attend(n1_);
  dropout1_.forward_inplace(sa, ctx);
  add_inplace(sa, x);
  h1_ = std::move(sa);
  n2_ = norm2_.forward(h1_);
  Tensor out = ff_.forward(n2_, ctx);
  dropout2_.forward_inplace(out, ctx);
  add_inplace(out, h1_);
  return out;
}

Tensor TransformerEncoderLayer::forward_cached(const Tensor& x, KvCache& cache, std::int64_t capacity) {
  const ForwardContext eval;
  if (!cfg_.norm_first) {
    Tensor h1 = self_attn_.forward_cached(x, cache, capacity);
    add_inplace(h1, x);
    Tensor y1 = norm1_.forward(h1);
    Tensor h2 = ff_.forward(y1, eval);
    add_inplace(h2, y1);
    Tensor out = norm2_.forward(h2);
    clear_cache();
    return out;
  }
  Tensor n1 = norm1_.forward(x);
  Tensor h1 = self_attn_.forward_cached(n1, cache, capacity);
  add_inplace(h1, x);
  Tensor n2 = norm2_.forward(h1);
  Tensor out = ff_.forward(n2, eval);
  add_inplace(out, h1);
  clear_cache();
  return out;
}

Tensor TransformerEncoderLayer::backward(const Tensor& dy) {
  Tensor scratch;
  if (!cfg_.norm_first) {
    Tensor dh2 = norm2_.backward(dy);
    Tensor dy1 = ff_.backward(dropout2_.backward(dh2, scratch));
    add_inplace(dy1, dh2);
    Tensor dh1 = norm1_.backward(dy1);
    Tensor dx = self_attn_.backward(dropout1_.backward(dh1, scratch)).query;
    add_inplace(dx, dh1);
    return dx;
  }
  Tensor dh1 = norm2_.backward(ff_.backward(dropout2_.backward(dy, scratch)));
  add_inplace(dh1, dy);
  Tensor dx = norm1_.backward(self_attn_.backward(dropout1_.backward(dh1, scratch)).query);
  add_inplace(dx, dh1);
  return dx;
}

TransformerDecoderLayer::TransformerDecoderLayer(ParamStore& store, const std::string& prefix,
                                                 const TransformerLayerConfig& cfg)
    : cfg_(validated(cfg)),
      self_attn_(store, prefix + "self_attn.", cfg.attention()),
      multihead_attn_(store, prefix + "multihead_attn.", [&] {
        MultiheadAttentionConfig c = cfg.attention();
        c.positions = AttentionPositions::kNone;  // positions order self-attention, not the memory
        c.variant = AttentionVariant::kFull;      // and so do the sparse patterns
        return c;
      }()),
      ff_(store, prefix, cfg),
      norm1_(store, prefix + "norm1.", cfg.d_model, cfg.layer_norm_eps),
      norm2_(store, prefix + "norm2.", cfg.d_model, cfg.layer_norm_eps),
      norm3_(store, prefix + "norm3.", cfg.d_model, cfg.layer_norm_eps),
      dropout1_(store, cfg.dropout),
      dropout2_(store, cfg.dropout),
      dropout3_(store, cfg.dropout),
      self_site_(store.new_random_site()),
      cross_site_(store.new_random_site()) {}

void TransformerDecoderLayer::init(Rng& rng) {
  self_attn_.init(rng);
  multihead_attn_.init(rng);
  ff_.init(rng);
  norm1_.init(rng);
  norm2_.init(rng);
  norm3_.init(rng);
}

void TransformerDecoderLayer::clear_cache() {
  self_attn_.clear_cache();
  multihead_attn_.clear_cache();
  ff_.clear_cache();
  norm1_.clear_cache();
  norm2_.clear_cache();
  norm3_.clear_cache();
  n1_ = Tensor(), h1_ = Tensor(), y1_ = Tensor(), n2_ = Tensor(), h2_ = Tensor(), y2_ = Tensor(), n3_ = Tensor(),
  h3_ = Tensor();
}

Tensor TransformerDecoderLayer::forward(const Tensor& x, const Tensor& memory, const AttentionMaskArgs& sm,
                                        const AttentionMaskArgs& mm, const ForwardContext& ctx) {
  const MultiheadAttentionCall self_call = attention_call(cfg_, sm, ctx, self_site_);
  const MultiheadAttentionCall cross_call = attention_call(cfg_, mm, ctx, cross_site_);
  if (!cfg_.norm_first) {
    Tensor sa = self_attn_.forward_self(x, sm.key_padding_mask, sm.attn_mask, self_call).output;
    dropout1_.forward_inplace(sa, ctx);
    add_inplace(sa, x);
    h1_ = std::move(sa);
    y1_ = norm1_.forward(h1_);
    Tensor ca = multihead_attn_.forward(y1_, memory, memory, mm.key_padding_mask, mm.attn_mask, cross_call).output;
    dropout2_.forward_inplace(ca, ctx);
    add_inplace(ca, y1_);
    h2_ = std::move(ca);
    y2_ = norm2_.forward(h2_);
    Tensor ff = ff_.forward(y2_, ctx);
    dropout3_.forward_inplace(ff, ctx);
    add_inplace(ff, y2_);
    h3_ = std::move(ff);
    return norm3_.forward(h3_);
  }
  n1_ = norm1_.forward(x);
  Tensor sa = self_attn_.forward_self(n1_, sm.key_padding_mask, sm.attn_mask, self_call).output;
  dropout1_.forward_inplace(sa, ctx);
  add_inplace(sa, x);
  h1_ = std::move(sa);
  n2_ = norm2_.forward(h1_);
  Tensor ca = multihead_attn_.forward(n2_, memory, memory, mm.key_padding_mask, mm.attn_mask, cross_call).output;
  dropout2_.forward_inplace(ca, ctx);
  add_inplace(ca, h1_);
  h2_ = std::move(ca);
  n3_ = norm3_.forward(h2_);
  Tensor out = ff_.forward(n3_, ctx);
  dropout3_.forward_inplace(out, ctx);
  add_inplace(out, h2_);
  return out;
}

TransformerDecoderLayer::Grads TransformerDecoderLayer::backward(const Tensor& dy) {
  Tensor scratch;
  Grads g;
  // The memory feeds both key and value of the cross-attention.
  auto cross_backward = [&](const Tensor& d_out) {
    MultiheadAttentionGrads c = multihead_attn_.backward(dropout2_.backward(d_out, scratch));
    g.memory = std::move(c.key);
    add_inplace(g.memory, c.value);
    return std::move(c.query);
  };
  if (!cfg_.norm_first) {
    Tensor dh3 = norm3_.backward(dy);
    Tensor dy2 = ff_.backward(dropout3_.backward(dh3, scratch));
    add_inplace(dy2, dh3);
    Tensor dh2 = norm2_.backward(dy2);
    Tensor dy1 = cross_backward(dh2);
    add_inplace(dy1, dh2);
    Tensor dh1 = norm1_.backward(dy1);
    g.x = self_attn_.backward(dropout1_.backward(dh1, scratch)).query;
    add_inplace(g.x, dh1);
    return g;
  }
  Tensor dh2 = norm3_.backward(ff_.backward(dropout3_.backward(dy, scratch)));
  add_inplace(dh2, dy);
  Tensor dh1 = norm2_.backward(cross_backward(dh2));
  add_inplace(dh1, dh2);
  g.x = norm1_.backward(self_attn_.backward(dropout1_.backward(dh1, scratch)).query);
  add_inplace(g.x, dh1);
  return g;
}

}  // namespace multihead
