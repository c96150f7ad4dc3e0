// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/job_flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "multihead/core/error.h"

namespace multihead {

namespace {

using json = nlohmann::json;

constexpr std::string_view kAny = "";

}  // namespace

const std::vector<JobFlag>& job_flags() {
  static const std::vector<JobFlag> flags = {
      {"--epochs", "Passes over the training split (classification)", {{kAny, "train.epochs"}}},
      {"--steps",
       "Training steps (for epoch jobs: a cap that cuts the last epoch short)",
       {{kAny, "train.max_steps"}, {kAny, "train.steps"}},
       false,
       {},
       true},
      {"--source",
       "Data source: spamassassin, aclimdb, or a file: csv, tsv or jsonl (a preset's title and preprocessing "
       "then go back to the defaults)",
       {{kAny, "data.source"}},
       false,
       {"title", "data.strip_headers"}},
      {"--data", "Data path (folder or file)", {{kAny, "data.path"}}},
      {"--class-weights",
       "Weigh the loss by class: none, or balanced (n / (classes x the class's count))",
       {{"text_classification", "class_weights"}}},
      {"--text-column", "The column (CSV, TSV) or key (JSON Lines) that holds the text", {{kAny, "data.text_column"}}},
      {"--label-column",
       "The column (CSV, TSV) or key (JSON Lines) that holds the class",
       {{kAny, "data.label_column"}}},
      {"--d-model", "Model width", {{kAny, "model.d_model"}}},
      {"--num-heads", "Attention heads", {{kAny, "model.nhead"}}},
      {"--num-layers", "Encoder layers", {{kAny, "model.num_layers"}}},
      {"--dropout", "Dropout in every layer", {{kAny, "model.dropout"}}},
      {"--positions", "none, sinusoidal, learned, relative, rope or alibi", {{kAny, "model.positions"}}},
      {"--attention", "full, sliding_window, block_sparse or linear", {{kAny, "model.attention"}}},
      {"--num-kv-heads", "Key/value heads (grouped-query attention; 1: multi-query)", {{kAny, "model.num_kv_heads"}}},
      {"--window",
       "Sliding window: keys on each side of a query (-1: unlimited)",
       {{kAny, "model.window_left"}, {kAny, "model.window_right"}}},
      {"--block-size", "Block-sparse: positions per block", {{kAny, "model.sparse_block"}}},
      {"--max-len",
       "Tokens per example (classification) or window (language models)",
       {{"text_classification", "max_len"}, {"language_modeling", "train.seq_len"}}},
      {"--vocab-size", "Tokenizer vocabulary", {{kAny, "tokenizer.vocab_size"}, {kAny, "model.vocab_size"}}},
      {"--tokenizer", "sentencepiece, char or word", {{kAny, "tokenizer.kind"}}},
      {"--tokenizer-from",
       "A run directory whose tokenizer to take (default: --init-from's, when a run)",
       {{kAny, "tokenizer.from"}}},
      {"--init-from",
       "Start from these weights: a run directory or a safetensors state_dict (fine-tuning)",
       {{kAny, "train.init_from"}}},
      {"--init-skip",
       "Parameters --init-from leaves at their initialisation: a regex over names (a new head)",
       {{kAny, "train.init_skip"}}},
      {"--batch", "Sequences per step", {{kAny, "train.batch"}}},
      {"--lr", "Peak learning rate", {{kAny, "train.lr"}}},
      {"--optimizer", "adamw or sgd", {{kAny, "train.optimizer"}}},
      {"--schedule", "After warmup: constant, cosine, linear or inverse_sqrt", {{kAny, "train.schedule"}}},
      {"--warmup-steps", "Linear warmup steps (0: --warmup-ratio's share of the run)", {{kAny, "train.warmup_steps"}}},
      {"--warmup-ratio",
       "Linear warmup over this share of the run's steps, when --warmup-steps is 0",
       {{kAny, "train.warmup_ratio"}}},
      {"--clip-grad-norm", "Clip the global gradient norm (0: off)", {{kAny, "train.clip_grad_norm"}}},
      {"--weight-decay", "Weight decay", {{kAny, "train.weight_decay"}}},
      {"--grad-accumulation", "Micro-batches per step", {{kAny, "train.grad_accumulation"}}},
      {"--seed", "Seed of the splits, initialisation, shuffling and dropout", {{kAny, "train.seed"}}},
      {"--precision",
       "Activations kept in fp32, bf16 or fp16 (weights stay fp32; fp16 turns on loss scaling); products run in bf16 "
       "on CPUs with bf16 units, and widen to fp32 elsewhere",
       {{kAny, "train.precision"}},
       false,
       {"train.loss_scaling"}},
      {"--early-stopping",
       "Stop after this many validations in a row without a lower validation loss, keeping the best one's weights "
       "(checkpoints/best.safetensors: what the run is tested and answers with); 0: off",
       {{kAny, "train.early_stopping"}}},
      {"--checkpoint-layers", "Gradient checkpointing per layer", {{kAny, "train.checkpoint_layers"}}, true},
      {"--checkpoint-every",
       "Steps between checkpoints (0: after each epoch or evaluation and at the end)",
       {{kAny, "train.checkpoint_every"}}},
      {"--keep-checkpoints",
       "Keep every checkpoint as checkpoints/step_N.safetensors beside last.safetensors",
       {{kAny, "train.keep_checkpoints"}},
       true},
      {"--on-nonfinite",
       "A NaN or Inf loss or gradient: stop (default) or skip the update",
       {{kAny, "train.on_nonfinite"}}},
      {"--allreduce",
       "Under mpirun, how gradients are summed over the ranks: mpi (MPI_Allreduce, default) or ordered (a "
       "fixed-order sum, the same bits on every run)",
       {{kAny, "train.allreduce"}}},
      {"--allreduce-overlap",
       "Under mpirun, start summing a layer's gradients as soon as its backward is done (default true)",
       {{kAny, "train.allreduce_overlap"}}},
      {"--threads", "Threads (0: all cores)", {{kAny, "threads"}}},
  };
  return flags;
}

namespace {

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    parts.emplace_back(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

// The value at `path` (json or const json), or null.
template <typename Json>
Json* find_path(Json& j, std::string_view path) {
  Json* at = &j;
  for (const std::string& part : split_path(path)) {
    if (!at->is_object()) return nullptr;
    const auto it = at->find(part);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

// The value at `path`, made (with the objects above it) when absent.
json& make_path(json& j, std::string_view path) {
  json* at = &j;
  for (const std::string& part : split_path(path)) {
    if (!at->is_object()) *at = json::object();
    at = &(*at)[part];
  }
  return *at;
}

void erase_path(json& j, std::string_view path) {
  const std::size_t dot = path.rfind('.');
  const bool top = dot == std::string_view::npos;
  json* parent = top ? &j : find_path(j, path.substr(0, dot));
  if (parent && parent->is_object()) parent->erase(std::string(path.substr(top ? 0 : dot + 1)));
}

// The keys `f` sets in a job of kind `task` whose config is `config`; none
// when it does not apply to that kind.
std::vector<std::string> flag_keys(const JobFlag& f, std::string_view task, const json& config) {
  std::vector<std::string> own, general;
  for (const auto& [kind, path] : f.keys) {
    if (kind == task) own.emplace_back(path);
    else if (kind.empty()) general.emplace_back(path);
  }
  if (!own.empty()) return own;
  if (f.first_present) {
    for (const std::string& path : general)
      if (find_path(config, path)) return {path};
    return {};
  }
  if (general.empty() || !find_path(config, general.front())) return {};
  std::vector<std::string> present;
  for (const std::string& path : general)
    if (find_path(config, path)) present.push_back(path);
  return present;
}

// `text` as a value of the type of `current`, the value it replaces (null
// for a key the config does not have: then JSON, or else a string).
json typed_value(const std::string& text, const json* current, const std::string& what) {
  if (current && current->is_string()) return text;
  if (current && current->is_boolean()) {
    if (text == "true" || text == "1") return true;
    if (text == "false" || text == "0") return false;
    throw ConfigError(fmt::format("{}: expected true or false, got '{}'", what, clip_text(text)));
  }
  if (current && current->is_number_integer()) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    check<ConfigError>(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
                       "{}: expected an integer, got '{}'", what, clip_text(text));
    return v;
  }
  if (current && current->is_number()) {
    // nan and inf are read as such, for the key's bounds to refuse by name.
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    check<ConfigError>(!text.empty() && end == text.c_str() + text.size(), "{}: expected a number, got '{}'", what,
                       clip_text(text));
    return v;
  }
  json parsed = json::parse(text, nullptr, false);
  if (!parsed.is_discarded()) return parsed;
  check<ConfigError>(!current || current->is_null(), "{}: expected JSON, got '{}'", what, clip_text(text));
  return text;
}

const JobFlag& find_flag(std::string_view name) {
  const auto& flags = job_flags();
  const auto it = std::find_if(flags.begin(), flags.end(), [&](const JobFlag& f) { return f.flag == name; });
  check<ConfigError>(it != flags.end(), "unknown flag {}", name);
  return *it;
}

const char* job_noun(const Job& job) {
  return std::visit([](const auto& j) { return std::decay_t<decltype(j)>::kNoun; }, job);
}

}  // namespace

namespace {

// What a key is derived from, for the keys a job sets itself before it
// trains (a config.json records them), or null.
const char* derived_from(std::string_view task, std::string_view path) {
  const bool images = task == ImageClassificationJob::kTask;
  if (path == "model.vocab_size" && !images)
    return "its tokenizer or its data (--vocab-size sizes a tokenizer it trains)";
  if (path == "model.num_classes" && !images) return "its data's labels (or has no classes)";
  if (path == "train.total_steps") return "train.steps, or its epochs and the data's size";
  return nullptr;
}

}  // namespace

Job apply_settings(const Job& job, const std::vector<JobSetting>& settings) {
  const std::string task = job_task(job);
  json config = to_json(job);
  // Every flag the kind lacks, named at once, in the table's order.
  std::vector<std::string_view> refused;
  for (const JobFlag& f : job_flags()) {
    const bool given =
        std::any_of(settings.begin(), settings.end(), [&](const JobSetting& s) { return s.flag == f.flag; });
    if (given && flag_keys(f, task, config).empty()) refused.push_back(f.flag);
  }
  if (!refused.empty()) {
    const std::string_view last = refused.back();
    refused.pop_back();
    const std::string names =
        refused.empty() ? std::string(last) : fmt::format("{} and {}", fmt::join(refused, ", "), last);
    throw ConfigError(fmt::format("{} {} not apply to {}", names, refused.empty() ? "does" : "do", job_noun(job)));
  }
  // Every setting in order on the config written out whole, then read back
  // once, as a config is: a value is checked as the key it sets, and keys
  // checked against each other (d_model and nhead) see every setting.
  // A key a setting gave is kept when a later one changes what it follows
  // (--set title=X --source csv keeps X).
  std::vector<std::string> given;
  const auto rederive = [&](const JobFlag& f) {
    for (std::string_view k : f.rederives)
      if (std::find(given.begin(), given.end(), k) == given.end()) erase_path(config, k);
  };
  for (const JobSetting& s : settings) {
    if (s.flag == "--set") {
      const std::size_t eq = s.value.find('=');
      check<ConfigError>(eq != std::string::npos && eq > 0,
                         "--set takes path=value (a key path such as model.d_model), got '{}'", clip_text(s.value));
      const std::string path = s.value.substr(0, eq);
      if (const char* from = derived_from(task, path))
        throw ConfigError(
            fmt::format("--set {}: the job sets it from {}, so a value given here would be replaced", path, from));
      json value = typed_value(s.value.substr(eq + 1), find_path(config, path), "--set " + path);
      const json* before = find_path(config, path);
      const bool changed = !before || *before != value;
      make_path(config, path) = std::move(value);
      given.push_back(path);
      if (changed)
        for (const JobFlag& f : job_flags())
          if (f.keys.front().second == path) rederive(f);
      continue;
    }
    const JobFlag& f = find_flag(s.flag);
    bool changed = false;
    for (const std::string& path : flag_keys(f, task, config)) {
      json value = typed_value(s.value, find_path(config, path), s.flag);
      const json* before = find_path(config, path);
      changed = changed || !before || *before != value;
      make_path(config, path) = std::move(value);
      given.push_back(path);
    }
    if (changed) rederive(f);
  }
  return settings.empty() ? job : job_from_json(config, "the flags");
}

namespace {

template <std::size_t... I>
std::vector<std::pair<std::string, std::vector<KeyDescription>>> kinds_keys(std::index_sequence<I...>) {
  return {{std::variant_alternative_t<I, Job>::kTask, describe_keys<std::variant_alternative_t<I, Job>>()}...};
}

std::vector<std::string_view> flags_of(const std::string& path) {
  std::vector<std::string_view> out;
  for (const JobFlag& f : job_flags())
    for (const auto& [kind, p] : f.keys)
      if (p == path && std::find(out.begin(), out.end(), f.flag) == out.end()) out.push_back(f.flag);
  return out;
}

std::string tasks_cell(const JobKeyRow& r) {
  return r.tasks.size() == std::variant_size_v<Job> ? "all" : fmt::format("{}", fmt::join(r.tasks, ", "));
}

// A column of the row: the one value when every kind gives the same, else
// each kind's ("0.1 (text_classification); 0.02 (pronunciation)").
std::string cell(const JobKeyRow& r, std::string KeyDescription::*field) {
  bool same = true;
  for (const KeyDescription& k : r.by_task) same = same && k.*field == r.key.*field;
  if (same) return r.key.*field;
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < r.tasks.size(); ++i)
    parts.push_back(fmt::format("{} ({})", r.by_task[i].*field, r.tasks[i]));
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string default_cell(const JobKeyRow& r) { return cell(r, &KeyDescription::default_value); }

// What the key sets, and whether a resumed run may change it.
std::string description_cell(const JobKeyRow& r) {
  return cell(r, &KeyDescription::description) + (r.key.may_change_on_resume ? " (may change on resume)" : "");
}

}  // namespace

std::vector<JobKeyRow> job_key_rows() {
  std::vector<JobKeyRow> rows;
  for (const auto& [task, keys] : kinds_keys(std::make_index_sequence<std::variant_size_v<Job>>{})) {
    for (const KeyDescription& k : keys) {
      auto it = std::find_if(rows.begin(), rows.end(), [&](const JobKeyRow& r) { return r.key.path == k.path; });
      if (it == rows.end()) it = rows.insert(rows.end(), JobKeyRow{k, {}, {}});
      it->tasks.push_back(task);
      it->by_task.push_back(k);
    }
  }
  // The task key's default is each kind's own name: one row saying so.
  for (JobKeyRow& r : rows)
    if (r.key.path == "task") {
      r.key.type = "name";
      r.key.default_value = "text_classification";
      r.key.bounds = fmt::format("one of {}", fmt::join(job_tasks(), ", "));
      for (KeyDescription& k : r.by_task) k = r.key;
    }
  return rows;
}

std::string job_keys_markdown() {
  std::string md =
      "# Job configuration keys\n\n"
      "Every key of a job config (`multihead train --config`), generated by `multihead keys --markdown` from the\n"
      "key lists the configs are read, written and checked by (the settings structs' `keys`); a test checks that\n"
      "this file is current. A key that is absent keeps its default. Each flag of `multihead train` sets the keys\n"
      "it aliases, and `--set path=value` sets any key (`--set model.rope_theta=500000`); either is read and\n"
      "checked as the key it sets. `--resume` continues a run only with the keys it had, except those marked\n"
      "*may change on resume*; a key the run's config.json lacks (written before the key existed) counts as its\n"
      "default.\n\n"
      "| key | what it sets | type | default | bounds | flag | tasks |\n|---|---|---|---|---|---|---|\n";
  for (const JobKeyRow& r : job_key_rows()) {
    const std::vector<std::string_view> flags = flags_of(r.key.path);
    md += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} |\n", r.key.path, description_cell(r), r.key.type,
                      default_cell(r), cell(r, &KeyDescription::bounds), fmt::join(flags, ", "), tasks_cell(r));
  }
  return md;
}

std::string job_keys_text() {
  const std::vector<JobKeyRow> rows = job_key_rows();
  std::size_t wide_path = 0, wide_type = 0;
  for (const JobKeyRow& r : rows) {
    wide_path = std::max(wide_path, r.key.path.size());
    wide_type = std::max(wide_type, r.key.type.size());
  }
  std::string text = "Config keys (set any with --set path=value; docs/CONFIG.md lists the same):\n";
  for (const JobKeyRow& r : rows) {
    std::string line =
        fmt::format("  {:<{}}  {:<{}}  default {}", r.key.path, wide_path, r.key.type, wide_type, default_cell(r));
    if (const std::string bounds = cell(r, &KeyDescription::bounds); !bounds.empty()) line += ", " + bounds;
    if (r.tasks.size() != std::variant_size_v<Job>) line += " [" + tasks_cell(r) + "]";
    text += line + "\n" + std::string(wide_path + 4, ' ') + description_cell(r) + "\n";
  }
  return text;
}

}  // namespace multihead
