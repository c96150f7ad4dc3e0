// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/encoder_decoder.h"

#include <cstring>

#include "multihead/nn/init.h"

namespace multihead {

void EncoderDecoderConfig::validate() const {
  model.validate();
  check<ConfigError>(source_vocab > 0 && source_vocab <= kMaxVocab, "the source vocabulary must be in [1, {}], got {}",
                     kMaxVocab, source_vocab);
  check<ConfigError>(decoder_layers >= 0 && decoder_layers <= kMaxLayers, "decoder_layers must be in [0, {}], got {}",
                     kMaxLayers, decoder_layers);
}

std::string EncoderDecoderConfig::describe(std::int64_t parameters) const {
  return fmt::format("{} + {} layers, d_model {}, {} heads, {} positions, {} parameters", model.num_layers,
                     decoder_depth(), model.layer.d_model, model.layer.nhead, position_kind_name(model.positions),
                     parameters);
}

EncodedMemory EncodedMemory::select(std::span<const std::int64_t> rows) const {
  EncodedMemory m;
  if (padding.defined()) m.padding = gather_rows(padding, rows);
  for (const KvCache& c : cross)
    m.cross.push_back(KvCache{gather_rows(c.k, rows), gather_rows(c.v, rows), c.length, {}});
  return m;
}

namespace {

const EncoderDecoderConfig& validated(const EncoderDecoderConfig& cfg) {
  cfg.validate();
  return cfg;
}

}  // namespace

EncoderDecoder::EncoderDecoder(ParamStore& store, const EncoderDecoderConfig& cfg)
    : cfg_(validated(cfg)),
      source_embedding_(store, "source_embedding.", cfg.source_vocab, cfg.model.layer.d_model),
      target_embedding_(store, "target_embedding.", cfg.model.vocab_size, cfg.model.layer.d_model),
      source_positions_(store, "source_positions.", cfg.model.positions, cfg.model.max_len, cfg.model.layer.d_model),
      target_positions_(store, "target_positions.", cfg.model.positions, cfg.model.max_len, cfg.model.layer.d_model),
      encoder_(store, "encoder.", cfg.model.layer_config(), cfg.model.num_layers, cfg.model.final_norm),
      decoder_(store, "decoder.", cfg.model.layer_config(), cfg.decoder_depth(), cfg.model.final_norm),
      output_(store, "output.", cfg.model.layer.d_model, cfg.model.vocab_size) {
  store_ = &store;
}

void EncoderDecoder::init(Rng& rng) {
  source_embedding_.init(rng);
  target_embedding_.init(rng);
  source_positions_.init(rng);
  target_positions_.init(rng);
  encoder_.init(rng);
  decoder_.init(rng);
  output_.init(rng);
  if (cfg_.model.init == "xavier") xavier_uniform_all(*store_, rng);
}

void EncoderDecoder::release_saved() {
  source_embedding_.release_saved();
  target_embedding_.release_saved();
  encoder_.release_saved();
  decoder_.release_saved();
  output_.release_saved();
  x_ = Tensor(), y_ = Tensor(), memory_ = Tensor(), h_ = Tensor();
}

Tensor EncoderDecoder::forward(const Tensor& source, const Tensor* source_padding, const Tensor& target,
                               const ForwardContext& ctx) {
  check<ShapeError>(source.ndim() == 2 && target.ndim() == 2 && source.dim(0) == target.dim(0),
                    "source ids have shape {} and target ids {}, expected (B, S) and (B, T)",
                    shape_text(source.shape()), shape_text(target.shape()));
  source_masks_ = AttentionMaskArgs{source_padding, nullptr, CausalAlign::kNone};
  x_ = source_embedding_.forward(source);
  source_positions_.forward_inplace(x_);
  memory_ = encoder_.forward(x_, source_masks_, ctx);
  y_ = target_embedding_.forward(target);
  target_positions_.forward_inplace(y_);
  AttentionMaskArgs self_masks;
  self_masks.causal = CausalAlign::kTopLeft;
  h_ = decoder_.forward(y_, memory_, self_masks, source_masks_, ctx);
  Tensor logits = output_.forward(h_, ctx.precision);
  // In 16 bits every layer keeps its own 16-bit copies of what it reads again.
  if (ctx.precision != Precision::kF32) x_ = Tensor(), y_ = Tensor(), h_ = Tensor();
  return logits;
}

void EncoderDecoder::backward(const Tensor& dlogits) {
  Tensor dh = output_.backward(dlogits);
  TransformerDecoderLayer::Grads g = decoder_.backward(dh);
  dh = Tensor();
  target_positions_.backward(g.x);
  target_embedding_.backward(g.x);
  Tensor dx = encoder_.backward(g.memory);
  source_positions_.backward(dx);
  source_embedding_.backward(dx);
}

EncodedMemory EncoderDecoder::encode(const Tensor& source, const Tensor* source_padding, Precision p) {
  EncodedMemory m;
  if (source_padding) m.padding = source_padding->clone();
  Tensor x = source_embedding_.forward(source);
  source_embedding_.release_saved();
  source_positions_.forward_inplace(x);
  const AttentionMaskArgs masks{m.padding.defined() ? &m.padding : nullptr, nullptr, CausalAlign::kNone};
  Tensor memory = encoder_.forward(x, masks, eval_context(p));
  encoder_.release_saved();
  decoder_.cache_memory(memory, m.cross, p);
  return m;
}

Tensor EncoderDecoder::decode_step(const Tensor& target, std::vector<KvCache>& self_caches, const EncodedMemory& memory,
                                   std::int64_t capacity, Precision p) {
  check<ShapeError>(target.ndim() == 2 && target.dim(0) == memory.batch(), "target ids have shape {}, expected ({}, T)",
                    shape_text(target.shape()), memory.batch());
  const std::int64_t past = self_caches.empty() ? 0 : self_caches.front().length;
  Tensor y = target_embedding_.forward(target);
  target_embedding_.release_saved();
  target_positions_.forward_inplace(y, past);
  Tensor h = decoder_.forward_cached(y, self_caches, memory.cross, memory.padding.defined() ? &memory.padding : nullptr,
                                     capacity, p);
  Tensor logits = output_.forward(h, p);
  output_.release_saved();
  return logits;
}

}  // namespace multihead
