// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/suggest.h"
#include "multihead/nn/apply_module.h"

#include <cstring>
#include <set>

#include "multihead/io/json_config.h"
#include "multihead/nn/multi_head_attention.h"
#include "multihead/nn/state_dict.h"
#include "multihead/nn/transformer_layers.h"

namespace multihead {
namespace {

const Tensor* find(const TensorMap& m, const std::string& name) {
  auto it = m.find(name);
  return it == m.end() ? nullptr : &it->second;
}

// Every input must be one the module knows, and the named ones F32.
void check_inputs(const TensorMap& inputs, const std::set<std::string>& known,
                  std::initializer_list<const char*> f32_names) {
  for (const auto& [name, t] : inputs)
    check<ShapeError>(known.count(name) != 0, "inputs: unexpected tensor '{}'", clip_text(name));
  for (const char* name : f32_names) {
    const Tensor* t = find(inputs, name);
    check<ShapeError>(t == nullptr || t->dtype() == DType::kF32, "inputs: '{}' must be F32, got {}", name,
                      t ? dtype_name(t->dtype()) : "");
  }
}

const Tensor& require(const TensorMap& inputs, const char* name) {
  const Tensor* t = find(inputs, name);
  check<ShapeError>(t != nullptr, "inputs: missing tensor '{}'", name);
  return *t;
}

// "grad." + each parameter name, copied out of the gradient buffer.
void add_param_grads(TensorMap& result, ParamStore& store) {
  for (const auto& e : store.entries()) {
    Tensor t(e.shape);
    std::memcpy(t.f32(), store.grad(*store.find(e.name)), sizeof(float) * static_cast<std::size_t>(e.numel));
    std::string grad_name = "grad.";  // (built in two steps: GCC 12 warns falsely on "lit" + str)
    grad_name += e.name;
    result.emplace(std::move(grad_name), std::move(t));
  }
}

// The keys every module call takes beside its constructor's: the causal
// flag (named as the module's forward names it), its alignment, dropout's
// switch and seed, and batch_first, which must stay true.
struct CallKeys {
  bool batch_first = true;
  bool is_causal = false;
  CausalAlign alignment = CausalAlign::kTopLeft;
  ForwardContext context;

  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& c, const char* causal_key) {
    k("batch_first", c.batch_first)(causal_key, c.is_causal);
    k.named("causal_alignment", c.alignment, alignment_name, parse_alignment);
    k("training", c.context.training)("seed", c.context.seed);
  }
  static std::string_view alignment_name(CausalAlign a) {
    return a == CausalAlign::kBottomRight ? "bottom_right" : "top_left";
  }
  static CausalAlign parse_alignment(std::string_view name) {
    check<ConfigError>(name == "top_left" || name == "bottom_right",
                       "causal_alignment must be \"top_left\" or \"bottom_right\", got \"{}\"{}", name,
                       did_you_mean(name, {"top_left", "bottom_right"}));
    return name == "top_left" ? CausalAlign::kTopLeft : CausalAlign::kBottomRight;
  }

  // Reads the keys, then the rest of the module's must have been read too.
  void read(ConfigReader& r, const char* causal_key) {
    keys(r, *this, causal_key);
    r.finish();
    check<ConfigError>(batch_first, "batch_first must be true: multihead is batch-first (B, L, E)");
  }
  CausalAlign causal() const { return is_causal ? alignment : CausalAlign::kNone; }
};

TransformerLayerConfig read_layer_config(ConfigReader& r) {
  TransformerLayerConfig c;
  TransformerLayerConfig::keys(r, c);
  return c;
}

TensorMap apply_encoder_layer(ConfigReader& r, const TensorMap& weights, const TensorMap& inputs) {
  const TransformerLayerConfig cfg = read_layer_config(r);
  CallKeys call;
  call.read(r, "is_causal");
  const ForwardContext& ctx = call.context;
  AttentionMaskArgs masks;
  masks.causal = call.causal();
  check_inputs(inputs, {"src", "src_key_padding_mask", "src_mask", "grad_output"}, {"src", "grad_output"});
  const Tensor& src = require(inputs, "src");
  masks.key_padding_mask = find(inputs, "src_key_padding_mask");
  masks.attn_mask = find(inputs, "src_mask");

  ParamStore store;
  TransformerEncoderLayer layer(store, "", cfg);
  store.finalize();
  load_state_dict(store, weights);
  TensorMap result;
  result.emplace("output", layer.forward(src, masks, ctx));
  if (const Tensor* grad_out = find(inputs, "grad_output")) {
    result.emplace("grad_src", layer.backward(*grad_out));
    add_param_grads(result, store);
  }
  return result;
}

TensorMap apply_decoder_layer(ConfigReader& r, const TensorMap& weights, const TensorMap& inputs) {
  const TransformerLayerConfig cfg = read_layer_config(r);
  CallKeys call;
  call.read(r, "tgt_is_causal");
  const ForwardContext& ctx = call.context;
  AttentionMaskArgs self_masks, memory_masks;
  self_masks.causal = call.causal();
  check_inputs(
      inputs,
      {"tgt", "memory", "tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask", "grad_output"},
      {"tgt", "memory", "grad_output"});
  const Tensor& tgt = require(inputs, "tgt");
  const Tensor& memory = require(inputs, "memory");
  self_masks.key_padding_mask = find(inputs, "tgt_key_padding_mask");
  self_masks.attn_mask = find(inputs, "tgt_mask");
  memory_masks.key_padding_mask = find(inputs, "memory_key_padding_mask");
  memory_masks.attn_mask = find(inputs, "memory_mask");

  ParamStore store;
  TransformerDecoderLayer layer(store, "", cfg);
  store.finalize();
  load_state_dict(store, weights);
  TensorMap result;
  result.emplace("output", layer.forward(tgt, memory, self_masks, memory_masks, ctx));
  if (const Tensor* grad_out = find(inputs, "grad_output")) {
    TransformerDecoderLayer::Grads g = layer.backward(*grad_out);
    result.emplace("grad_tgt", std::move(g.x));
    result.emplace("grad_memory", std::move(g.memory));
    add_param_grads(result, store);
  }
  return result;
}

TensorMap apply_mha(ConfigReader& r, const TensorMap& weights, const TensorMap& inputs) {
  MultiheadAttentionConfig cfg;
  MultiheadAttentionConfig::keys(r, cfg);
  MultiheadAttentionCall call;
  r("need_weights", call.need_weights)("average_attn_weights", call.average_attn_weights);
  CallKeys keys;
  keys.read(r, "is_causal");
  call.causal = keys.causal();
  call.training = keys.context.training;
  call.dropout_seed = keys.context.seed;

  check_inputs(inputs, {"query", "key", "value", "key_padding_mask", "attn_mask", "grad_output"},
               {"query", "key", "value", "grad_output"});
  const Tensor* query = &require(inputs, "query");
  const Tensor* key = find(inputs, "key");
  const Tensor* value = find(inputs, "value");
  check<ShapeError>((key == nullptr) == (value == nullptr),
                    "inputs: give both 'key' and 'value', or neither for self-attention");
  const bool self = key == nullptr;
  check<ConfigError>(!self || cfg.packed_in_proj(),
                     "self-attention (no 'key'/'value' inputs) needs kdim and vdim equal to embed_dim");

  ParamStore store;
  MultiheadAttention mha(store, "", cfg);
  store.finalize();
  load_state_dict(store, weights);

  MultiheadAttentionOutput out =
      self ? mha.forward_self(*query, find(inputs, "key_padding_mask"), find(inputs, "attn_mask"), call)
           : mha.forward(*query, *key, *value, find(inputs, "key_padding_mask"), find(inputs, "attn_mask"), call);
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
    add_param_grads(result, store);
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
  if (type == "TransformerEncoderLayer") return apply_encoder_layer(r, weights, inputs);
  if (type == "TransformerDecoderLayer") return apply_decoder_layer(r, weights, inputs);
  throw ConfigError(fmt::format(
      "{}: unknown module type \"{}\" (known: MultiheadAttention, TransformerEncoderLayer, TransformerDecoderLayer)",
      module_source, type));
}

}  // namespace multihead
