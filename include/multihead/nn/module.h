// What every module shares. A module:
//   - is constructed with (ParamStore&, prefix, config) and declares its
//     parameters under PyTorch's state_dict names, prefixed;
//   - is initialised with init(rng) once the store is finalized;
//   - forward(...) computes its output and keeps in the module what backward
//     needs (the inputs it reads must stay alive until backward);
//   - backward(grad_output) adds (+=) into the parameter gradients and
//     returns the gradients of its inputs.
// Virtual dispatch happens here, per module call, never inside kernels.
#pragma once

#include <string>

#include "multihead/core/rng.h"
#include "multihead/nn/param_store.h"

namespace multihead {

class Module {
 public:
  virtual ~Module() = default;
  virtual void init(Rng& rng) = 0;
  // Frees what forward saved for backward.
  virtual void clear_cache() = 0;
};

}  // namespace multihead
