// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/checkpoint.h"

#include <algorithm>

#include "multihead/nn/state_dict.h"
#include "multihead/train/hf_checkpoint.h"
#include "multihead/train/initial_weights.h"
#include "multihead/train/run_dir.h"

namespace multihead {

int check_checkpoint_format(const std::map<std::string, std::string>& meta, const std::string& source) {
  const auto it = meta.find("format");
  check<IoError>(it != meta.end() && it->second.starts_with("multihead-checkpoint-"), "{}: not a multihead checkpoint",
                 source);
  const std::string& format = it->second;
  const int version = format == "multihead-checkpoint-1"   ? 1
                      : format == "multihead-checkpoint-2" ? 2
                      : format == kCheckpointFormat        ? 3
                                                           : 0;
  check<IoError>(version > 0,
                 "{}: checkpoint format '{}' is not one this build reads (multihead-checkpoint-1, -2 or -3)", source,
                 clip_text(format));
  // What each version carries, required; and what only a later one carries,
  // refused: a file cannot claim an older format to shed its own checks.
  struct Field {
    std::string_view key;
    int since;      // the first version that writes it
    bool required;  // in every file of that version and later
  };
  static constexpr Field kFields[] = {{"distributed.ranks", 2, false},
                                      {kDataChecksumKey, 2, false},
                                      {kChecksumKey, 3, true},
                                      {kCheckpointConfigKey, 3, false}};
  for (const Field& f : kFields) {
    const bool has = meta.contains(std::string(f.key));
    check<IoError>(!has || version >= f.since,
                   "{}: a {} file never carries '{}' (format {} and later write it): its format tag was edited; "
                   "refused",
                   source, format, f.key, f.since);
    check<IoError>(has || version < f.since || !f.required, "{}: checkpoint lacks {}", source,
                   f.key == kChecksumKey ? "the checksum of its header and data" : fmt::format("its '{}'", f.key));
  }
  // Version 2 carries the checksum of its data, version 3 that of its header and data in its stead.
  check<IoError>(version != 2 || meta.contains(std::string(kDataChecksumKey)),
                 "{}: checkpoint lacks the checksum of its data", source);
  check<IoError>(version != 3 || !meta.contains(std::string(kDataChecksumKey)),
                 "{}: a {} file never carries '{}': it was edited; refused", source, format, kDataChecksumKey);
  return version;
}

int check_checkpoint_format(const SafetensorsFile& f) { return check_checkpoint_format(f.metadata(), f.source()); }

std::string checkpoint_format_warning(const std::map<std::string, std::string>& meta, const std::string& source) {
  const int version = check_checkpoint_format(meta, source);
  if (version == 1)
    return fmt::format(
        "{} is a checkpoint of format 1, from an older build: it carries no checksum and no record of "
        "the architecture it was trained with, so neither its contents nor config.json can be checked "
        "against it (train --resume writes the current format)",
        source);
  if (version == 2)
    return fmt::format(
        "{} is a checkpoint of format 2, from an older build: its checksum covers its weights alone, "
        "and it carries no record of the architecture it was trained with, so config.json cannot be "
        "checked against it (train --resume writes the current format)",
        source);
  return "";
}

std::string run_checkpoint_warning(const std::string& run_dir) {
  if (is_hf_checkpoint(run_dir)) return "";  // transformers' files have no multihead format to be old
  const std::string path = answer_checkpoint_path(run_dir);
  return checkpoint_format_warning(read_safetensors_metadata(path), path);
}

TensorMap take_model_tensors(TensorMap& all) {
  TensorMap model;
  for (auto& [name, t] : all)
    if (!name.starts_with("optimizer.")) model.emplace(name, std::move(t));
  return model;
}

namespace {

// "model.nhead" for the JSON pointer "/model/nhead".
std::string dotted(const std::string& pointer) {
  std::string s = pointer.substr(pointer.empty() ? 0 : 1);
  std::replace(s.begin(), s.end(), '/', '.');
  return s;
}

}  // namespace

nlohmann::json architecture_of(const nlohmann::json& config) {
  nlohmann::json a = nlohmann::json::object();
  if (config.is_object())
    for (const char* section : kArchitectureSections)
      if (config.contains(section)) a[section] = config[section];
  return a;
}

void check_config_matches_checkpoint(const nlohmann::json& config, const std::string& config_path,
                                     const std::map<std::string, std::string>& checkpoint_meta,
                                     const std::string& ckpt_path) {
  const auto it = checkpoint_meta.find(std::string(kCheckpointConfigKey));
  if (it == checkpoint_meta.end()) return;
  const nlohmann::json recorded = nlohmann::json::parse(it->second, nullptr, false);
  check<IoError>(recorded.is_object(), "{}: the architecture it records is not a JSON object", ckpt_path);
  check<IoError>(config.is_object(), "{}: not a JSON object", config_path);
  const nlohmann::json was = architecture_of(recorded), now = architecture_of(config);
  const nlohmann::json patch = nlohmann::json::diff(was, now);
  if (patch.empty()) return;
  const nlohmann::json::json_pointer ptr(patch[0]["path"].get<std::string>());
  throw ConfigError(
      fmt::format("{}: {} is {}, but the checkpoint {} was trained with {}: the config no longer describes its weights "
                  "(restore the key, or train again)",
                  config_path, dotted(ptr.to_string()), now.contains(ptr) ? now[ptr].dump() : "absent", ckpt_path,
                  was.contains(ptr) ? was[ptr].dump() : "it absent"));
}

namespace {

// The model tensors of a checkpoint read and format-checked by the caller.
void load_model_tensors(ParamStore& store, const SafetensorsFile& f) {
  TensorMap all = f.all_tensors();
  load_state_dict(store, take_model_tensors(all), f.source());
}

}  // namespace

void load_run_weights(ParamStore& store, const std::string& run_dir) {
  if (is_hf_checkpoint(run_dir)) {
    const InitialWeights w = read_initial_weights(run_dir);
    apply_initial_weights(store, w, "");
    return;
  }
  const RunConfig config = read_run_config(run_dir);
  const std::string path = answer_checkpoint_path(run_dir);
  const SafetensorsFile f = SafetensorsFile::read(path);
  check_checkpoint_format(f);
  check_config_matches_checkpoint(config.json, config.path, f.metadata(), path);
  load_model_tensors(store, f);
}

TensorMap run_weights(const std::string& run_dir) {
  if (is_hf_checkpoint(run_dir)) return hf_model_tensors(read_hf_checkpoint(run_dir));
  const RunConfig config = read_run_config(run_dir);
  const std::string path = answer_checkpoint_path(run_dir);
  const SafetensorsFile f = SafetensorsFile::read(path);
  check_checkpoint_format(f);
  check_config_matches_checkpoint(config.json, config.path, f.metadata(), path);
  TensorMap all = f.all_tensors();
  return take_model_tensors(all);
}

void load_checkpoint_weights(ParamStore& store, const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::read(path);
  check_checkpoint_format(f);
  load_model_tensors(store, f);
}

}  // namespace multihead
