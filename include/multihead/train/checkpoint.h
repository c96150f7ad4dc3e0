// SPDX-License-Identifier: Apache-2.0
// Training checkpoints: a safetensors file of the model's and optimizer's
// tensors whose metadata names its format, carries checksums, and records the
// sections of the job config that describe the model.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "multihead/io/safetensors.h"
#include "multihead/nn/param_store.h"

namespace multihead {

// A checkpoint's model tensors, moved out of `all`: all but the optimizer's
// state ("optimizer." names), which stays in `all`.
TensorMap take_model_tensors(TensorMap& all);

// A training checkpoint names its format in its metadata. Version 3 carries
// the checksum of its header and data (kChecksumKey), required when read,
// and the architecture it was trained with (kCheckpointConfigKey); version 2
// the checksum of its data alone (kDataChecksumKey), required, and the rank
// count; version 1 (older runs) none of these.
inline constexpr const char* kCheckpointFormat = "multihead-checkpoint-3";
// The version of the checkpoint whose metadata is `meta` (1, 2 or 3), or an
// IoError naming `source`: a format this build does not read, a field the
// version requires missing, or a field only a later version writes (a file
// that names an older format than it is, to shed the checks of its own).
int check_checkpoint_format(const std::map<std::string, std::string>& meta, const std::string& source);
int check_checkpoint_format(const SafetensorsFile& f);
// For a checkpoint of an older format (checked as above), a warning that
// names its format and what it cannot be checked for; "" for the current one.
std::string checkpoint_format_warning(const std::map<std::string, std::string>& meta, const std::string& source);
// The same for a run directory's last checkpoint, from its header alone:
// what a command that loads the run says before it does.
std::string run_checkpoint_warning(const std::string& run_dir);
// A run's weights from its checkpoint (checked as above); the optimizer's
// state in it is left out.
void load_checkpoint_weights(ParamStore& store, const std::string& path);

// The sections of a job config that describe the model whose weights a
// checkpoint holds: a config.json that differs in any of them describes
// other arithmetic on the same weights (nhead and norm_first keep every
// shape, and change every output).
inline constexpr const char* kArchitectureSections[] = {"task", "model", "tokenizer"};
// A checkpoint records those sections of the job config it was trained with
// (as JSON text) under this metadata key; checkpoints older than it have
// none. Settings that may change on a resume (threads, checkpoint_every) are
// not in them, so a resumed run writes the checkpoint an uninterrupted one would.
inline constexpr std::string_view kCheckpointConfigKey = "architecture";
// Those sections of a job config.
nlohmann::json architecture_of(const nlohmann::json& config);
// ConfigError naming the first key of those sections where `config` (read
// from config_path) differs from what the checkpoint at ckpt_path recorded;
// nothing when the checkpoint recorded no config.
void check_config_matches_checkpoint(const nlohmann::json& config, const std::string& config_path,
                                     const std::map<std::string, std::string>& checkpoint_meta,
                                     const std::string& ckpt_path);
// The weights of a run directory's last checkpoint, after checking the
// run's config.json against it as above: what evaluating a run starts from.
void load_run_weights(ParamStore& store, const std::string& run_dir);
// The same weights as tensors by state_dict name, checked the same way.
TensorMap run_weights(const std::string& run_dir);

}  // namespace multihead
