// SPDX-License-Identifier: Apache-2.0
// Sampling from a language model: incremental decoding with a KV cache and
// temperature, top-k and top-p (nucleus) sampling.
#pragma once

#include <cstdint>
#include <vector>

#include "multihead/core/rng.h"
#include "multihead/nn/models.h"

namespace multihead {

struct SamplingConfig {
  double temperature = 1.0;  // 0: greedy (argmax)
  std::int64_t top_k = 0;    // 0: no limit
  double top_p = 1.0;        // 1: no limit
  std::uint64_t seed = 0;
};

// One token from logits (V): softmax(logits / temperature), restricted to the
// top_k most likely tokens and then to the smallest set whose mass reaches
// top_p, renormalised.
std::int64_t sample_token(const float* logits, std::int64_t V, const SamplingConfig& cfg, Rng& rng);

// The most tokens one generation samples: far past any continuation a CPU
// model is asked for, and a call that returns (2^62 asked never did).
inline constexpr std::int64_t kMaxGeneratedTokens = std::int64_t{1} << 16;

// The prompt (at least one token) followed by `count` sampled tokens
// (0 to kMaxGeneratedTokens; more is a ConfigError).
// context > 0 bounds what the model sees to the window it was trained on:
// when the cache would outgrow it, decoding restarts from the last
// context / 2 tokens, so no position beyond training is ever used.
// precision: of the activations and the key/value cache.
std::vector<std::int64_t> generate(LanguageModel& model, const std::vector<std::int64_t>& prompt, std::int64_t count,
                                   const SamplingConfig& cfg, std::int64_t context = 0,
                                   Precision precision = Precision::kF32);
// Several prompts continued together, one batch row each (one product per
// layer for all rows at every step): prompts of equal length, each row
// sampled from its own stream (row 0's is generate()'s, so a batch of one
// gives what generate gives). A ConfigError where the lengths differ.
std::vector<std::vector<std::int64_t>> generate_batch(LanguageModel& model,
                                                      const std::vector<std::vector<std::int64_t>>& prompts,
                                                      std::int64_t count, const SamplingConfig& cfg,
                                                      std::int64_t context = 0, Precision precision = Precision::kF32);

}  // namespace multihead
