// SPDX-License-Identifier: Apache-2.0
// Parameters by name, as PyTorch's state_dict: what safetensors files carry.
#pragma once

#include <string>

#include "multihead/io/safetensors.h"
#include "multihead/nn/param_store.h"

namespace multihead {

// Copies of every parameter, under its state_dict name.
TensorMap state_dict(const ParamStore& store);

// A NaN or Inf weight is a corrupt file, never a model worth running:
// IoError "what: 'name' holds nan at element i" for an F32 tensor holding one.
void check_finite_weights(const Tensor& t, const std::string& what, const std::string& name);

// Copies tensors into the store by name. Strict, as PyTorch's default: every
// parameter present with its exact shape and F32 dtype, and (unless
// allow_extra) no tensor the store does not know. `what` names the source in
// messages.
void load_state_dict(ParamStore& store, const TensorMap& tensors, const std::string& what = "weights",
                     bool allow_extra = false);

// load_state_dict from the tensors of one safetensors file, named by its path in messages.
void load_state_dict_file(ParamStore& store, const std::string& path, bool allow_extra = false);

}  // namespace multihead
