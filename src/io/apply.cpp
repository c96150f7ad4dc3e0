#include "multihead/io/apply.h"

#include <cstring>
#include <set>

#include "multihead/io/json_config.h"
#include "multihead/nn/multi_head_attention.h"

namespace multihead {
namespace {

const Tensor* find(const TensorMap& m, const std::string& name) {
  auto it = m.find(name);
  return it == m.end() ? nullptr : &it->second;
}

// Copies `weights` into the store by state_dict name, as PyTorch's strict
// load_state_dict: every parameter present with its exact shape, nothing extra.
void load_weights(ParamStore& store, const TensorMap& weights) {
  for (const auto& e : store.entries()) {
    const Tensor* t = find(weights, e.name);
    check<ShapeError>(t != nullptr, "weights: missing tensor '{}' of shape {}", e.name, shape_str(e.shape));
    check<ShapeError>(t->dtype() == DType::kF32, "weights: '{}' must be F32, got {}", e.name, dtype_name(t->dtype()));
    check<ShapeError>(t->shape() == e.shape, "weights: '{}' has shape {}, expected {}", e.name, shape_str(t->shape()),
                      shape_str(e.shape));
    auto h = *store.find(e.name);
    std::memcpy(store.data(h), t->f32(), sizeof(float) * static_cast<std::size_t>(e.numel));
  }
  for (const auto& [name, t] : weights)
    check<ShapeError>(store.find(name).has_value(), "weights: unexpected tensor '{}'", name);
}

TensorMap apply_mha(ConfigReader& r, const TensorMap& weights, const TensorMap& inputs) {
  MultiheadAttentionConfig cfg;
  cfg.embed_dim = r.get_int("embed_dim");
  cfg.num_heads = r.get_int("num_heads");
  cfg.dropout = r.get_number("dropout", 0.0);
  cfg.bias = r.get_bool("bias", true);
  cfg.add_bias_kv = r.get_bool("add_bias_kv", false);
  cfg.add_zero_attn = r.get_bool("add_zero_attn", false);
  cfg.kdim = r.get_int_or_null("kdim", 0);
  cfg.vdim = r.get_int_or_null("vdim", 0);
  check<ConfigError>(r.get_bool("batch_first", true), "batch_first must be true: multihead is batch-first (B, L, E)");
  MultiheadAttentionCall call;
  call.need_weights = r.get_bool("need_weights", true);
  call.average_attn_weights = r.get_bool("average_attn_weights", true);
  const bool is_causal = r.get_bool("is_causal", false);
  const std::string align = r.get_string("causal_alignment", std::string("top_left"));
  check<ConfigError>(align == "top_left" || align == "bottom_right",
                     "causal_alignment must be \"top_left\" or \"bottom_right\", got \"{}\"", align);
  if (is_causal) call.causal = align == "top_left" ? CausalAlign::kTopLeft : CausalAlign::kBottomRight;
  call.training = r.get_bool("training", false);
  call.dropout_seed = static_cast<std::uint64_t>(r.get_int("seed", 0));
  r.finish();

  static const std::set<std::string> kInputs = {"query", "key", "value", "key_padding_mask", "attn_mask",
                                                "grad_output"};
  for (const auto& [name, t] : inputs)
    check<ShapeError>(kInputs.count(name) != 0, "inputs: unexpected tensor '{}'", name);
  const Tensor* query = find(inputs, "query");
  const Tensor* key = find(inputs, "key");
  const Tensor* value = find(inputs, "value");
  check<ShapeError>(query != nullptr, "inputs: missing tensor 'query'");
  check<ShapeError>((key == nullptr) == (value == nullptr),
                    "inputs: give both 'key' and 'value', or neither for self-attention");
  for (const char* name : {"query", "key", "value", "grad_output"}) {
    const Tensor* t = find(inputs, name);
    check<ShapeError>(t == nullptr || t->dtype() == DType::kF32, "inputs: '{}' must be F32, got {}", name,
                      t ? dtype_name(t->dtype()) : "");
  }
  const bool self = key == nullptr;
  check<ConfigError>(!self || cfg.packed_in_proj(),
                     "self-attention (no 'key'/'value' inputs) needs kdim and vdim equal to embed_dim");

  ParamStore store;
  MultiheadAttention mha(store, "", cfg);
  store.finalize();
  load_weights(store, weights);

  MultiheadAttentionOutput out = self ? mha.forward_self(*query, find(inputs, "key_padding_mask"),
                                                         find(inputs, "attn_mask"), call)
                                      : mha.forward(*query, *key, *value, find(inputs, "key_padding_mask"),
                                                    find(inputs, "attn_mask"), call);
  TensorMap result;
  result.emplace("output", std::move(out.output));
  if (call.need_weights) result.emplace("attn_weights", std::move(out.weights));
  if (const Tensor* grad_out = find(inputs, "grad_output")) {
    MultiheadAttentionGrads g = mha.backward(*grad_out);
    result.emplace("grad_query", std::move(g.query));
    if (!self) {
      result.emplace("grad_key", std::move(g.key));
      result.emplace("grad_value", std::move(g.value));
    }
    for (const auto& e : store.entries()) {
      Tensor t(e.shape);
      std::memcpy(t.f32(), store.grad(*store.find(e.name)), sizeof(float) * static_cast<std::size_t>(e.numel));
      std::string grad_name = "grad.";  // (built in two steps: GCC 12 warns falsely on "lit" + str)
      grad_name += e.name;
      result.emplace(std::move(grad_name), std::move(t));
    }
  }
  return result;
}

}  // namespace

TensorMap apply_module(std::string_view module_json, const std::string& module_source, const TensorMap& weights,
                       const TensorMap& inputs) {
  nlohmann::json j = ConfigReader::parse(module_json, module_source);
  ConfigReader r(j, module_source);
  const std::string type = r.get_string("type");
  if (type == "MultiheadAttention") return apply_mha(r, weights, inputs);
  throw ConfigError(fmt::format("{}: unknown module type \"{}\" (known: MultiheadAttention)", module_source, type));
}

}  // namespace multihead
