// SPDX-License-Identifier: Apache-2.0
// An encoder-decoder Transformer (Vaswani et al. 2017) between two
// vocabularies, as nn.Transformer with embeddings and an output layer:
//
//   source ids (B, S) -> "source_embedding" -> positions -> TransformerEncoder
//     ("encoder.", self-attention under the source's padding mask) -> memory
//   target ids (B, T) -> "target_embedding" -> positions -> TransformerDecoder
//     ("decoder.", causal self-attention, cross-attention to the memory)
//   -> "output" Linear -> logits (B, T, target vocabulary)
//
// Positions: sinusoidal or learned tables ("source_positions.weight",
// "target_positions.weight") are added to each side's embeddings; rotary,
// ALiBi and relative positions act inside the encoder's and the decoder's
// self-attention; cross-attention has none (the memory is a set to it).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "multihead/nn/models.h"

namespace multihead {

struct EncoderDecoderConfig {
  // The shared settings. model.vocab_size is the target vocabulary,
  // model.num_layers the encoder's layers; classifier and tying settings are
  // not used.
  ModelConfig model;
  std::int64_t source_vocab = 0;
  std::int64_t decoder_layers = 0;  // 0: as many as the encoder

  void validate() const;
  std::int64_t decoder_depth() const { return decoder_layers > 0 ? decoder_layers : model.num_layers; }
  // "3 + 3 layers, d_model 256, 4 heads, rope positions, 4.1M parameters".
  std::string describe(std::int64_t parameters) const;
};

// The encoder's output for one batch of inputs, ready for decoding: every
// decoder layer's cross-attention keys and values, projected once.
struct EncodedMemory {
  std::vector<KvCache> cross;  // one per decoder layer
  Tensor padding;              // (B, S) bool, true = padding; undefined when none
  std::int64_t batch() const { return cross.empty() ? 0 : cross.front().k.dim(0); }
  // The rows `rows` of the batch, in that order (beam search repeats each
  // input once per beam).
  EncodedMemory select(std::span<const std::int64_t> rows) const;
};

class EncoderDecoder : public Module {
 public:
  EncoderDecoder(ParamStore& store, const EncoderDecoderConfig& cfg);
  void init(Rng& rng) override;
  void release_saved() override;
  const EncoderDecoderConfig& config() const { return cfg_; }
  TransformerEncoder& encoder() { return encoder_; }
  TransformerDecoder& decoder() { return decoder_; }

  // Teacher forcing. source (B, S) I64; source_padding (B, S) bool, true =
  // padding, or null; target (B, T) I64, the decoder's input (the target
  // shifted right behind a start token). Returns logits (B, T, target
  // vocabulary). The three must outlive backward.
  Tensor forward(const Tensor& source, const Tensor* source_padding, const Tensor& target, const ForwardContext& ctx);
  void backward(const Tensor& dlogits);

  // Decoding, in eval mode: encode once, then decode_step over new target
  // tokens (B, T) after those in self_caches (one per decoder layer),
  // returning their logits (B, T, vocabulary); capacity bounds the target
  // length. The rows equal those of forward() on the whole target.
  EncodedMemory encode(const Tensor& source, const Tensor* source_padding, Precision p = Precision::kF32);
  Tensor decode_step(const Tensor& target, std::vector<KvCache>& self_caches, const EncodedMemory& memory,
                     std::int64_t capacity, Precision p = Precision::kF32);

 private:
  EncoderDecoderConfig cfg_;
  ParamStore* store_ = nullptr;
  Embedding source_embedding_, target_embedding_;
  AbsolutePositions source_positions_, target_positions_;
  TransformerEncoder encoder_;
  TransformerDecoder decoder_;
  Linear output_;
  // Read again in backward (fp32): the encoder's input x_ (B, S, d), the
  // memory (B, S, d), the decoder's input y_ (B, T, d) and output h_ (B, T, d).
  Tensor x_, memory_, y_, h_;
  AttentionMaskArgs source_masks_;
};

}  // namespace multihead
