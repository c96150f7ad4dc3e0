#include "multihead/io/attention_config.h"

namespace multihead {

void read_attention_pattern(ConfigReader& r, AttentionPattern& p) {
  p.variant = parse_attention_variant(r.get_string("attention", std::string(attention_variant_name(p.variant))));
  p.window_left = r.get_int("window_left", p.window_left);
  p.window_right = r.get_int("window_right", p.window_right);
  p.sparse_block = r.get_int("sparse_block", p.sparse_block);
  p.sparse_neighbours = r.get_int("sparse_neighbours", p.sparse_neighbours);
  p.global_tokens = r.get_int("global_tokens", p.global_tokens);
  p.num_kv_heads = r.get_int("num_kv_heads", p.num_kv_heads);
}

void write_attention_pattern(const AttentionPattern& p, nlohmann::json& j) {
  j["attention"] = std::string(attention_variant_name(p.variant));
  j["window_left"] = p.window_left;
  j["window_right"] = p.window_right;
  j["sparse_block"] = p.sparse_block;
  j["sparse_neighbours"] = p.sparse_neighbours;
  j["global_tokens"] = p.global_tokens;
  j["num_kv_heads"] = p.num_kv_heads;
}

}  // namespace multihead
