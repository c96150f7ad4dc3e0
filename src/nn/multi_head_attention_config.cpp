// SPDX-License-Identifier: Apache-2.0
// MultiheadAttentionConfig's checks and the attention variants' names.
#include "multihead/nn/multi_head_attention.h"

#include "multihead/core/error.h"
#include "multihead/core/suggest.h"

namespace multihead {

void MultiheadAttentionConfig::validate() const {
  check_keys(*this);
  check<ConfigError>(num_heads > 0 && num_heads <= embed_dim, "num_heads must be in [1, embed_dim], got {}", num_heads);
  check<ConfigError>(kdim <= kMaxWidth && vdim <= kMaxWidth, "kdim ({}) and vdim ({}) must be at most {}", kdim, vdim,
                     kMaxWidth);
  check<ConfigError>(embed_dim % num_heads == 0, "embed_dim ({}) must be divisible by num_heads ({})", embed_dim,
                     num_heads);
  check<ConfigError>(kdim >= 0 && vdim >= 0, "kdim ({}) and vdim ({}) must be >= 0 (0: embed_dim, as PyTorch's None)",
                     kdim, vdim);
  check<ConfigError>(positions != AttentionPositions::kRope || head_dim() % 2 == 0,
                     "rotary positions need an even head dimension, got {}", head_dim());
  check<ConfigError>(positions != AttentionPositions::kRelative || relative_clip >= 0,
                     "relative_clip must be >= 0, got {}", relative_clip);
  check<ConfigError>(rope_theta > 0, "rope_theta must be positive, got {}", rope_theta);
  check<ConfigError>(num_kv_heads >= 0 && num_heads % kv_heads() == 0, "num_kv_heads ({}) must divide num_heads ({})",
                     num_kv_heads, num_heads);
  check<ConfigError>(variant != AttentionVariant::kSlidingWindow || (window_left >= -1 && window_right >= -1),
                     "window sizes must be >= -1 (unlimited), got {} and {}", window_left, window_right);
  check<ConfigError>(
      variant != AttentionVariant::kBlockSparse || (sparse_block > 0 && sparse_neighbours >= 0 && global_tokens >= 0),
      "block_sparse needs a positive block, and neighbours and global tokens >= 0");
  check<ConfigError>(variant != AttentionVariant::kLinear ||
                         (positions != AttentionPositions::kRelative && positions != AttentionPositions::kAlibi),
                     "linear attention has no scores for relative or ALiBi positions to act on");
}

AttentionVariant parse_attention_variant(std::string_view name) {
  if (name == "full") return AttentionVariant::kFull;
  if (name == "sliding_window") return AttentionVariant::kSlidingWindow;
  if (name == "block_sparse") return AttentionVariant::kBlockSparse;
  if (name == "linear") return AttentionVariant::kLinear;
  throw ConfigError(
      fmt::format("attention must be \"full\", \"sliding_window\", \"block_sparse\" or \"linear\", got \"{}\"{}", name,
                  did_you_mean(name, {"full", "sliding_window", "block_sparse", "linear"})));
}

std::string_view attention_variant_name(AttentionVariant v) {
  switch (v) {
    case AttentionVariant::kFull: return "full";
    case AttentionVariant::kSlidingWindow: return "sliding_window";
    case AttentionVariant::kBlockSparse: return "block_sparse";
    case AttentionVariant::kLinear: return "linear";
  }
  return "?";
}

}  // namespace multihead
