// SPDX-License-Identifier: Apache-2.0
// Decoding an EncoderDecoder: greedy and beam search, batched, the source
// encoded once (its cross-attention keys and values projected once per
// input) and the decoder's self-attention keys and values cached.
//
// Beam search keeps `beam` hypotheses per input. Each step extends every
// live hypothesis by every token, keeps the 2 x beam best extensions per
// input: those ending in the end token are finished (scored with the length
// penalty), the best others stay live. An input is done when `beam`
// hypotheses have finished or max_len tokens were produced (then its live
// hypotheses are finished as they are). Beam width 1 is greedy decoding.
#pragma once

#include <cstdint>
#include <vector>

#include "multihead/nn/encoder_decoder.h"

namespace multihead {

struct DecodeOptions {
  std::int64_t beam = 1;
  // Scores are log p(y | x) / |y|^length_penalty (|y| counts the end token):
  // 0 ranks by probability alone, 1 by probability per token.
  double length_penalty = 1.0;
  std::int64_t max_len = 32;  // tokens produced, the end token included
  std::int64_t n_best = 1;    // hypotheses returned per input, at most beam
  std::int64_t start_token = 0, end_token = 1;
  Precision precision = Precision::kF32;
  // The keys a job's "decode" section sets (io/json_config.h); n_best, the
  // tokens and the precision are the caller's, per call.
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& o) {
    k("beam", o.beam, at_least(1)).doc("the beam's width (1: greedy)");
    k("length_penalty", o.length_penalty, at_least(0))
        .doc("scores are log p / length^this: 0 ranks by probability, 1 by probability per token");
    k("max_len", o.max_len, between(1, kMaxLength)).doc("tokens produced at most, the end token included");
  }
  void validate() const;
};

struct Hypothesis {
  std::vector<std::int64_t> tokens;  // without the start and end tokens
  double log_prob = 0;               // of the tokens and the end token (when it ended)
  double score = 0;                  // log_prob under the length penalty
  bool ended = false;                // produced the end token within max_len
};

// For each row of source (B, S) (padding (B, S) bool, true = padding, or
// null), the n_best hypotheses, best first.
std::vector<std::vector<Hypothesis>> beam_search(EncoderDecoder& model, const Tensor& source, const Tensor* padding,
                                                 const DecodeOptions& options);

// Greedy decoding, the arg max at each step: beam_search's width-1 answer,
// without the beam bookkeeping.
std::vector<Hypothesis> greedy_decode(EncoderDecoder& model, const Tensor& source, const Tensor* padding,
                                      const DecodeOptions& options);

}  // namespace multihead
