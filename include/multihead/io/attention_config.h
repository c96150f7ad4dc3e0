// The attention-pattern keys of every config that carries an attention:
// "attention", "window_left", "window_right", "sparse_block",
// "sparse_neighbours", "global_tokens", "num_kv_heads".
#pragma once

#include <nlohmann/json.hpp>

#include "multihead/io/json_config.h"
#include "multihead/nn/multi_head_attention.h"

namespace multihead {

// Reads the keys present; absent ones keep p's values.
void read_attention_pattern(ConfigReader& r, AttentionPattern& p);
// Adds every key to j.
void write_attention_pattern(const AttentionPattern& p, nlohmann::json& j);

}  // namespace multihead
