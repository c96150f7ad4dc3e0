// SPDX-License-Identifier: Apache-2.0
// A state_dict saved by torch.save (PyTorch's zip format: a pickle of the
// dict, each tensor's storage a file beside it), read without running any
// of the pickle's code, as torch.load(weights_only=True) reads it: the
// pickle is interpreted by a machine that knows only the objects a
// state_dict is made of (dicts, tuples, numbers, strings, torch's storages
// and its tensor-rebuilding functions). A reference to anything else (a
// pickle that would call os.system, say) is an IoError naming it, before
// anything is built from it.
#pragma once

#include <string>

#include "multihead/io/safetensors.h"

namespace multihead {

// The tensors of the state_dict in the torch.save zip at `path` (a
// transformers pytorch_model.bin), by name: float32, float16 and bfloat16
// tensors as such, int64 and bool as I64 and BOOL; a storage of another type
// is an IoError naming the tensor. A tensor that is a strided view of its
// storage is copied out of it. The older, non-zip format of PyTorch before
// 1.6 is refused.
TensorMap read_torch_state_dict(const std::string& path);

// The same, of the zip's bytes; `source` names them in errors.
TensorMap parse_torch_state_dict(const std::string& bytes, const std::string& source);

}  // namespace multihead
