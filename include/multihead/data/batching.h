// Batches of token sequences, padded to their longest member.
#pragma once

#include <cstdint>
#include <vector>

#include "multihead/core/tensor.h"

namespace multihead {

struct TokenBatch {
  Tensor ids;      // (B, L) I64, <pad> after each sequence's end
  Tensor padding;  // (B, L) BOOL, true at padding (a key_padding_mask)
  Tensor labels;   // (B) I64
  std::int64_t tokens = 0;  // real (unpadded) tokens
};

// Each sequence is cut to max_len tokens ([CLS] included when add_cls puts
// one first); the batch is as long as its longest sequence.
TokenBatch make_token_batch(const std::vector<const std::vector<std::int64_t>*>& seqs,
                            const std::vector<std::int64_t>& labels, std::int64_t max_len, bool add_cls);

// The indices in batches of `batch`, in an order shuffled by (seed, epoch)
// when shuffle is set; the last batch may be smaller.
std::vector<std::vector<std::int64_t>> epoch_batches(const std::vector<std::int64_t>& indices, std::int64_t batch,
                                                     std::uint64_t seed, std::int64_t epoch, bool shuffle);

}  // namespace multihead
