// Parameters by name, as PyTorch's state_dict: what safetensors files carry.
#pragma once

#include "multihead/io/safetensors.h"
#include "multihead/nn/param_store.h"

namespace multihead {

// Copies of every parameter, under its state_dict name.
TensorMap state_dict(const ParamStore& store);

// Copies tensors into the store by name. Strict, as PyTorch's default: every
// parameter present with its exact shape and F32 dtype, and (unless
// allow_extra) no tensor the store does not know. `what` names the source in
// messages.
void load_state_dict(ParamStore& store, const TensorMap& tensors, const std::string& what = "weights",
                     bool allow_extra = false);

// load_state_dict from the tensors of one safetensors file, named by its path in messages.
void load_state_dict_file(ParamStore& store, const std::string& path, bool allow_extra = false);

// A checkpoint's model tensors, moved out of `all`: all but the optimizer's
// state ("optimizer." names), which stays in `all`.
TensorMap take_model_tensors(TensorMap& all);

// A training checkpoint names its format in its metadata. Version 2 carries
// the data's checksum (kDataChecksumKey), required when read; version 1
// (older runs) has none.
inline constexpr const char* kCheckpointFormat = "multihead-checkpoint-2";
// IoError unless `f` is a checkpoint of a version this build reads.
void check_checkpoint_format(const SafetensorsFile& f);
// A run's weights from its checkpoint (checked as above); the optimizer's
// state in it is left out.
void load_checkpoint_weights(ParamStore& store, const std::string& path);

}  // namespace multihead
