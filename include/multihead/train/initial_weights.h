// SPDX-License-Identifier: Apache-2.0
// Where a run's weights start, when not from its own initialisation: another
// run's last checkpoint (fine-tuning), or a state_dict saved with safetensors
// (PyTorch's safetensors.torch.save_file, or multihead.save_state_dict),
// matched to the model's parameters by name.
#pragma once

#include <string>
#include <vector>

#include "multihead/io/safetensors.h"
#include "multihead/nn/param_store.h"

namespace multihead {

struct InitialWeights {
  std::string file;     // what was read: a run's last checkpoint, or the file given
  std::string sha256;   // of that file, 64 hex digits
  TensorMap tensors;    // the model's tensors (a checkpoint's optimizer state left out)
  std::string warning;  // a checkpoint of an older format (train/checkpoint.h), else ""
  // Parameters (a regex over names) taken where the file has them in the
  // model's shape and otherwise left at their initialisation: a Hugging Face
  // checkpoint's classification head, new for new labels.
  std::string optional;
};

// from: a run directory (its last checkpoint, checked against its config.json
// as eval checks it) or a safetensors file. IoError for a path that is
// neither, or a file that is not safetensors.
InitialWeights read_initial_weights(const std::string& from);

// Copies w into the store by name. A parameter whose name `skip` matches
// (std::regex_search, ECMAScript; empty: none) keeps its initialisation;
// every other must be in w with its shape, and every tensor of w must be a
// parameter unless skip matches it. A ConfigError otherwise, naming the
// tensor and both shapes. Returns the names of the parameters skipped.
std::vector<std::string> apply_initial_weights(ParamStore& store, const InitialWeights& w, const std::string& skip);

// The SHA-256 of bytes, as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace multihead
