// SPDX-License-Identifier: Apache-2.0
// Synthetic sequence tasks, generated in-process, for length-extrapolation
// studies. An example is one token stream for a causal language model:
//   <cls> x_1 ... x_n <eos> y_1 ... y_n
// where y is x copied, reversed or sorted; only the y positions (and the
// final <eos>) are scored, the rest carry ignore_index. Symbols are the ids
// 4 .. 4 + symbols - 1 (after the special tokens).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "multihead/core/rng.h"
#include "multihead/core/tensor.h"
#include "multihead/kernels/cross_entropy.h"  // kIgnoreIndex

namespace multihead {

enum class SyntheticKind : std::uint8_t { kCopy, kReverse, kSort };
SyntheticKind parse_synthetic_kind(std::string_view name);
const char* synthetic_kind_name(SyntheticKind kind);

struct SyntheticTask {
  SyntheticKind kind = SyntheticKind::kReverse;
  std::int64_t symbols = 10;
  std::int64_t min_len = 1, max_len = 64;  // of x; train and test use different ranges

  std::int64_t vocab_size() const { return 4 + symbols; }
  std::int64_t max_tokens() const { return 2 * max_len + 2; }
};

struct SyntheticBatch {
  Tensor ids;      // (B, T) I64, padded with <pad>
  Tensor targets;  // (B * T) I64: the next token where scored, else -100
  std::int64_t scored = 0;
};

// Batch `index` of the task: a pure function of (seed, index).
SyntheticBatch synthetic_batch(const SyntheticTask& task, std::int64_t batch, std::uint64_t seed, std::uint64_t index);

}  // namespace multihead
