// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/hf_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/transpose.h"
#include "multihead/train/torch_pickle.h"

namespace multihead {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

json read_json_object(const std::string& path) {
  json j = ConfigReader::parse(read_file(path), path);
  check<IoError>(j.is_object(), "{}: not a JSON object", path);
  return j;
}

// A config key, of the JSON type T, in its bounds; absent, the fallback.
template <typename T>
T key(const HfCheckpoint& c, const char* name, std::optional<T> fallback = std::nullopt) {
  if (!c.config.contains(name) || c.config[name].is_null()) {
    check<IoError>(fallback.has_value(), "{}: no \"{}\"", c.config_path, name);
    return *fallback;
  }
  const json& v = c.config[name];
  if constexpr (std::is_same_v<T, std::int64_t>) {
    check<IoError>(v.is_number_integer() && v.get<std::int64_t>() > 0 && v.get<std::int64_t>() <= kMaxVocab,
                   "{}: \"{}\" is {}, not a positive count", c.config_path, name, v.dump());
  } else if constexpr (std::is_same_v<T, double>) {
    check<IoError>(v.is_number() && v.get<double>() >= 0 && v.get<double>() < 1, "{}: \"{}\" is {}, not in [0, 1)",
                   c.config_path, name, v.dump());
  } else {
    check<IoError>(v.is_string(), "{}: \"{}\" is {}, not a string", c.config_path, name, v.dump());
  }
  return v.get<T>();
}

// A config key with no bounds of its own but a type (a flag, a number), or the fallback when absent.
template <typename T>
T typed(const HfCheckpoint& c, const char* name, T fallback) {
  if (!c.config.contains(name) || c.config[name].is_null()) return fallback;
  const json& v = c.config[name];
  const bool ok = std::is_same_v<T, bool> ? v.is_boolean()
                  : std::is_integral_v<T> ? v.is_number_integer()
                                          : v.is_number();
  check<IoError>(ok, "{}: \"{}\" is {}, not a {}", c.config_path, name, v.dump(),
                 std::is_same_v<T, bool> ? "boolean" : "number");
  return v.get<T>();
}

std::vector<std::string> read_labels(const HfCheckpoint& c) {
  std::vector<std::string> labels;
  if (!c.config.contains("id2label")) {
    const std::int64_t n = key<std::int64_t>(c, "num_labels", 2);
    for (std::int64_t i = 0; i < n; ++i) labels.push_back(fmt::format("LABEL_{}", i));
    return labels;
  }
  const json& m = c.config["id2label"];
  check<IoError>(m.is_object() && !m.empty() && m.size() <= static_cast<std::size_t>(kMaxVocab),
                 "{}: \"id2label\" is not a map of class ids to names", c.config_path);
  labels.resize(m.size());
  for (const auto& [id, name] : m.items()) {
    std::size_t used = 0;
    long long i = -1;
    try {
      i = std::stoll(id, &used);
    } catch (const std::exception&) {
    }
    check<IoError>(used == id.size() && i >= 0 && static_cast<std::size_t>(i) < m.size() && name.is_string() &&
                       labels[static_cast<std::size_t>(i)].empty(),
                   "{}: \"id2label\" must name each class 0 to {} once, by a string", c.config_path, m.size() - 1);
    labels[static_cast<std::size_t>(i)] = name.get<std::string>();
  }
  return labels;
}

// Checks common to the encoders read here.
void check_encoder(const HfCheckpoint& c) {
  for (const char* flag : {"is_decoder", "add_cross_attention"})
    check<IoError>(!typed(c, flag, false), "{}: \"{}\" is true; encoders are read here", c.config_path, flag);
  const std::string problem = c.config.value("problem_type", json()).is_string() ? c.config["problem_type"] : "";
  check<IoError>(problem.empty() || problem == "single_label_classification",
                 "{}: \"problem_type\" is \"{}\"; single-label classification is read here", c.config_path, problem);
}

std::string activation(const HfCheckpoint& c, const char* name) {
  std::string act = key<std::string>(c, name, "gelu");
  check<IoError>(act == "gelu" || act == "relu", "{}: \"{}\" is \"{}\"; gelu (erf) and relu are read here",
                 c.config_path, name, act);
  return act;
}

// A model section of a post-LN encoder with learned positions, the
// embeddings' norm and a head over [CLS]: the keys every architecture here shares.
json encoder_model(const HfCheckpoint& c, std::int64_t d, std::int64_t heads, std::int64_t layers, std::int64_t ff,
                   double dropout, const std::string& act, double eps, const char* head, std::int64_t token_types) {
  check<IoError>(d % heads == 0, "{}: the width {} is not a multiple of the {} heads", c.config_path, d, heads);
  check<IoError>(eps > 0 && eps < 1, "{}: \"layer_norm_eps\" is {}, not in (0, 1)", c.config_path, eps);
  return {{"vocab_size", key<std::int64_t>(c, "vocab_size")},
          {"num_classes", static_cast<std::int64_t>(c.labels.size())},
          {"d_model", d},
          {"nhead", heads},
          {"num_layers", layers},
          {"dim_feedforward", ff},
          {"dropout", dropout},
          {"activation", act},
          {"layer_norm_eps", eps},
          {"norm_first", false},
          {"final_norm", false},
          {"positions", "learned"},
          {"max_len", key<std::int64_t>(c, "max_position_embeddings", 512)},
          {"pooling", "cls"},
          {"head", head},
          {"embedding_norm", true},
          {"token_types", token_types}};
}

// BERT's config keys, with the head given.
json bert_like_model(const HfCheckpoint& c, const std::string& head) {
  const std::string positions = key<std::string>(c, "position_embedding_type", "absolute");
  check<IoError>(positions == "absolute", "{}: \"position_embedding_type\" is \"{}\"; absolute is read here",
                 c.config_path, positions);
  return encoder_model(c, key<std::int64_t>(c, "hidden_size"), key<std::int64_t>(c, "num_attention_heads"),
                       key<std::int64_t>(c, "num_hidden_layers"), key<std::int64_t>(c, "intermediate_size"),
                       key<double>(c, "hidden_dropout_prob", 0.1), activation(c, "hidden_act"),
                       typed(c, "layer_norm_eps", 1e-12), head.c_str(), key<std::int64_t>(c, "type_vocab_size", 2));
}

json bert_model(const HfCheckpoint& c) { return bert_like_model(c, "tanh"); }

// ELECTRA's discriminator: BERT's layers without a pooler, its
// classification head a dense layer with GELU (whatever the layers' own
// activation, as transformers' ElectraClassificationHead). Read where its
// embeddings are as wide as its layers (no embeddings_project).
json electra_model(const HfCheckpoint& c) {
  const std::int64_t e = key<std::int64_t>(c, "embedding_size", 128), d = key<std::int64_t>(c, "hidden_size");
  check<IoError>(e == d,
                 "{}: \"embedding_size\" is {} and \"hidden_size\" {}; an ELECTRA whose embeddings are as wide as "
                 "its layers is read here (no embeddings_project)",
                 c.config_path, e, d);
  return bert_like_model(c, "gelu");
}

// RoBERTa: BERT's layers, with one token type, positions counted from the
// pad id + 1 (rows 0 and 1 unused), and its classifier's own dense layer
// (tanh) in place of the pooler.
json roberta_model(const HfCheckpoint& c) {
  json m = bert_model(c);
  const std::int64_t offset = typed<std::int64_t>(c, "pad_token_id", 1) + 1;
  check<IoError>(offset > 0 && offset < m["max_len"].get<std::int64_t>(),
                 "{}: \"pad_token_id\" is {}; RoBERTa counts positions from it, and {} positions do not reach past it",
                 c.config_path, offset - 1, m["max_len"].dump());
  m["position_offset"] = offset;
  return m;
}

json bert_config(const json& m) {
  return {{"hidden_size", m["d_model"]},
          {"num_hidden_layers", m["num_layers"]},
          {"num_attention_heads", m["nhead"]},
          {"intermediate_size", m["dim_feedforward"]},
          {"hidden_act", m["activation"]},
          {"hidden_dropout_prob", m["dropout"]},
          {"attention_probs_dropout_prob", m["dropout"]},
          {"type_vocab_size", m["token_types"]},
          {"layer_norm_eps", m["layer_norm_eps"]},
          {"position_embedding_type", "absolute"}};
}

json electra_config(const json& m) {
  json c = bert_config(m);
  c["embedding_size"] = m["d_model"];
  return c;
}

json roberta_config(const json& m) {
  json c = bert_config(m);
  c["pad_token_id"] = m["position_offset"].get<std::int64_t>() - 1;
  return c;
}

// DistilBERT: BERT without token types or pooler, its LayerNorms' eps fixed
// at 1e-12, and a ReLU layer ("pre_classifier") before its classifier.
json distilbert_model(const HfCheckpoint& c) {
  check<IoError>(!typed(c, "sinusoidal_pos_embds", false),
                 "{}: \"sinusoidal_pos_embds\" is true; learned positions are read here", c.config_path);
  return encoder_model(c, key<std::int64_t>(c, "dim", 768), key<std::int64_t>(c, "n_heads", 12),
                       key<std::int64_t>(c, "n_layers", 6), key<std::int64_t>(c, "hidden_dim", 3072),
                       key<double>(c, "dropout", 0.1), activation(c, "activation"), 1e-12, "relu", 0);
}

json distilbert_config(const json& m) {
  return {{"dim", m["d_model"]},
          {"n_layers", m["num_layers"]},
          {"n_heads", m["nhead"]},
          {"hidden_dim", m["dim_feedforward"]},
          {"activation", m["activation"]},
          {"dropout", m["dropout"]},
          {"attention_dropout", m["dropout"]},
          {"sinusoidal_pos_embds", false}};
}

// A module of the checkpoint (its .weight and .bias) and multihead's name for it.
struct Part {
  std::string hf, ours;
};

// What differs between the architectures read here.
struct Architecture {
  std::string model_type, base;                 // "bert"; the base model's attribute in a model with a head
  std::string classifier;                       // the architecture with a classification head
  std::vector<std::string> encoders;            // architectures read as an encoder alone
  std::string tokenizer_kind, tokenizer_class;  // "wordpiece", "BertTokenizer"
  std::vector<Part> input;                      // under the base model
  std::string layer;                            // each layer's prefix under the base model, {} its number
  std::vector<Part> layer_parts;
  // The head's parts under the base model (BERT's pooler), read where the
  // head beside it has no part of the same name.
  std::vector<Part> base_head;
  std::vector<Part> head;              // the head's parts beside it
  json (*model)(const HfCheckpoint&);  // config.json to a model section
  json (*config)(const json&);         // a model section to config.json's own keys
};

// BERT's names (RoBERTa's too).
const std::vector<Part> kBertInput = {{"embeddings.word_embeddings", "embedding"},
                                      {"embeddings.position_embeddings", "pos_embedding"},
                                      {"embeddings.token_type_embeddings", "token_type_embedding"},
                                      {"embeddings.LayerNorm", "embedding_norm"}};
const std::vector<Part> kBertLayer = {{"attention.self.query", "self_attn.query"},
                                      {"attention.self.key", "self_attn.key"},
                                      {"attention.self.value", "self_attn.value"},
                                      {"attention.output.dense", "self_attn.out_proj"},
                                      {"attention.output.LayerNorm", "norm1"},
                                      {"intermediate.dense", "linear1"},
                                      {"output.dense", "linear2"},
                                      {"output.LayerNorm", "norm2"}};

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> all = {
      {"bert",
       "bert",
       "BertForSequenceClassification",
       {"BertModel", "BertForPreTraining", "BertForMaskedLM"},
       "wordpiece",
       "BertTokenizer",
       kBertInput,
       "encoder.layer.{}.",
       kBertLayer,
       {{"pooler.dense", "pre_classifier"}},
       {{"classifier", "classifier"}},
       bert_model,
       bert_config},
      {"roberta",
       "roberta",
       "RobertaForSequenceClassification",
       {"RobertaModel", "RobertaForMaskedLM"},
       "hf_bpe",
       "RobertaTokenizer",
       kBertInput,
       "encoder.layer.{}.",
       kBertLayer,
       {{"pooler.dense", "pre_classifier"}},
       {{"classifier.dense", "pre_classifier"}, {"classifier.out_proj", "classifier"}},
       roberta_model,
       roberta_config},
      {"electra",
       "electra",
       "ElectraForSequenceClassification",
       {"ElectraModel", "ElectraForPreTraining"},
       "wordpiece",
       "ElectraTokenizer",
       kBertInput,
       "encoder.layer.{}.",
       kBertLayer,
       {},
       {{"classifier.dense", "pre_classifier"}, {"classifier.out_proj", "classifier"}},
       electra_model,
       electra_config},
      {"distilbert",
       "distilbert",
       "DistilBertForSequenceClassification",
       {"DistilBertModel", "DistilBertForMaskedLM"},
       "wordpiece",
       "BertTokenizer",
       {{"embeddings.word_embeddings", "embedding"},
        {"embeddings.position_embeddings", "pos_embedding"},
        {"embeddings.LayerNorm", "embedding_norm"}},
       "transformer.layer.{}.",
       {{"attention.q_lin", "self_attn.query"},
        {"attention.k_lin", "self_attn.key"},
        {"attention.v_lin", "self_attn.value"},
        {"attention.out_lin", "self_attn.out_proj"},
        {"sa_layer_norm", "norm1"},
        {"ffn.lin1", "linear1"},
        {"ffn.lin2", "linear2"},
        {"output_layer_norm", "norm2"}},
       {},
       {{"pre_classifier", "pre_classifier"}, {"classifier", "classifier"}},
       distilbert_model,
       distilbert_config},
  };
  return all;
}

const Architecture& architecture(const std::string& model_type, const std::string& where) {
  std::vector<std::string> known;
  for (const Architecture& a : architectures()) {
    if (a.model_type == model_type) return a;
    known.push_back(a.model_type);
  }
  known.push_back("gpt2");
  throw IoError(
      fmt::format("{}: \"model_type\" is \"{}\"; {} are read here", where, model_type, fmt::join(known, ", ")));
}

// The job a checkpoint is read as: a text classifier of its own shape.
json checkpoint_job(const HfCheckpoint& c, const Architecture& a) {
  check_encoder(c);
  json model = a.model(c);
  return {{"task", "text_classification"},
          {"title", fmt::format("{} ({})", fs::path(c.dir).filename().string(), c.architecture)},
          {"max_len", model["max_len"].get<std::int64_t>() - model.value("position_offset", std::int64_t{0})},
          {"data", {{"source", "csv"}, {"path", ""}}},
          {"tokenizer", {{"kind", a.tokenizer_kind}, {"vocab_size", model["vocab_size"]}}},
          {"model", model}};
}

// One tensor of the checkpoint, renamed, and the shape config.json implies for it.
struct Rename {
  std::string to;
  Shape shape;
};

// The shape of multihead's parameter `name` (module and .weight or .bias) in a model section.
Shape shape_of(const std::string& module, bool weight, const json& m) {
  const std::int64_t d = m["d_model"], F = m["dim_feedforward"];
  if (module == "embedding") return {m["vocab_size"], d};
  if (module == "pos_embedding") return {m["max_len"], d};
  if (module == "token_type_embedding") return {m["token_types"], d};
  if (module.ends_with("linear1")) return weight ? Shape{F, d} : Shape{F};
  if (module.ends_with("linear2")) return weight ? Shape{d, F} : Shape{d};
  if (module == "classifier") return weight ? Shape{m["num_classes"], d} : Shape{m["num_classes"]};
  const bool norm = module.ends_with("norm") || module.ends_with("norm1") || module.ends_with("norm2");
  return weight && !norm ? Shape{d, d} : Shape{d};
}

// The checkpoint's names to multihead's: `base`, those of the base model
// (without its prefix, which a model with a head puts before them), and
// `head`, those beside it. The query, key and value projections are joined
// into in_proj later.
struct Names {
  std::map<std::string, Rename> base, head;
};

Names checkpoint_names(const Architecture& a, const json& m, bool head) {
  Names names;
  auto add = [&](std::map<std::string, Rename>& to, const std::string& hf, const std::string& ours) {
    to[hf + ".weight"] = {ours + ".weight", shape_of(ours, true, m)};
    if (!ours.ends_with("embedding")) to[hf + ".bias"] = {ours + ".bias", shape_of(ours, false, m)};
  };
  for (const Part& p : a.input) add(names.base, p.hf, p.ours);
  for (std::int64_t i = 0; i < m["num_layers"].get<std::int64_t>(); ++i)
    for (const Part& p : a.layer_parts)
      add(names.base, fmt::format(fmt::runtime(a.layer), i) + p.hf, fmt::format("encoder.layers.{}.", i) + p.ours);
  for (const Part& p : a.base_head) {
    const bool beside = std::any_of(a.head.begin(), a.head.end(), [&](const Part& h) { return h.ours == p.ours; });
    if (!(head && beside)) add(names.base, p.hf, p.ours);
  }
  if (head)
    for (const Part& p : a.head) add(names.head, p.hf, p.ours);
  return names;
}

Tensor as_f32(Tensor t) {
  if (t.dtype() == DType::kF32) return t;
  Tensor out(t.shape());
  if (t.dtype() == DType::kBF16) {
    convert_bf16_to_f32(out.f32(), &t.data<BF16>()->bits, t.numel());
  } else {
    convert_f16_to_f32(out.f32(), &t.data<F16>()->bits, t.numel());
  }
  return out;
}

// in_proj of each layer: the query, key and value projections stacked (q, k, v), as nn.MultiheadAttention holds them.
void join_in_proj(TensorMap& out, std::int64_t layers) {
  for (std::int64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("encoder.layers.{}.self_attn.", i);
    for (const char* part : {"weight", "bias"}) {
      const Tensor& q = out.at(p + "query." + part);
      const std::int64_t n = q.numel();
      Shape shape = q.shape();
      shape[0] *= 3;
      Tensor joined(shape);
      std::int64_t at = 0;
      for (const char* w : {"query", "key", "value"}) {
        const Tensor& t = out.at(p + w + "." + part);
        std::copy(t.f32(), t.f32() + n, joined.f32() + at);
        at += n;
        out.erase(p + w + "." + part);
      }
      out[p + "in_proj_" + part] = std::move(joined);
    }
  }
}

// The architecture a run's model has, if any: the model keys every one
// here shares, then RoBERTa's (positions from an offset, one token type, a
// byte-level BPE tokenizer), BERT's (token types, a tanh head) or
// DistilBERT's (no token types, a ReLU head, eps 1e-12). ConfigError naming
// what differs.
const Architecture& run_architecture(const json& job) {
  check<ConfigError>(job.value("task", std::string()) == "text_classification",
                     "export --format hf writes text classifiers and language models; this run's task is {}",
                     job.value("task", std::string("?")));
  const json& m = job["model"];
  const std::pair<const char*, json> shape[] = {
      {"norm_first", false},    {"final_norm", false}, {"positions", "learned"}, {"pooling", "cls"},
      {"embedding_norm", true}, {"attention", "full"}, {"num_kv_heads", 0}};
  for (const auto& [key, want] : shape)
    check<ConfigError>(m.value(key, json()) == want,
                       "this run's model.{} is {}; a BERT, RoBERTa or DistilBERT checkpoint's is {} (export --format "
                       "hf writes models of their shape, as a checkpoint read from Hugging Face is)",
                       key, m.value(key, json()).dump(), want.dump());
  const std::int64_t types = m.value("token_types", 0);
  const std::string head = m.value("head", std::string());
  const std::string name = m.value("position_offset", 0) > 0 ? "roberta"
                           : types == 0                      ? "distilbert"
                           : head == "tanh"                  ? "bert"
                                                             : "electra";
  const Architecture& a = architecture(name, "the run");
  const std::string tokenizer = job["tokenizer"].value("kind", std::string());
  check<ConfigError>(tokenizer == a.tokenizer_kind, "this run's tokenizer is {}; a {} checkpoint's is {}", tokenizer,
                     name, a.tokenizer_kind);
  check<ConfigError>(name != "roberta" || types == 1,
                     "this run's model.token_types is {}; RoBERTa's (positions from an offset) is 1", types);
  const std::string want_head = name == "distilbert" ? "relu" : name == "electra" ? "gelu" : "tanh";
  check<ConfigError>(head == want_head,
                     "this run's model.head is {} with {} token types; BERT's and RoBERTa's is tanh and ELECTRA's "
                     "gelu, with token types, DistilBERT's relu without",
                     head, types);
  check<ConfigError>(name != "distilbert" || m.value("layer_norm_eps", 0.0) == 1e-12,
                     "this run's model.layer_norm_eps is {}; DistilBERT's is fixed at 1e-12",
                     m.value("layer_norm_eps", 0.0));
  return a;
}

json hf_config_of(const Architecture& a, const json& m, const std::vector<std::string>& labels,
                  const TokenFrame& frame) {
  json id2label = json::object(), label2id = json::object();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    id2label[std::to_string(i)] = labels[i];
    label2id[labels[i]] = i;
  }
  json c = {{"architectures", {a.classifier}},
            {"model_type", a.model_type},
            {"vocab_size", m["vocab_size"]},
            {"max_position_embeddings", m["max_len"]},
            {"pad_token_id", frame.pad},
            {"initializer_range", 0.02},
            {"id2label", id2label},
            {"label2id", label2id},
            {"dtype", "float32"}};
  c.update(a.config(m));
  return c;
}

// --- GPT-2 ------------------------------------------------------------------

// GPT-2: a language model of pre-LN decoder layers (causal self-attention
// and the feed-forward block, each after its LayerNorm), learned positions
// from 0, a final LayerNorm (ln_f), and the output layer tied to the token
// embeddings unless tie_word_embeddings says otherwise. Its Conv1D layers
// hold their weights as (in, out), the transpose of a Linear's.
const std::vector<std::string> kGpt2Architectures = {"GPT2LMHeadModel", "GPT2Model"};

std::string gpt2_activation(const HfCheckpoint& c) {
  std::string act = key<std::string>(c, "activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return "gelu_tanh";
  check<IoError>(act == "gelu" || act == "relu",
                 "{}: \"activation_function\" is \"{}\"; gelu_new, gelu_pytorch_tanh, gelu and relu are read here",
                 c.config_path, act);
  return act;
}

json gpt2_job(const HfCheckpoint& c) {
  for (const char* flag : {"add_cross_attention", "scale_attn_by_inverse_layer_idx"})
    check<IoError>(!typed(c, flag, false), "{}: \"{}\" is true, which is not read here", c.config_path, flag);
  check<IoError>(typed(c, "scale_attn_weights", true),
                 "{}: \"scale_attn_weights\" is false; attention scaled by 1/sqrt(head width) is read here",
                 c.config_path);
  const std::int64_t d = key<std::int64_t>(c, "n_embd", 768), heads = key<std::int64_t>(c, "n_head", 12);
  check<IoError>(d % heads == 0, "{}: the width {} is not a multiple of the {} heads", c.config_path, d, heads);
  const double eps = typed(c, "layer_norm_epsilon", 1e-5);
  check<IoError>(eps > 0 && eps < 1, "{}: \"layer_norm_epsilon\" is {}, not in (0, 1)", c.config_path, eps);
  const json model = {{"vocab_size", key<std::int64_t>(c, "vocab_size")},
                      {"d_model", d},
                      {"nhead", heads},
                      {"num_layers", key<std::int64_t>(c, "n_layer", 12)},
                      {"dim_feedforward", key<std::int64_t>(c, "n_inner", 4 * d)},
                      {"dropout", key<double>(c, "resid_pdrop", 0.1)},
                      {"activation", gpt2_activation(c)},
                      {"layer_norm_eps", eps},
                      {"norm_first", true},
                      {"final_norm", true},
                      {"positions", "learned"},
                      {"max_len", key<std::int64_t>(c, "n_positions", 1024)},
                      {"tie_embeddings", typed(c, "tie_word_embeddings", true)}};
  return {{"task", "language_modeling"},
          {"title", fmt::format("{} ({})", fs::path(c.dir).filename().string(), c.architecture)},
          {"data", {{"path", ""}}},
          {"tokenizer", {{"kind", "hf_bpe"}, {"vocab_size", model["vocab_size"]}}},
          {"model", model},
          // The context a continuation is generated within: all the positions the model has.
          {"train", {{"seq_len", model["max_len"]}}}};
}

// GPT-2's names (under "transformer." in GPT2LMHeadModel) to multihead's,
// with the shape config.json implies and whether the tensor is a Conv1D
// weight, (in, out), to transpose.
struct Gpt2Rename {
  std::string to;
  Shape shape;
  bool transpose;
};

std::map<std::string, Gpt2Rename> gpt2_names(const json& m) {
  const std::int64_t d = m["d_model"], F = m["dim_feedforward"], V = m["vocab_size"];
  std::map<std::string, Gpt2Rename> names = {{"wte.weight", {"embedding.weight", {V, d}, false}},
                                             {"wpe.weight", {"pos_embedding.weight", {m["max_len"], d}, false}},
                                             {"ln_f.weight", {"encoder.norm.weight", {d}, false}},
                                             {"ln_f.bias", {"encoder.norm.bias", {d}, false}}};
  for (std::int64_t i = 0; i < m["num_layers"].get<std::int64_t>(); ++i) {
    const std::string h = fmt::format("h.{}.", i), e = fmt::format("encoder.layers.{}.", i);
    for (const auto& [from, to] : {std::pair{"ln_1", "norm1"}, std::pair{"ln_2", "norm2"}}) {
      names[h + from + ".weight"] = {e + to + ".weight", {d}, false};
      names[h + from + ".bias"] = {e + to + ".bias", {d}, false};
    }
    names[h + "attn.c_attn.weight"] = {e + "self_attn.in_proj_weight", {3 * d, d}, true};
    names[h + "attn.c_attn.bias"] = {e + "self_attn.in_proj_bias", {3 * d}, false};
    names[h + "attn.c_proj.weight"] = {e + "self_attn.out_proj.weight", {d, d}, true};
    names[h + "attn.c_proj.bias"] = {e + "self_attn.out_proj.bias", {d}, false};
    names[h + "mlp.c_fc.weight"] = {e + "linear1.weight", {F, d}, true};
    names[h + "mlp.c_fc.bias"] = {e + "linear1.bias", {F}, false};
    names[h + "mlp.c_proj.weight"] = {e + "linear2.weight", {d, F}, true};
    names[h + "mlp.c_proj.bias"] = {e + "linear2.bias", {d}, false};
  }
  return names;
}

Tensor transposed(const Tensor& t) {
  const std::int64_t rows = t.dim(0), cols = t.dim(1);
  Tensor out = Tensor::empty({cols, rows});
  transpose(out.f32(), rows, t.f32(), cols, rows, cols);
  return out;
}

// Takes `all` by value: its tensors are moved out (clang-tidy 14 misses the
// moves through the structured binding).
TensorMap gpt2_tensors(const HfCheckpoint& c, TensorMap all) {  // NOLINT(performance-unnecessary-value-param)
  const json& m = c.job["model"];
  const bool tied = m["tie_embeddings"].get<bool>();
  const std::map<std::string, Gpt2Rename> names = gpt2_names(m);
  TensorMap out;
  for (auto& [name, t] : all) {
    const std::string n = name.starts_with("transformer.") ? name.substr(12) : name;
    // The causal mask buffers of older checkpoints, and a tied output layer's copy of wte.
    if ((n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias")) && !names.contains(n)) continue;
    if (n == "lm_head.weight") {
      if (tied) continue;
      check<IoError>(t.shape() == Shape({m["vocab_size"], m["d_model"]}),
                     "{}: 'lm_head.weight' has shape {}, but config.json implies ({}, {})", c.weights_path,
                     shape_text(t.shape()), m["vocab_size"].dump(), m["d_model"].dump());
      out["lm_head.weight"] = as_f32(std::move(t));
      continue;
    }
    const auto it = names.find(n);
    check<IoError>(it != names.end(), "{}: '{}' is no tensor of a {}", c.weights_path, name, c.architecture);
    const Gpt2Rename& r = it->second;
    check<IoError>(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16,
                   "{}: '{}' is {}, not a float tensor", c.weights_path, name, dtype_name(t.dtype()));
    const Shape stored = r.transpose ? Shape{r.shape[1], r.shape[0]} : r.shape;
    check<IoError>(t.shape() == stored, "{}: '{}' has shape {}, but config.json implies {}", c.weights_path, name,
                   shape_text(t.shape()), shape_text(stored));
    out[r.to] = r.transpose ? transposed(as_f32(std::move(t))) : as_f32(std::move(t));
  }
  for (const auto& [from, r] : names)
    check<IoError>(out.contains(r.to), "{}: lacks '{}' of shape {}", c.weights_path, from,
                   shape_text(r.transpose ? Shape{r.shape[1], r.shape[0]} : r.shape));
  check<IoError>(tied || out.contains("lm_head.weight"),
                 "{}: lacks 'lm_head.weight' (\"tie_word_embeddings\" is false)", c.weights_path);
  return out;
}

}  // namespace

namespace {

// What export writes: the tensors under transformers' names, config.json and tokenizer_config.json.
struct Written {
  TensorMap tensors;
  json config, tokenizer_config;
};

// A run tensor, checked to be there in the shape its config implies.
const Tensor& run_tensor(const TensorMap& weights, const std::string& name, const Shape& shape) {
  const auto it = weights.find(name);
  check<ConfigError>(it != weights.end(), "the run's weights lack '{}'", name);
  check<ConfigError>(it->second.shape() == shape, "the run's '{}' has shape {}, its config implies {}", name,
                     shape_text(it->second.shape()), shape_text(shape));
  return it->second;
}

Written encoder_written(const json& job, const TensorMap& weights, const std::vector<std::string>& labels,
                        const Tokenizer& tokenizer) {
  const Architecture& a = run_architecture(job);
  const json& m = job["model"];
  check<ConfigError>(static_cast<std::int64_t>(labels.size()) == m["num_classes"].get<std::int64_t>(),
                     "the run names {} classes, its model has {}", labels.size(), m["num_classes"].dump());
  // In transformers' names: the base model's under its prefix, in_proj split into query, key and value.
  Written w;
  const std::int64_t d = m["d_model"];
  const Names names = checkpoint_names(a, m, true);
  for (const auto* table : {&names.base, &names.head}) {
    for (const auto& [hf, r] : *table) {
      const std::string name = table == &names.head ? hf : a.base + "." + hf;
      const std::size_t qkv = r.to.find("self_attn.");
      const std::string part =
          qkv == std::string::npos ? "" : r.to.substr(qkv + 10, r.to.find('.', qkv + 10) - qkv - 10);
      if (part == "query" || part == "key" || part == "value") {
        const bool weight = r.to.ends_with(".weight");
        const Tensor& joined = weights.at(r.to.substr(0, qkv + 10) + (weight ? "in_proj_weight" : "in_proj_bias"));
        const std::int64_t slice = part == "query" ? 0 : part == "key" ? 1 : 2, n = weight ? d * d : d;
        w.tensors[name] =
            Tensor::from(r.shape, std::span<const float>(joined.f32() + slice * n, static_cast<std::size_t>(n)));
        continue;
      }
      w.tensors[name] = run_tensor(weights, r.to, r.shape).clone();
    }
  }
  const TokenFrame f = tokenizer.frame();
  w.config = hf_config_of(a, m, labels, f);
  w.tokenizer_config = {{"tokenizer_class", a.tokenizer_class},
                        {"model_max_length", job["max_len"]},
                        {"pad_token", tokenizer.piece(f.pad)},
                        {"unk_token", tokenizer.piece(f.unk)}};
  if (!f.before.empty()) w.tokenizer_config["cls_token"] = tokenizer.piece(f.before.front());
  if (!f.after.empty()) w.tokenizer_config["sep_token"] = tokenizer.piece(f.after.front());
  return w;
}

// A language model of GPT-2's shape (as a GPT-2 checkpoint is read) as GPT2LMHeadModel.
Written gpt2_written(const json& job, const TensorMap& weights, const Tokenizer& tokenizer) {
  const json& m = job["model"];
  const std::pair<const char*, json> shape[] = {{"norm_first", true},  {"final_norm", true}, {"positions", "learned"},
                                                {"attention", "full"}, {"num_kv_heads", 0},  {"embedding_norm", false}};
  for (const auto& [key, want] : shape)
    check<ConfigError>(m.value(key, json()) == want,
                       "this run's model.{} is {}; a GPT-2 checkpoint's is {} (export --format hf writes language "
                       "models of its shape, as a GPT-2 read from Hugging Face is)",
                       key, m.value(key, json()).dump(), want.dump());
  const std::string tokenizer_kind = job["tokenizer"].value("kind", std::string());
  check<ConfigError>(tokenizer_kind == "hf_bpe", "this run's tokenizer is {}; a GPT-2 checkpoint's is hf_bpe",
                     tokenizer_kind);
  Written w;
  for (const auto& [hf, r] : gpt2_names(m)) {
    const Tensor& t = run_tensor(weights, r.to, r.shape);
    w.tensors["transformer." + hf] = r.transpose ? transposed(t) : t.clone();
  }
  const bool tied = m["tie_embeddings"].get<bool>();
  if (!tied)
    w.tensors["lm_head.weight"] = run_tensor(weights, "lm_head.weight", {m["vocab_size"], m["d_model"]}).clone();
  const std::string act = m["activation"];
  const json& dropout = m["dropout"];
  w.config = {{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", m["vocab_size"]},
              {"n_positions", m["max_len"]},
              {"n_embd", m["d_model"]},
              {"n_layer", m["num_layers"]},
              {"n_head", m["nhead"]},
              {"n_inner", m["dim_feedforward"]},
              {"activation_function", act == "gelu_tanh" ? "gelu_new" : act},
              {"resid_pdrop", dropout},
              {"embd_pdrop", dropout},
              {"attn_pdrop", dropout},
              {"layer_norm_epsilon", m["layer_norm_eps"]},
              {"tie_word_embeddings", tied},
              {"scale_attn_weights", true},
              {"initializer_range", 0.02},
              {"dtype", "float32"}};
  w.tokenizer_config = {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", m["max_len"]}};
  // GPT-2's one special token, where the vocabulary has it: the start and end of a text.
  for (std::int64_t id = tokenizer.vocab_size() - 1; id >= 0; --id) {
    if (tokenizer.piece(id) != "<|endoftext|>") continue;
    w.config["bos_token_id"] = w.config["eos_token_id"] = id;
    for (const char* k : {"bos_token", "eos_token", "unk_token"}) w.tokenizer_config[k] = "<|endoftext|>";
    break;
  }
  return w;
}

}  // namespace

std::string write_hf_checkpoint(const std::string& dir, const json& job, const TensorMap& weights,
                                const std::vector<std::string>& labels, const Tokenizer& tokenizer) {
  const Written w = job.value("task", std::string()) == "language_modeling"
                        ? gpt2_written(job, weights, tokenizer)
                        : encoder_written(job, weights, labels, tokenizer);
  check<ConfigError>(!fs::exists(fs::symlink_status(dir)) || (fs::is_directory(dir) && fs::is_empty(dir)),
                     "{} exists and is not an empty directory; export writes a new one", dir);
  // Beside dir, of a name no other process uses: removed on failure, as this call made it.
  const fs::path partial = fmt::format("{}.partial-{}", fs::path(dir).lexically_normal().string(), ::getpid());
  check<IoError>(!fs::exists(fs::symlink_status(partial)), "{} exists; export leaves it alone", partial.string());
  std::error_code ec;
  try {
    fs::create_directories(partial);
    write_safetensors((partial / "model.safetensors").string(), w.tensors, {{"format", "pt"}});
    write_file_atomic((partial / "config.json").string(), w.config.dump(2) + "\n");
    tokenizer.save(partial.string());
    write_file_atomic((partial / "tokenizer_config.json").string(), w.tokenizer_config.dump(2) + "\n");
    if (fs::exists(dir)) fs::remove(dir);  // the empty directory checked above
    fs::rename(partial, dir);
  } catch (...) {
    fs::remove_all(partial, ec);
    throw;
  }
  return w.config["architectures"][0].get<std::string>();
}

namespace {

// model.safetensors, else pytorch_model.bin (read without running its pickle).
std::string weights_file(const std::string& dir) {
  for (const char* name : {"model.safetensors", "pytorch_model.bin"}) {
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(p)) return p.string();
  }
  throw IoError(fmt::format("{}: no model.safetensors or pytorch_model.bin", dir));
}

TensorMap read_weights(const std::string& path) {
  if (path.ends_with(".bin")) return read_torch_state_dict(path);
  return SafetensorsFile::read(path).all_tensors();
}

}  // namespace

bool is_hf_checkpoint(const std::string& dir) {
  const fs::path config = fs::path(dir) / "config.json";
  if (!fs::is_regular_file(config)) return false;
  // A run's config.json names its "task"; transformers' names its "model_type".
  const std::string head = read_file_prefix(config.string(), 1 << 20);
  const json j = json::parse(head, nullptr, false);
  return j.is_object() && j.contains("model_type") && !j.contains("task");
}

HfCheckpoint read_hf_checkpoint(const std::string& dir) {
  HfCheckpoint c;
  c.dir = dir;
  c.config_path = (fs::path(dir) / "config.json").string();
  c.config = read_json_object(c.config_path);
  c.model_type = key<std::string>(c, "model_type");
  const json arch = c.config.value("architectures", json::array());
  check<IoError>(arch.is_array() && arch.size() <= 1 && (arch.empty() || arch[0].is_string()),
                 "{}: \"architectures\" must name one architecture", c.config_path);
  if (c.model_type == "gpt2") {
    c.architecture = arch.empty() ? kGpt2Architectures.front() : arch[0].get<std::string>();
    check<IoError>(
        std::find(kGpt2Architectures.begin(), kGpt2Architectures.end(), c.architecture) != kGpt2Architectures.end(),
        "{}: \"architectures\" is [\"{}\"]; {} are read here", c.config_path, c.architecture,
        fmt::join(kGpt2Architectures, " and "));
    c.job = gpt2_job(c);
    c.weights_path = weights_file(dir);
    return c;
  }
  const Architecture& a = architecture(c.model_type, c.config_path);
  c.architecture = arch.empty() ? a.encoders.front() : arch[0].get<std::string>();
  c.has_head = c.architecture == a.classifier;
  check<IoError>(c.has_head || std::find(a.encoders.begin(), a.encoders.end(), c.architecture) != a.encoders.end(),
                 "{}: \"architectures\" is [\"{}\"]; {} and {} are read here", c.config_path, c.architecture,
                 a.encoders.front(), a.classifier);
  c.labels = read_labels(c);
  c.job = checkpoint_job(c, a);
  // sentence-transformers' length limit, where the directory is one of its models.
  const fs::path st = fs::path(dir) / "sentence_bert_config.json";
  if (fs::exists(st)) {
    const json j = read_json_object(st.string());
    const json n = j.value("max_seq_length", json());
    check<IoError>(n.is_null() || (n.is_number_integer() && n.get<std::int64_t>() > 2 &&
                                   n.get<std::int64_t>() <= c.job["max_len"].get<std::int64_t>()),
                   "{}: \"max_seq_length\" is {}, not a length the model's positions cover", st.string(), n.dump());
    if (n.is_number_integer()) c.job["max_len"] = n;
  }
  c.weights_path = weights_file(dir);
  return c;
}

TensorMap hf_model_tensors(const HfCheckpoint& c) {
  TensorMap all = read_weights(c.weights_path);
  if (c.model_type == "gpt2") return gpt2_tensors(c, std::move(all));
  const json& model = c.job["model"];
  const Architecture& a = architecture(c.model_type, c.config_path);
  const Names names = checkpoint_names(a, model, c.has_head);
  TensorMap out;
  for (auto& [name, t] : all) {
    // The base model's tensors under its prefix (a model with a head) or none (the base model alone).
    const std::string n = name.starts_with(a.base + ".") ? name.substr(a.base.size() + 1) : name;
    // Buffers and pre-training heads, which transformers does not read into these models either.
    if (n == "embeddings.position_ids" || n.starts_with("cls.") || n.starts_with("vocab_") ||
        n.starts_with("lm_head.") || n.starts_with("discriminator_predictions."))
      continue;
    const Rename* r = nullptr;
    if (const auto b = names.base.find(n); b != names.base.end()) r = &b->second;
    if (const auto h = names.head.find(name); !r && n == name && h != names.head.end()) r = &h->second;
    check<IoError>(r != nullptr, "{}: '{}' is no tensor of a {}", c.weights_path, name, c.architecture);
    check<IoError>(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16,
                   "{}: '{}' is {}, not a float tensor", c.weights_path, name, dtype_name(t.dtype()));
    check<IoError>(t.shape() == r->shape, "{}: '{}' has shape {}, but config.json implies {}", c.weights_path, name,
                   shape_text(t.shape()), shape_text(r->shape));
    out[r->to] = as_f32(std::move(t));
  }
  for (const auto* table : {&names.base, &names.head}) {
    for (const auto& [from, r] : *table) {
      // An encoder's checkpoint may lack BERT's pooler (add_pooling_layer=False).
      const bool optional = !c.has_head && r.to.starts_with("pre_classifier.");
      check<IoError>(optional || out.contains(r.to), "{}: lacks '{}' of shape {}", c.weights_path, from,
                     shape_text(r.shape));
    }
  }
  join_in_proj(out, model["num_layers"].get<std::int64_t>());
  return out;
}

}  // namespace multihead
