#include "multihead/nn/models.h"

#include <cmath>
#include <cstring>

#include "multihead/kernels/linear.h"
#include "multihead/nn/init.h"

namespace multihead {

namespace {
constexpr std::pair<std::string_view, PositionKind> kPositionNames[] = {
    {"none", PositionKind::kNone},         {"sinusoidal", PositionKind::kSinusoidal},
    {"learned", PositionKind::kLearned},   {"relative", PositionKind::kRelative},
    {"rope", PositionKind::kRope},         {"alibi", PositionKind::kAlibi}};
}  // namespace

PositionKind parse_position_kind(std::string_view name) {
  for (const auto& [n, k] : kPositionNames)
    if (n == name) return k;
  throw ConfigError(fmt::format(
      "positions must be none, sinusoidal, learned, relative, rope or alibi, got \"{}\"", name));
}

std::string_view position_kind_name(PositionKind kind) {
  for (const auto& [n, k] : kPositionNames)
    if (k == kind) return n;
  return "?";
}

Pooling parse_pooling(std::string_view name) {
  if (name == "mean") return Pooling::kMean;
  if (name == "cls") return Pooling::kCls;
  throw ConfigError(fmt::format("pooling must be mean or cls, got \"{}\"", name));
}

TransformerLayerConfig ModelConfig::layer_config() const {
  TransformerLayerConfig c = layer;
  c.positions = positions == PositionKind::kRelative ? AttentionPositions::kRelative
                : positions == PositionKind::kRope   ? AttentionPositions::kRope
                : positions == PositionKind::kAlibi  ? AttentionPositions::kAlibi
                                                     : AttentionPositions::kNone;
  c.relative_clip = relative_clip;
  c.relative_values = relative_values;
  c.rope_theta = rope_theta;
  return c;
}

void ModelConfig::validate() const {
  layer.validate();
  layer_config().attention().validate();
  check<ConfigError>(vocab_size > 0, "vocab_size must be positive, got {}", vocab_size);
  check<ConfigError>(num_layers > 0, "num_layers must be positive, got {}", num_layers);
  check<ConfigError>(max_len > 0, "max_len must be positive, got {}", max_len);
  check<ConfigError>(num_classes > 0, "num_classes must be positive, got {}", num_classes);
  check<ConfigError>(init == "pytorch" || init == "xavier", "init must be pytorch or xavier, got \"{}\"", init);
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
  check<ShapeError>(offset + L <= max_len_, "sequence length {} exceeds the positional table (max_len {})",
                    offset + L, max_len_);
  const float* t = (kind_ == PositionKind::kSinusoidal ? table_.f32() : store_->data(learned_->weight())) + offset * d_;
  float* px = x.f32();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < L * d_; ++i) px[b * L * d_ + i] += t[i];
}

void AbsolutePositions::backward(const Tensor& dy) {
  if (kind_ != PositionKind::kLearned) return;
  const std::int64_t B = dy.dim(0), L = dy.dim(1);
  float* g = store_->grad(learned_->weight());
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

SequenceClassifier::SequenceClassifier(ParamStore& store, const ModelConfig& cfg)
    : cfg_(validated(cfg)),
      store_(&store),
      embedding_(store, "embedding.", cfg.vocab_size, cfg.layer.d_model),
      positions_(store, "pos_embedding.", cfg.positions, cfg.max_len, cfg.layer.d_model),
      encoder_(store, "encoder.", cfg.layer_config(), cfg.num_layers, cfg.final_norm),
      classifier_(store, "classifier.", cfg.layer.d_model, cfg.num_classes) {}

void SequenceClassifier::init(Rng& rng) {
  embedding_.init(rng);
  positions_.init(rng);
  encoder_.init(rng);
  classifier_.init(rng);
  if (cfg_.init == "xavier") xavier_uniform_all(*store_, rng);
}

void SequenceClassifier::clear_cache() {
  embedding_.clear_cache();
  encoder_.clear_cache();
  classifier_.clear_cache();
  x_ = Tensor(), h_ = Tensor(), pooled_ = Tensor();
}

Tensor SequenceClassifier::forward(const Tensor& ids, const Tensor* padding, const ForwardContext& ctx) {
  check<ShapeError>(ids.ndim() == 2, "token ids have shape {}, expected (B, L)", shape_str(ids.shape()));
  const std::int64_t B = ids.dim(0), L = ids.dim(1), d = cfg_.layer.d_model;
  if (padding) {
    expect_shape(*padding, {B, L}, "padding mask");
    check<ShapeError>(padding->dtype() == DType::kBool, "padding mask must be BOOL");
  }
  padding_ = padding;
  x_ = embedding_.forward(ids);
  positions_.forward_inplace(x_);
  AttentionMaskArgs masks;
  masks.key_padding_mask = padding;
  h_ = encoder_.forward(x_, masks, ctx);
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
  return classifier_.forward(pooled_);
}

void SequenceClassifier::backward(const Tensor& dlogits) {
  const std::int64_t B = h_.dim(0), L = h_.dim(1), d = cfg_.layer.d_model;
  Tensor dpooled = classifier_.backward(dlogits);
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
  Tensor dx = encoder_.backward(dh);
  positions_.backward(dx);
  embedding_.backward(dx);
}

LanguageModel::LanguageModel(ParamStore& store, const ModelConfig& cfg)
    : cfg_(validated(cfg)),
      store_(&store),
      embedding_(store, "embedding.", cfg.vocab_size, cfg.layer.d_model),
      positions_(store, "pos_embedding.", cfg.positions, cfg.max_len, cfg.layer.d_model),
      encoder_(store, "encoder.", cfg.layer_config(), cfg.num_layers, cfg.final_norm) {
  if (!cfg.tie_embeddings)
    lm_head_ = std::make_unique<Linear>(store, "lm_head.", cfg.layer.d_model, cfg.vocab_size, false);
}

void LanguageModel::init(Rng& rng) {
  embedding_.init(rng);
  positions_.init(rng);
  encoder_.init(rng);
  if (lm_head_) lm_head_->init(rng);
  if (cfg_.init == "xavier") xavier_uniform_all(*store_, rng);
}

void LanguageModel::clear_cache() {
  embedding_.clear_cache();
  encoder_.clear_cache();
  if (lm_head_) lm_head_->clear_cache();
  x_ = Tensor(), h_ = Tensor();
}

Tensor LanguageModel::forward(const Tensor& ids, const ForwardContext& ctx) {
  check<ShapeError>(ids.ndim() == 2, "token ids have shape {}, expected (B, L)", shape_str(ids.shape()));
  x_ = embedding_.forward(ids);
  positions_.forward_inplace(x_);
  AttentionMaskArgs masks;
  masks.causal = CausalAlign::kTopLeft;
  h_ = encoder_.forward(x_, masks, ctx);
  return logits_of(h_, ids.dim(0), ids.dim(1));
}

Tensor LanguageModel::logits_of(const Tensor& h, std::int64_t B, std::int64_t T) {
  if (lm_head_) return lm_head_->forward(h);
  Tensor logits = Tensor::empty({B, T, cfg_.vocab_size});
  linear_forward(logits.f32(), cfg_.vocab_size, h.f32(), cfg_.layer.d_model, store_->data(embedding_.weight()),
                 static_cast<const float*>(nullptr), B * T, cfg_.layer.d_model, cfg_.vocab_size);
  return logits;
}

Tensor LanguageModel::forward_cached(const Tensor& ids, std::vector<KvCache>& caches, std::int64_t capacity) {
  check<ShapeError>(ids.ndim() == 2, "token ids have shape {}, expected (B, T)", shape_str(ids.shape()));
  const std::int64_t past = caches.empty() ? 0 : caches[0].length;
  Tensor x = embedding_.forward(ids);
  embedding_.clear_cache();
  positions_.forward_inplace(x, past);
  Tensor h = encoder_.forward_cached(x, caches, capacity);
  Tensor logits = logits_of(h, ids.dim(0), ids.dim(1));
  if (lm_head_) lm_head_->clear_cache();
  return logits;
}

void LanguageModel::backward(const Tensor& dlogits) {
  Tensor dh;
  if (lm_head_) {
    dh = lm_head_->backward(dlogits);
  } else {
    const std::int64_t d = cfg_.layer.d_model, N = h_.numel() / d;
    dh = Tensor::empty(h_.shape());
    linear_backward(dh.f32(), d, false, store_->grad(embedding_.weight()), static_cast<float*>(nullptr),
                    dlogits.f32(), cfg_.vocab_size, h_.f32(), d, store_->data(embedding_.weight()), N, d,
                    cfg_.vocab_size);
  }
  Tensor dx = encoder_.backward(dh);
  positions_.backward(dx);
  embedding_.backward(dx);
}

}  // namespace multihead
