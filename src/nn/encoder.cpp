// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/encoder.h"

#include "multihead/kernels/half.h"

namespace multihead {
namespace {

// Passes a layer's output on as the next layer's input. In fp32 every output
// stays in `outputs` (the next layer's backward reads its input through a
// pointer); in 16 bits the output is rounded to the stored precision and only
// the latest is kept, since each layer saved its own 16-bit copy.
const Tensor* pass_on(Tensor out, DType st, std::vector<Tensor>& outputs, Tensor& latest) {
  if (st == DType::kF32) {
    outputs.push_back(std::move(out));
    return &outputs.back();
  }
  round_to_storage(out, st);
  latest = std::move(out);
  return &latest;
}

// The stack's result from its last layer's output: through the final norm,
// or a copy of it in fp32 (its next reader's backward still needs it).
Tensor stack_result(LayerNorm* norm, Tensor& latest, const Tensor& last, Precision p) {
  if (norm) return norm->forward(last, p);
  return &last == &latest ? std::move(latest) : last.clone();
}

}  // namespace

void TransformerEncoder::release_own() {
  outputs_.clear();
  inputs_.clear();
  forwarded_ = false;
}

Tensor TransformerEncoder::forward(const Tensor& x, const AttentionMaskArgs& masks, const ForwardContext& ctx) {
  masks_ = masks;
  ctx_ = ctx;
  const DType st = storage_dtype(ctx.precision);
  outputs_.clear();
  outputs_.reserve(layers_.size());  // no reallocation: layers hold pointers to these
  inputs_.clear();
  inputs_.resize(checkpoint_ ? layers_.size() : 0);
  Tensor h;  // 16-bit: the running activation (each layer keeps its own copies)
  const Tensor* in = &x;
  // In 16 bits the input is rounded too: every layer then reads stored
  // values, and a checkpointed layer recomputes from exactly its input.
  if (st != DType::kF32) in = pass_on(x.clone(), st, outputs_, h);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (checkpoint_) inputs_[i].save(*in, st);
    Tensor out = layers_[i]->forward(*in, masks, ctx);
    if (checkpoint_) layers_[i]->release_saved();
    in = pass_on(std::move(out), st, outputs_, h);
  }
  forwarded_ = true;
  return stack_result(norm_.get(), h, *in, ctx.precision);
}

Tensor TransformerEncoder::forward_cached(const Tensor& x, std::vector<KvCache>& caches, std::int64_t capacity,
                                          Precision p) {
  caches.resize(layers_.size());
  // Rounded between layers as in forward, so both give the same rows.
  const DType st = storage_dtype(p);
  Tensor h;
  const Tensor* in = &x;
  if (st != DType::kF32) {  // no copy of the input in fp32
    h = x.clone();
    round_to_storage(h, st);
    in = &h;
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    h = layers_[i]->forward_cached(*in, caches[i], capacity, p);
    round_to_storage(h, st);
    in = &h;
  }
  if (!norm_) return h;
  Tensor out = norm_->forward(h);
  norm_->release_saved();
  return out;
}

void TransformerEncoder::set_backward_observer(BackwardObserver* observer) {
  observer_ = observer;
  for (auto& l : layers_) l->self_attention().set_backward_observer(observer);
}

Tensor TransformerEncoder::backward(const Tensor& dy) {
  check(forwarded_, "TransformerEncoder::backward called without a preceding forward");
  Tensor g = norm_ ? norm_->backward(dy) : dy.clone();
  if (observer_) {
    check<ConfigError>(ctx_.precision == Precision::kF32,
                       "a backward observer (the gradient probe) needs an fp32 forward");
    observer_->stack_begins(g, layers_.size());
  }
  for (std::size_t i = layers_.size(); i-- > 0;) {
    Tensor scratch;  // a 16-bit input widened; the layer keeps its own copies
    if (checkpoint_) layers_[i]->forward(inputs_[i].f32(scratch), masks_, ctx_);  // recompute, same dropout masks
    if (observer_) observer_->before_layer(i, *layers_[i], g);
    g = layers_[i]->backward(g);
    if (observer_) observer_->after_layer(i, *layers_[i], g);
    if (checkpoint_) layers_[i]->release_saved();
    store_->grads_final_from(first_offset_[i]);
  }
  return g;
}

void TransformerDecoder::release_own() {
  outputs_.clear();
  forwarded_ = false;
}

Tensor TransformerDecoder::forward(const Tensor& x, const Tensor& memory, const AttentionMaskArgs& self_masks,
                                   const AttentionMaskArgs& memory_masks, const ForwardContext& ctx) {
  const DType st = storage_dtype(ctx.precision);
  outputs_.clear();
  outputs_.reserve(layers_.size());
  Tensor h, mem;
  const Tensor* in = &x;
  const Tensor* m = &memory;
  if (st != DType::kF32) {  // rounded, as in TransformerEncoder::forward
    in = pass_on(x.clone(), st, outputs_, h);
    mem = memory.clone();
    round_to_storage(mem, st);
    m = &mem;
  }
  for (auto& layer : layers_) in = pass_on(layer->forward(*in, *m, self_masks, memory_masks, ctx), st, outputs_, h);
  forwarded_ = true;
  return stack_result(norm_.get(), h, *in, ctx.precision);
}

void TransformerDecoder::cache_memory(const Tensor& memory, std::vector<KvCache>& caches, Precision p) const {
  // Rounded as forward() rounds it before the layers read it.
  Tensor mem = memory.clone();
  round_to_storage(mem, storage_dtype(p));
  caches.resize(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i]->cache_memory(mem, caches[i], p);
}

Tensor TransformerDecoder::forward_cached(const Tensor& x, std::vector<KvCache>& self_caches,
                                          const std::vector<KvCache>& memory_caches, const Tensor* memory_padding,
                                          std::int64_t capacity, Precision p) {
  check<ConfigError>(memory_caches.size() == layers_.size(), "the decoder has {} layers, the memory cache {}",
                     layers_.size(), memory_caches.size());
  self_caches.resize(layers_.size());
  const DType st = storage_dtype(p);
  Tensor h = x.clone();
  round_to_storage(h, st);  // as forward() rounds its input
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    h = layers_[i]->forward_cached(h, self_caches[i], memory_caches[i], memory_padding, capacity, p);
    round_to_storage(h, st);
  }
  if (!norm_) return h;
  Tensor out = norm_->forward(h);
  norm_->release_saved();
  return out;
}

TransformerDecoderLayer::Grads TransformerDecoder::backward(const Tensor& dy) {
  check(forwarded_, "TransformerDecoder::backward called without a preceding forward");
  TransformerDecoderLayer::Grads total;
  total.x = norm_ ? norm_->backward(dy) : dy.clone();
  for (std::size_t i = layers_.size(); i-- > 0;) {
    TransformerDecoderLayer::Grads g = layers_[i]->backward(total.x);
    store_->grads_final_from(first_offset_[i]);
    total.x = std::move(g.x);
    if (total.memory.defined()) add_inplace(total.memory, g.memory);
    else total.memory = std::move(g.memory);
  }
  return total;
}

}  // namespace multihead
