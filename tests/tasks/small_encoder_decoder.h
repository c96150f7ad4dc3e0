// SPDX-License-Identifier: Apache-2.0
// A small encoder-decoder for the decoding and inspection tests: one encoder
// and two decoder layers, d_model 16, 2 heads, no dropout.
#pragma once

#include "multihead/nn/encoder_decoder.h"

namespace multihead::test {

inline EncoderDecoderConfig small_encoder_decoder(std::int64_t source_vocab, std::int64_t target_vocab,
                                                  PositionKind positions) {
  EncoderDecoderConfig c;
  c.source_vocab = source_vocab;
  c.model.vocab_size = target_vocab;
  c.model.num_layers = 1;
  c.decoder_layers = 2;
  c.model.layer.d_model = 16;
  c.model.layer.nhead = 2;
  c.model.layer.dim_feedforward = 16;
  c.model.layer.dropout = 0.0;
  c.model.positions = positions;
  c.model.max_len = 16;
  return c;
}

}  // namespace multihead::test
