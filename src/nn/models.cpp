// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/suggest.h"
#include "multihead/nn/models.h"

#include <cmath>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include "multihead/kernels/activations.h"
#include "multihead/kernels/linear.h"
#include "multihead/nn/basic_layers.h"
#include "multihead/nn/init.h"

namespace multihead {

namespace {
constexpr std::pair<std::string_view, PositionKind> kPositionNames[] = {
    {"none", PositionKind::kNone},       {"sinusoidal", PositionKind::kSinusoidal},
    {"learned", PositionKind::kLearned}, {"relative", PositionKind::kRelative},
    {"rope", PositionKind::kRope},       {"alibi", PositionKind::kAlibi}};
}  // namespace

PositionKind parse_position_kind(std::string_view name) {
  for (const auto& [n, k] : kPositionNames)
    if (n == name) return k;
  throw ConfigError(fmt::format("positions must be none, sinusoidal, learned, relative, rope or alibi, got \"{}\"{}",
                                name,
                                did_you_mean(name, {"none", "sinusoidal", "learned", "relative", "rope", "alibi"})));
}

std::string_view position_kind_name(PositionKind kind) {
  for (const auto& [n, k] : kPositionNames)
    if (k == kind) return n;
  return "?";
}

Pooling parse_pooling(std::string_view name) {
  if (name == "mean") return Pooling::kMean;
  if (name == "cls") return Pooling::kCls;
  throw ConfigError(
      fmt::format("pooling must be mean or cls, got \"{}\"{}", name, did_you_mean(name, {"mean", "cls"})));
}

std::string_view pooling_name(Pooling p) { return p == Pooling::kCls ? "cls" : "mean"; }

AttentionPositions attention_positions(PositionKind kind) {
  return kind == PositionKind::kRelative ? AttentionPositions::kRelative
         : kind == PositionKind::kRope   ? AttentionPositions::kRope
         : kind == PositionKind::kAlibi  ? AttentionPositions::kAlibi
                                         : AttentionPositions::kNone;
}

TransformerLayerConfig ModelConfig::layer_config() const {
  TransformerLayerConfig c = layer;
  c.positions = attention_positions(positions);
  c.relative_clip = relative_clip;
  c.relative_values = relative_values;
  c.rope_theta = rope_theta;
  return c;
}

std::string ModelConfig::describe(std::int64_t parameters) const {
  return fmt::format("{} layers, d_model {}, {} heads, {} positions, {} parameters", num_layers, layer.d_model,
                     layer.nhead, position_kind_name(positions), parameters);
}

void ModelConfig::validate() const {
  layer.validate();
  layer_config().attention().validate();
  check_keys(*this);
  check<ConfigError>(init == "pytorch" || init == "xavier", "init must be pytorch or xavier, got \"{}\"{}", init,
                     did_you_mean(init, {"pytorch", "xavier"}));
  check<ConfigError>(head == "linear" || head == "tanh" || head == "relu" || head == "gelu" || head == "gelu_tanh",
                     "head must be linear, tanh, relu, gelu or gelu_tanh, got \"{}\"{}", head,
                     did_you_mean(head, {"linear", "tanh", "relu", "gelu", "gelu_tanh"}));
}

AbsolutePositions::AbsolutePositions(ParamStore& store, const std::string& prefix, PositionKind kind,
                                     std::int64_t max_len, std::int64_t d_model)
    : kind_(kind), max_len_(max_len), d_(d_model), store_(&store) {
  if (kind == PositionKind::kLearned) learned_ = std::make_unique<Embedding>(store, prefix, max_len, d_model);
  if (kind == PositionKind::kSinusoidal) extend(max_len);
}

void AbsolutePositions::init(Rng& rng) {
  if (learned_) learned_->init(rng);
}

// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
void AbsolutePositions::extend(std::int64_t max_len) {
  check<ConfigError>(kind_ == PositionKind::kSinusoidal, "only a sinusoidal position table can be extended");
  max_len_ = max_len;
  table_ = Tensor::empty({max_len, d_});
  float* t = table_.f32();
  for (std::int64_t pos = 0; pos < max_len; ++pos)
    for (std::int64_t i = 0; i < d_; i += 2) {
      const double angle = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(i) / d_);
      t[pos * d_ + i] = static_cast<float>(std::sin(angle));
      if (i + 1 < d_) t[pos * d_ + i + 1] = static_cast<float>(std::cos(angle));
    }
}

void AbsolutePositions::forward_inplace(Tensor& x, std::int64_t offset) const {
  if (kind_ != PositionKind::kSinusoidal && kind_ != PositionKind::kLearned) return;
  const std::int64_t B = x.dim(0), L = x.dim(1);
  check<ShapeError>(offset + L <= max_len_, "sequence length {} exceeds the positional table (max_len {})", offset + L,
                    max_len_);
  const float* t = (kind_ == PositionKind::kSinusoidal ? table_.f32() : store_->data(learned_->weight())) + offset * d_;
  float* px = x.f32();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < L * d_; ++i) px[b * L * d_ + i] += t[i];
}

void AbsolutePositions::backward(const Tensor& dy) { backward_offset(dy, 0); }

void AbsolutePositions::backward_offset(const Tensor& dy, std::int64_t offset) {
  if (kind_ != PositionKind::kLearned) return;
  const std::int64_t B = dy.dim(0), L = dy.dim(1);
  float* g = store_->grad(learned_->weight()) + offset * d_;
  const float* pd = dy.f32();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < L * d_; ++i) g[i] += pd[b * L * d_ + i];
}

namespace {

const ModelConfig& validated(const ModelConfig& cfg) {
  cfg.validate();
  return cfg;
}

}  // namespace

InputEmbedding::InputEmbedding(ParamStore& store, const ModelConfig& cfg)
    : store_(&store),
      offset_(cfg.position_offset),
      embedding_(store, "embedding.", cfg.vocab_size, cfg.layer.d_model),
      positions_(store, "pos_embedding.", cfg.positions, cfg.max_len, cfg.layer.d_model) {
  if (cfg.token_types > 0)
    token_types_ = std::make_unique<Embedding>(store, "token_type_embedding.", cfg.token_types, cfg.layer.d_model);
  if (cfg.embedding_norm) {
    norm_ = std::make_unique<LayerNorm>(store, "embedding_norm.", cfg.layer.d_model, cfg.layer.layer_norm_eps);
    // Only here: a dropout site of its own would renumber the encoder's, and with them every other model's masks.
    dropout_ = std::make_unique<Dropout>(store, cfg.layer.dropout);
  }
}

void InputEmbedding::init(Rng& rng) {
  embedding_.init(rng);
  positions_.init(rng);
  if (token_types_) token_types_->init(rng);
  if (norm_) norm_->init(rng);
}

void InputEmbedding::release_saved() {
  embedding_.release_saved();
  if (norm_) norm_->release_saved();
  summed_ = Tensor();
}

Tensor InputEmbedding::forward(const Tensor& ids, const ForwardContext& ctx) {
  Tensor x = embedding_.forward(ids);
  positions_.forward_inplace(x, offset_);
  if (token_types_) {
    const std::int64_t d = x.dim(2);
    const float* row = store_->data(token_types_->weight());  // type 0
    float* px = x.f32();
    for (std::int64_t i = 0; i < x.numel(); i += d)
      for (std::int64_t e = 0; e < d; ++e) px[i + e] += row[e];
  }
  if (!norm_) return x;
  summed_ = std::move(x);  // the norm's input, which its backward reads
  Tensor y = norm_->forward(summed_);
  dropout_->forward_inplace(y, ctx);
  return y;
}

void InputEmbedding::backward(Tensor dy) {
  if (norm_) {
    dropout_->backward_inplace(dy);
    dy = norm_->backward(dy);
  }
  if (token_types_) {
    const std::int64_t d = dy.dim(2);
    float* g = store_->grad(token_types_->weight());
    const float* pd = dy.f32();
    for (std::int64_t i = 0; i < dy.numel(); i += d)
      for (std::int64_t e = 0; e < d; ++e) g[e] += pd[i + e];
  }
  positions_.backward_offset(dy, offset_);
  embedding_.backward(dy);
}

SequenceClassifier::SequenceClassifier(ParamStore& store, const ModelConfig& cfg)
    : cfg_(validated(cfg)),
      store_(&store),
      input_(store, cfg),
      encoder_(store, "encoder.", cfg.layer_config(), cfg.num_layers, cfg.final_norm),
      pre_classifier_(cfg.head == "linear"
                          ? nullptr
                          : std::make_unique<Linear>(store, "pre_classifier.", cfg.layer.d_model, cfg.layer.d_model)),
      classifier_(store, "classifier.", cfg.layer.d_model, cfg.num_classes) {}

void SequenceClassifier::init(Rng& rng) {
  input_.init(rng);
  encoder_.init(rng);
  if (pre_classifier_) pre_classifier_->init(rng);
  classifier_.init(rng);
  if (cfg_.init == "xavier") xavier_uniform_all(*store_, rng);
}

void SequenceClassifier::release_saved() {
  input_.release_saved();
  encoder_.release_saved();
  if (pre_classifier_) pre_classifier_->release_saved();
  classifier_.release_saved();
  x_ = Tensor(), h_ = Tensor(), pooled_ = Tensor(), head_ = Tensor(), head_pre_ = Tensor();
}

Tensor SequenceClassifier::forward(const Tensor& ids, const Tensor* padding, const ForwardContext& ctx) {
  check<ShapeError>(ids.ndim() == 2, "token ids have shape {}, expected (B, L)", shape_text(ids.shape()));
  const std::int64_t B = ids.dim(0), L = ids.dim(1), d = cfg_.layer.d_model;
  if (padding) {
    expect_shape(*padding, {B, L}, "padding mask");
    check<ShapeError>(padding->dtype() == DType::kBool, "padding mask must be BOOL");
  }
  padding_ = padding;
  x_ = input_.forward(ids, ctx);
  AttentionMaskArgs masks;
  masks.key_padding_mask = padding;
  h_ = encoder_.forward(x_, masks, ctx);
  if (ctx.precision != Precision::kF32) x_ = Tensor();  // the first layer keeps its own 16-bit copy
  // Pooling: mean over the tokens that are not padding, or token 0.
  pooled_ = Tensor({B, d});
  counts_.assign(static_cast<std::size_t>(B), 0.0f);
  const std::uint8_t* pad = padding ? padding->data<std::uint8_t>() : nullptr;
  for (std::int64_t b = 0; b < B; ++b) {
    float* p = pooled_.f32() + b * d;
    if (cfg_.pooling == Pooling::kCls) {
      std::memcpy(p, h_.f32() + b * L * d, sizeof(float) * static_cast<std::size_t>(d));
      continue;
    }
    float& n = counts_[static_cast<std::size_t>(b)];
    for (std::int64_t l = 0; l < L; ++l) {
      if (pad && pad[b * L + l]) continue;
      const float* hl = h_.f32() + (b * L + l) * d;
      for (std::int64_t e = 0; e < d; ++e) p[e] += hl[e];
      n += 1.0f;
    }
    if (n > 0)
      for (std::int64_t e = 0; e < d; ++e) p[e] /= n;
  }
  if (!pre_classifier_) return classifier_.forward(pooled_);
  head_pre_ = pre_classifier_->forward(pooled_);
  head_ = Tensor(head_pre_.shape());
  if (cfg_.head == "tanh") {
    for (std::int64_t i = 0; i < head_.numel(); ++i) head_.f32()[i] = std::tanh(head_pre_.f32()[i]);
  } else {
    activation_forward(parse_activation(cfg_.head), head_.f32(), head_pre_.f32(), head_.numel());
  }
  return classifier_.forward(head_);
}

void SequenceClassifier::backward(const Tensor& dlogits) {
  const std::int64_t B = h_.dim(0), L = h_.dim(1), d = cfg_.layer.d_model;
  Tensor dpooled = classifier_.backward(dlogits);
  if (pre_classifier_) {
    // Through the activation: tanh' = 1 - y^2 from its output, the others' from their input.
    float* g = dpooled.f32();
    if (cfg_.head == "tanh") {
      const float* y = head_.f32();
      for (std::int64_t i = 0; i < dpooled.numel(); ++i) g[i] *= 1.0f - y[i] * y[i];
    } else {
      activation_backward(parse_activation(cfg_.head), g, g, head_pre_.f32(), dpooled.numel());
    }
    dpooled = pre_classifier_->backward(dpooled);
  }
  Tensor dh({B, L, d});
  const std::uint8_t* pad = padding_ ? padding_->data<std::uint8_t>() : nullptr;
  for (std::int64_t b = 0; b < B; ++b) {
    const float* dp = dpooled.f32() + b * d;
    if (cfg_.pooling == Pooling::kCls) {
      std::memcpy(dh.f32() + b * L * d, dp, sizeof(float) * static_cast<std::size_t>(d));
      continue;
    }
    const float n = counts_[static_cast<std::size_t>(b)];
    if (n == 0) continue;
    for (std::int64_t l = 0; l < L; ++l) {
      if (pad && pad[b * L + l]) continue;
      float* g = dh.f32() + (b * L + l) * d;
      for (std::int64_t e = 0; e < d; ++e) g[e] = dp[e] / n;
    }
  }
  input_.backward(encoder_.backward(dh));
}

namespace {

// The parts only a classifier has, refused rather than ignored elsewhere.
const ModelConfig& without_classifier_parts(const ModelConfig& cfg) {
  check<ConfigError>(cfg.head == "linear" && !cfg.embedding_norm && cfg.token_types == 0 && cfg.position_offset == 0,
                     "head, embedding_norm, token_types and position_offset are a text classifier's; this model "
                     "is a language model");
  return validated(cfg);
}

}  // namespace

LanguageModel::LanguageModel(ParamStore& store, const ModelConfig& cfg)
    : cfg_(without_classifier_parts(cfg)),
      store_(&store),
      embedding_(store, "embedding.", cfg.vocab_size, cfg.layer.d_model),
      positions_(store, "pos_embedding.", cfg.positions, cfg.max_len, cfg.layer.d_model),
      encoder_(store, "encoder.", cfg.layer_config(), cfg.num_layers, cfg.final_norm) {
  if (!cfg.tie_embeddings)
    lm_head_ = std::make_unique<Linear>(store, "lm_head.", cfg.layer.d_model, cfg.vocab_size, false);
}

void LanguageModel::init(Rng& rng) {
  embedding_.init(rng);
  if (cfg_.tie_embeddings) {
    // The embedding doubles as the output layer: N(0, 1) rows would give
    // logits of size sqrt(d_model) and a first loss in the hundreds, so the
    // rows start at N(0, 1/d_model), unit-norm on average.
    const float s = 1.0f / std::sqrt(static_cast<float>(cfg_.layer.d_model));
    for (float& v : store_->data_span(embedding_.weight())) v *= s;
  }
  positions_.init(rng);
  encoder_.init(rng);
  if (lm_head_) lm_head_->init(rng);
  if (cfg_.init == "xavier") xavier_uniform_all(*store_, rng);
}

void LanguageModel::release_saved() {
  embedding_.release_saved();
  encoder_.release_saved();
  if (lm_head_) lm_head_->release_saved();
  x_ = Tensor(), h_ = Tensor();
  h_saved_.clear();
}

Tensor LanguageModel::forward(const Tensor& ids, const ForwardContext& ctx) {
  check<ShapeError>(ids.ndim() == 2, "token ids have shape {}, expected (B, L)", shape_text(ids.shape()));
  x_ = embedding_.forward(ids);
  positions_.forward_inplace(x_);
  AttentionMaskArgs masks;
  masks.causal = CausalAlign::kTopLeft;
  h_ = encoder_.forward(x_, masks, ctx);
  Tensor logits = logits_of(h_, ctx.precision, h_saved_);
  // In 16 bits the first layer and the output layer keep their own copies.
  if (ctx.precision != Precision::kF32) x_ = Tensor(), h_ = Tensor();
  return logits;
}

Tensor LanguageModel::logits_of(const Tensor& h, Precision p, SavedTensor& saved) {
  if (lm_head_) return lm_head_->forward(h, p);
  const std::int64_t d = cfg_.layer.d_model, N = h.numel() / d;
  Tensor logits = Tensor::empty(Shape{h.dim(0), h.dim(1), cfg_.vocab_size});
  saved.save(h, storage_dtype(p));
  visit_float_storage(saved.stored().dtype(), [&](auto tag) {
    using T = decltype(tag);
    linear_forward_param<T>(logits.f32(), cfg_.vocab_size, saved.stored().template data<T>(), d, *store_,
                            embedding_.weight(), 0, nullptr, N, d, cfg_.vocab_size);
  });
  return logits;
}

Tensor LanguageModel::forward_cached(const Tensor& ids, std::vector<KvCache>& caches, std::int64_t capacity,
                                     Precision p) {
  check<ShapeError>(ids.ndim() == 2, "token ids have shape {}, expected (B, T)", shape_text(ids.shape()));
  const std::int64_t past = caches.empty() ? 0 : caches[0].length;
  Tensor x = embedding_.forward(ids);
  embedding_.release_saved();
  positions_.forward_inplace(x, past);
  Tensor h = encoder_.forward_cached(x, caches, capacity, p);
  SavedTensor unused;  // no backward
  Tensor logits = logits_of(h, p, unused);
  if (lm_head_) lm_head_->release_saved();
  return logits;
}

void LanguageModel::backward(const Tensor& dlogits) {
  Tensor dh;
  if (lm_head_) {
    dh = lm_head_->backward(dlogits);
  } else {
    check(h_saved_.defined(), "LanguageModel::backward called without a preceding forward");
    const Tensor& h = h_saved_.stored();
    const std::int64_t d = cfg_.layer.d_model, N = h.numel() / d;
    dh = Tensor::empty(h.shape());
    visit_float_storage(h.dtype(), [&](auto tag) {
      using T = decltype(tag);
      linear_backward_stored<T>(dh.f32(), d, false, store_->grad(embedding_.weight()), nullptr, dlogits.f32(),
                                cfg_.vocab_size, h.template data<T>(), d, store_->data(embedding_.weight()), N, d,
                                cfg_.vocab_size);
    });
    h_saved_.clear();
  }
  Tensor dx = encoder_.backward(dh);
  positions_.backward(dx);
  embedding_.backward(dx);
}

}  // namespace multihead

namespace multihead {

std::string VisionConfig::describe(std::int64_t parameters) const {
  return fmt::format("ViT, {} patches of {}x{}, {} layers, d_model {}, {} heads, {} parameters", patches(), patch,
                     patch, num_layers, layer.d_model, layer.nhead, parameters);
}

void VisionConfig::validate() const {
  layer.validate();
  check<ConfigError>(image_size > 0 && patch > 0 && image_size % patch == 0,
                     "image_size ({}) must be a positive multiple of patch ({})", image_size, patch);
  check<ConfigError>(channels > 0 && num_layers > 0 && num_classes > 0,
                     "channels, num_layers and num_classes must be positive");
}

namespace {
const VisionConfig& validated(const VisionConfig& c) {
  c.validate();
  return c;
}
}  // namespace

VisionTransformer::VisionTransformer(ParamStore& store, const VisionConfig& cfg)
    : cfg_(validated(cfg)),
      store_(&store),
      patch_embedding_(store, "patch_embedding.", cfg.channels * cfg.patch * cfg.patch, cfg.layer.d_model),
      cls_token_(store.add("cls_token", {1, 1, cfg.layer.d_model})),
      pos_embedding_(store.add("pos_embedding", {1, cfg.patches() + 1, cfg.layer.d_model})),
      encoder_(store, "encoder.", cfg.layer, cfg.num_layers, true),
      classifier_(store, "classifier.", cfg.layer.d_model, cfg.num_classes) {}

void VisionTransformer::init(Rng& rng) {
  patch_embedding_.init(rng);
  for (float& v : store_->data_span(cls_token_)) v = 0.02f * rng.normal();
  for (float& v : store_->data_span(pos_embedding_)) v = 0.02f * rng.normal();
  encoder_.init(rng);
  classifier_.init(rng);
}

void VisionTransformer::release_saved() {
  patch_embedding_.release_saved();
  encoder_.release_saved();
  classifier_.release_saved();
  patches_ = Tensor(), x_ = Tensor(), h_ = Tensor(), cls_out_ = Tensor();
}

Tensor VisionTransformer::forward(const Tensor& images, const ForwardContext& ctx) {
  const std::int64_t C = cfg_.channels, S = cfg_.image_size, P = cfg_.patch, G = S / P, N = cfg_.patches();
  const std::int64_t d = cfg_.layer.d_model;
  expect_shape(images, {images.dim(0), C, S, S}, "images");
  const std::int64_t B = images.dim(0);
  // (B, C, S, S) -> (B, N, C*P*P): patch (gy, gx) holds channel-major pixel rows.
  patches_ = Tensor::empty({B, N, C * P * P});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t gy = 0; gy < G; ++gy)
      for (std::int64_t gx = 0; gx < G; ++gx) {
        float* dst = patches_.f32() + ((b * N) + gy * G + gx) * C * P * P;
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t y = 0; y < P; ++y)
            for (std::int64_t x = 0; x < P; ++x) *dst++ = images.f32()[((b * C + c) * S + gy * P + y) * S + gx * P + x];
      }
  Tensor emb = patch_embedding_.forward(patches_);  // (B, N, d)
  x_ = Tensor::empty({B, N + 1, d});
  const float* cls = store_->data(cls_token_);
  const float* pos = store_->data(pos_embedding_);
  for (std::int64_t b = 0; b < B; ++b) {
    float* xb = x_.f32() + b * (N + 1) * d;
    for (std::int64_t e = 0; e < d; ++e) xb[e] = cls[e] + pos[e];
    for (std::int64_t i = 0; i < N * d; ++i) xb[d + i] = emb.f32()[b * N * d + i] + pos[d + i];
  }
  h_ = encoder_.forward(x_, {}, ctx);
  if (ctx.precision != Precision::kF32) x_ = Tensor();  // the first layer keeps its own 16-bit copy
  cls_out_ = Tensor::empty({B, d});
  for (std::int64_t b = 0; b < B; ++b)
    std::memcpy(cls_out_.f32() + b * d, h_.f32() + b * (N + 1) * d, sizeof(float) * static_cast<std::size_t>(d));
  return classifier_.forward(cls_out_);
}

void VisionTransformer::backward(const Tensor& dlogits) {
  const std::int64_t N = cfg_.patches(), d = cfg_.layer.d_model, B = h_.dim(0);
  Tensor dcls = classifier_.backward(dlogits);
  Tensor dh({B, N + 1, d});
  for (std::int64_t b = 0; b < B; ++b)
    std::memcpy(dh.f32() + b * (N + 1) * d, dcls.f32() + b * d, sizeof(float) * static_cast<std::size_t>(d));
  Tensor dx = encoder_.backward(dh);
  float* gcls = store_->grad(cls_token_);
  float* gpos = store_->grad(pos_embedding_);
  Tensor demb = Tensor::empty({B, N, d});
  for (std::int64_t b = 0; b < B; ++b) {
    const float* g = dx.f32() + b * (N + 1) * d;
    for (std::int64_t e = 0; e < d; ++e) gcls[e] += g[e];
    for (std::int64_t i = 0; i < (N + 1) * d; ++i) gpos[i] += g[i];
    std::memcpy(demb.f32() + b * N * d, g + d, sizeof(float) * static_cast<std::size_t>(N * d));
  }
  patch_embedding_.backward(demb);
}

}  // namespace multihead
