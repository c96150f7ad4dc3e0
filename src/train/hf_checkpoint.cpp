#include "multihead/train/hf_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <regex>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/kernels/half.h"

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

std::vector<std::string> read_labels(const HfCheckpoint& c) {
  std::vector<std::string> labels;
  if (!c.config.contains("id2label")) {
    const std::int64_t n = c.config.value("num_labels", std::int64_t{2});
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

// The job a BERT checkpoint is read as: a text classifier of its own shape.
json bert_job(HfCheckpoint& c) {
  const std::string act = key<std::string>(c, "hidden_act", "gelu");
  check<IoError>(act == "gelu" || act == "relu",
                 "{}: \"hidden_act\" is \"{}\"; gelu (erf) and relu are read here", c.config_path, act);
  const std::string positions = key<std::string>(c, "position_embedding_type", "absolute");
  check<IoError>(positions == "absolute", "{}: \"position_embedding_type\" is \"{}\"; absolute is read here",
                 c.config_path, positions);
  for (const char* flag : {"is_decoder", "add_cross_attention"})
    check<IoError>(!c.config.value(flag, false), "{}: \"{}\" is true; encoders are read here", c.config_path, flag);
  const std::string problem = c.config.value("problem_type", json()).is_string() ? c.config["problem_type"] : "";
  check<IoError>(problem.empty() || problem == "single_label_classification",
                 "{}: \"problem_type\" is \"{}\"; single-label classification is read here", c.config_path, problem);
  const std::int64_t d = key<std::int64_t>(c, "hidden_size"), heads = key<std::int64_t>(c, "num_attention_heads");
  check<IoError>(d % heads == 0, "{}: \"hidden_size\" {} is not a multiple of \"num_attention_heads\" {}",
                 c.config_path, d, heads);
  const double eps = c.config.value("layer_norm_eps", 1e-12);
  check<IoError>(eps > 0 && eps < 1, "{}: \"layer_norm_eps\" is {}, not in (0, 1)", c.config_path, eps);
  const std::int64_t max_positions = key<std::int64_t>(c, "max_position_embeddings", 512);
  json model = {{"vocab_size", key<std::int64_t>(c, "vocab_size")},
                {"num_classes", static_cast<std::int64_t>(c.labels.size())},
                {"d_model", d},
                {"nhead", heads},
                {"num_layers", key<std::int64_t>(c, "num_hidden_layers")},
                {"dim_feedforward", key<std::int64_t>(c, "intermediate_size")},
                {"dropout", key<double>(c, "hidden_dropout_prob", 0.1)},
                {"activation", act},
                {"layer_norm_eps", eps},
                {"norm_first", false},
                {"final_norm", false},
                {"positions", "learned"},
                {"max_len", max_positions},
                {"pooling", "cls"},
                {"head", "tanh"},
                {"embedding_norm", true},
                {"token_types", key<std::int64_t>(c, "type_vocab_size", 2)}};
  return {{"task", "text_classification"},
          {"title", fmt::format("{} ({})", fs::path(c.dir).filename().string(), c.architecture)},
          {"max_len", max_positions},
          {"data", {{"source", "csv"}, {"path", ""}}},
          {"tokenizer", {{"kind", "wordpiece"}, {"vocab_size", model["vocab_size"]}}},
          {"model", model}};
}

// One tensor of the checkpoint, renamed, and the shape config.json implies for it.
struct Rename {
  std::string to;
  Shape shape;
};

// BERT's names (after the "bert." of a model with a head) to multihead's.
// The query, key and value projections are joined into in_proj later.
std::map<std::string, Rename> bert_names(const json& model, bool head) {
  const std::int64_t d = model["d_model"], F = model["dim_feedforward"], V = model["vocab_size"];
  std::map<std::string, Rename> m = {
      {"embeddings.word_embeddings.weight", {"embedding.weight", {V, d}}},
      {"embeddings.position_embeddings.weight", {"pos_embedding.weight", {model["max_len"], d}}},
      {"embeddings.token_type_embeddings.weight", {"token_type_embedding.weight", {model["token_types"], d}}},
      {"embeddings.LayerNorm.weight", {"embedding_norm.weight", {d}}},
      {"embeddings.LayerNorm.bias", {"embedding_norm.bias", {d}}},
      {"pooler.dense.weight", {"pre_classifier.weight", {d, d}}},
      {"pooler.dense.bias", {"pre_classifier.bias", {d}}}};
  if (head) {
    const std::int64_t C = model["num_classes"];
    m["classifier.weight"] = {"classifier.weight", {C, d}};
    m["classifier.bias"] = {"classifier.bias", {C}};
  }
  for (std::int64_t i = 0; i < model["num_layers"].get<std::int64_t>(); ++i) {
    const std::string from = fmt::format("encoder.layer.{}.", i), to = fmt::format("encoder.layers.{}.", i);
    for (const char* p : {"query", "key", "value"}) {
      m[from + "attention.self." + p + ".weight"] = {to + "self_attn." + p + ".weight", {d, d}};
      m[from + "attention.self." + p + ".bias"] = {to + "self_attn." + p + ".bias", {d}};
    }
    const std::pair<std::string, std::string> pairs[] = {{"attention.output.dense.", "self_attn.out_proj."},
                                                         {"attention.output.LayerNorm.", "norm1."},
                                                         {"intermediate.dense.", "linear1."},
                                                         {"output.dense.", "linear2."},
                                                         {"output.LayerNorm.", "norm2."}};
    for (const auto& [a, b] : pairs) {
      const Shape w = a == "intermediate.dense." ? Shape{F, d} : a == "output.dense." ? Shape{d, F} : Shape{d, d};
      const Shape bias = a == "intermediate.dense." ? Shape{F} : Shape{d};
      const bool norm = b.starts_with("norm");
      m[from + a + "weight"] = {to + b + "weight", norm ? Shape{d} : w};
      m[from + a + "bias"] = {to + b + "bias", bias};
    }
  }
  return m;
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

// The model keys of a BERT-shaped classifier, as bert_job writes them: a run
// whose model differs in one of them has no BERT checkpoint to be.
void check_bert_shape(const json& job) {
  check<ConfigError>(job.value("task", std::string()) == "text_classification",
                     "export --format hf writes text classifiers; this run's task is {}", job.value("task", std::string("?")));
  const json& m = job["model"];
  const std::pair<const char*, json> shape[] = {
      {"norm_first", false},     {"final_norm", false}, {"positions", "learned"},  {"pooling", "cls"},
      {"head", "tanh"},          {"embedding_norm", true}, {"position_offset", 0}, {"attention", "full"},
      {"num_kv_heads", 0}};
  for (const auto& [key, want] : shape)
    check<ConfigError>(m.value(key, json()) == want,
                       "this run's model.{} is {}; a BERT checkpoint's is {} (export --format hf writes models of "
                       "BERT's shape, as a checkpoint read from Hugging Face is)", key, m.value(key, json()).dump(),
                       want.dump());
  check<ConfigError>(m.value("token_types", 0) > 0, "this run's model has no token types (model.token_types); a BERT "
                     "checkpoint has them");
  check<ConfigError>(job["tokenizer"].value("kind", std::string()) == "wordpiece",
                     "this run's tokenizer is {}; a BERT checkpoint's is wordpiece", job["tokenizer"].value("kind", std::string()));
}

json hf_config_of(const json& m, const std::vector<std::string>& labels, const TokenFrame& frame) {
  json id2label = json::object(), label2id = json::object();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    id2label[std::to_string(i)] = labels[i];
    label2id[labels[i]] = i;
  }
  return {{"architectures", {"BertForSequenceClassification"}},
          {"model_type", "bert"},
          {"vocab_size", m["vocab_size"]},
          {"hidden_size", m["d_model"]},
          {"num_hidden_layers", m["num_layers"]},
          {"num_attention_heads", m["nhead"]},
          {"intermediate_size", m["dim_feedforward"]},
          {"hidden_act", m["activation"]},
          {"hidden_dropout_prob", m["dropout"]},
          {"attention_probs_dropout_prob", m["dropout"]},
          {"max_position_embeddings", m["max_len"]},
          {"type_vocab_size", m["token_types"]},
          {"layer_norm_eps", m["layer_norm_eps"]},
          {"position_embedding_type", "absolute"},
          {"pad_token_id", frame.pad},
          {"initializer_range", 0.02},
          {"id2label", id2label},
          {"label2id", label2id},
          {"dtype", "float32"}};
}

}  // namespace

void write_hf_checkpoint(const std::string& dir, const json& job, const TensorMap& weights,
                         const std::vector<std::string>& labels, const Tokenizer& tokenizer) {
  check_bert_shape(job);
  const json& m = job["model"];
  check<ConfigError>(static_cast<std::int64_t>(labels.size()) == m["num_classes"].get<std::int64_t>(),
                     "the run names {} classes, its model has {}", labels.size(), m["num_classes"].dump());
  // In transformers' names: the encoder's under "bert.", in_proj split into query, key and value.
  TensorMap out;
  const std::int64_t d = m["d_model"];
  for (const auto& [hf, r] : bert_names(m, true)) {
    const std::string name = hf.starts_with("classifier.") ? hf : "bert." + hf;
    const std::size_t qkv = r.to.find("self_attn.");
    const std::string part = qkv == std::string::npos ? "" : r.to.substr(qkv + 10, r.to.find('.', qkv + 10) - qkv - 10);
    if (part == "query" || part == "key" || part == "value") {
      const bool w = r.to.ends_with(".weight");
      const Tensor& joined = weights.at(r.to.substr(0, qkv + 10) + (w ? "in_proj_weight" : "in_proj_bias"));
      const std::int64_t slice = part == "query" ? 0 : part == "key" ? 1 : 2, n = w ? d * d : d;
      out[name] = Tensor::from(r.shape, std::span<const float>(joined.f32() + slice * n, static_cast<std::size_t>(n)));
      continue;
    }
    const auto it = weights.find(r.to);
    check<ConfigError>(it != weights.end(), "the run's weights lack '{}'", r.to);
    check<ConfigError>(it->second.shape() == r.shape, "the run's '{}' has shape {}, its config implies {}", r.to,
                       shape_str(it->second.shape()), shape_str(r.shape));
    out[name] = it->second.clone();
  }
  check<ConfigError>(!fs::exists(fs::symlink_status(dir)) || (fs::is_directory(dir) && fs::is_empty(dir)),
                     "{} exists and is not an empty directory; export writes a new one", dir);
  // Beside dir, of a name no other process uses: removed on failure, as this call made it.
  const fs::path partial = fmt::format("{}.partial-{}", fs::path(dir).lexically_normal().string(), ::getpid());
  check<IoError>(!fs::exists(fs::symlink_status(partial)), "{} exists; export leaves it alone", partial.string());
  std::error_code ec;
  try {
    fs::create_directories(partial);
    write_safetensors((partial / "model.safetensors").string(), out, {{"format", "pt"}});
    write_file_atomic((partial / "config.json").string(), hf_config_of(m, labels, tokenizer.frame()).dump(2) + "\n");
    tokenizer.save(partial.string());
    const TokenFrame f = tokenizer.frame();
    json tc = {{"tokenizer_class", "BertTokenizer"}, {"model_max_length", job["max_len"]},
               {"pad_token", tokenizer.piece(f.pad)}, {"unk_token", tokenizer.piece(f.unk)}};
    if (!f.before.empty()) tc["cls_token"] = tokenizer.piece(f.before.front());
    if (!f.after.empty()) tc["sep_token"] = tokenizer.piece(f.after.front());
    write_file_atomic((partial / "tokenizer_config.json").string(), tc.dump(2) + "\n");
    if (fs::exists(dir)) fs::remove(dir);  // the empty directory checked above
    fs::rename(partial, dir);
  } catch (...) {
    fs::remove_all(partial, ec);
    throw;
  }
}

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
  check<IoError>(c.model_type == "bert", "{}: \"model_type\" is \"{}\"; bert is read here", c.config_path,
                 c.model_type);
  c.architecture = arch.empty() ? "BertModel" : arch[0].get<std::string>();
  const std::vector<std::string> encoders = {"BertModel", "BertForPreTraining", "BertForMaskedLM"};
  c.has_head = c.architecture == "BertForSequenceClassification";
  check<IoError>(c.has_head || std::find(encoders.begin(), encoders.end(), c.architecture) != encoders.end(),
                 "{}: \"architectures\" is [\"{}\"]; BertModel and BertForSequenceClassification are read here",
                 c.config_path, c.architecture);
  c.labels = read_labels(c);
  c.job = bert_job(c);
  // sentence-transformers' length limit, where the directory is one of its models.
  const fs::path st = fs::path(dir) / "sentence_bert_config.json";
  if (fs::exists(st)) {
    const json j = read_json_object(st.string());
    const json n = j.value("max_seq_length", json());
    check<IoError>(n.is_null() || (n.is_number_integer() && n.get<std::int64_t>() > 2 &&
                                   n.get<std::int64_t>() <= c.job["model"]["max_len"].get<std::int64_t>()),
                   "{}: \"max_seq_length\" is {}, not a length the model's positions cover", st.string(), n.dump());
    if (n.is_number_integer()) c.job["max_len"] = n;
  }
  for (const char* name : {"model.safetensors", "pytorch_model.bin"}) {
    if (fs::exists(fs::path(dir) / name)) {
      c.weights_path = (fs::path(dir) / name).string();
      break;
    }
  }
  check<IoError>(!c.weights_path.empty(), "{}: no model.safetensors", dir);
  check<IoError>(c.weights_path.ends_with(".safetensors"),
                 "{}: the weights are a pickle file (pytorch_model.bin), which is not read here; save them as "
                 "model.safetensors (transformers' save_pretrained does by default)", c.weights_path);
  return c;
}

TensorMap hf_model_tensors(const HfCheckpoint& c) {
  const SafetensorsFile file = SafetensorsFile::read(c.weights_path);
  TensorMap all = file.all_tensors();
  const json& model = c.job["model"];
  const std::map<std::string, Rename> names = bert_names(model, c.has_head);
  TensorMap out;
  for (auto& [name, t] : all) {
    std::string n = name;
    if (n.starts_with("bert.")) n.erase(0, 5);
    // Buffers and pre-training heads, which transformers does not read into these models either.
    if (n == "embeddings.position_ids" || n.starts_with("cls.")) continue;
    const auto it = names.find(n);
    check<IoError>(it != names.end(), "{}: '{}' is no tensor of a {}", c.weights_path, name, c.architecture);
    check<IoError>(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16,
                   "{}: '{}' is {}, not a float tensor", c.weights_path, name, dtype_name(t.dtype()));
    check<IoError>(t.shape() == it->second.shape, "{}: '{}' has shape {}, but config.json implies {}", c.weights_path,
                   name, shape_str(t.shape()), shape_str(it->second.shape));
    out[it->second.to] = as_f32(std::move(t));
  }
  for (const auto& [from, r] : names) {
    // An encoder's checkpoint may lack BERT's pooler (add_pooling_layer=False).
    const bool optional = !c.has_head && r.to.starts_with("pre_classifier.");
    check<IoError>(optional || out.contains(r.to), "{}: lacks '{}' of shape {}", c.weights_path, from,
                   shape_str(r.shape));
  }
  join_in_proj(out, model["num_layers"].get<std::int64_t>());
  return out;
}

}  // namespace multihead
