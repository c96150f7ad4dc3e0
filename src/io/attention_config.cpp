#include "multihead/io/attention_config.h"

namespace multihead {

namespace {

// One list of the keys for reading and writing (io/json_config.h).
template <typename Keys, typename Pattern>
void pattern_keys(Keys& k, Pattern& p) {
  k.named("attention", p.variant, attention_variant_name, parse_attention_variant);
  k("window_left", p.window_left)("window_right", p.window_right);
  k("sparse_block", p.sparse_block)("sparse_neighbours", p.sparse_neighbours)("global_tokens", p.global_tokens);
  k("num_kv_heads", p.num_kv_heads);
}

}  // namespace

void read_attention_pattern(ConfigReader& r, AttentionPattern& p) { pattern_keys(r, p); }

void write_attention_pattern(const AttentionPattern& p, nlohmann::json& j) {
  ConfigWriter w(j);
  pattern_keys(w, p);
}

}  // namespace multihead
