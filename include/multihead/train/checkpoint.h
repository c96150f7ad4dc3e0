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
// the checksum of its header and data (kChecksumKey), required when read;
// version 2 that of its data alone (kDataChecksumKey); version 1 (older
// runs) none.
inline constexpr const char* kCheckpointFormat = "multihead-checkpoint-3";
// IoError unless `f` is a checkpoint of a version this build reads.
void check_checkpoint_format(const SafetensorsFile& f);
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
