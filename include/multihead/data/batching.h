// SPDX-License-Identifier: Apache-2.0
// Batches of token sequences, padded to their longest member.
#pragma once

#include <cstdint>
#include <vector>

#include "multihead/core/tensor.h"
#include "multihead/data/tokenizer.h"

namespace multihead {

struct TokenBatch {
  Tensor ids;               // (B, L) I64, <pad> after each sequence's end
  Tensor padding;           // (B, L) BOOL, true at padding (a key_padding_mask)
  Tensor labels;            // (B) I64
  std::int64_t tokens = 0;  // real (unpadded) tokens
};

// Each sequence framed as the tokenizer frames it ([CLS] first, [SEP] last
// for BERT's), its own tokens cut so that it fits in max_len; the batch is as
// long as its longest sequence and padded with frame.pad.
TokenBatch make_token_batch(const std::vector<const std::vector<std::int64_t>*>& seqs,
                            const std::vector<std::int64_t>& labels, std::int64_t max_len, const TokenFrame& frame);

// The indices in batches of `batch`, in an order shuffled by (seed, epoch)
// when shuffle is set; the last batch may be smaller.
std::vector<std::vector<std::int64_t>> epoch_batches(const std::vector<std::int64_t>& indices, std::int64_t batch,
                                                     std::uint64_t seed, std::int64_t epoch, bool shuffle);

// Batches of examples of similar length, so that little of a batch is
// padding: the order shuffled as epoch_batches shuffles it is cut into pools
// of pool_batches batches, each pool sorted by length (stably) and cut into
// batches, and the epoch's batches shuffled again. Still a pure function of
// (seed, epoch), so a resumed run reads the same batches. lengths[i] is
// indices[i]'s length; the last batch may be smaller.
std::vector<std::vector<std::int64_t>> length_grouped_batches(const std::vector<std::int64_t>& indices,
                                                              const std::vector<std::int64_t>& lengths,
                                                              std::int64_t batch, std::uint64_t seed,
                                                              std::int64_t epoch, std::int64_t pool_batches = 64);

// Batches for answering inputs: the positions 0 .. n-1 of lengths sorted by
// length (stably, so that inputs of the same length keep their order), cut
// where a batch would hold more than `tokens` padded tokens (its rows times
// its longest length); an input longer than that goes alone. Memory is then
// bounded by the budget whatever the inputs, and little of any batch is
// padding.
std::vector<std::vector<std::int64_t>> length_sorted_batches(const std::vector<std::int64_t>& lengths,
                                                             std::int64_t tokens);

}  // namespace multihead
