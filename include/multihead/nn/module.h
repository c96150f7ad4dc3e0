// SPDX-License-Identifier: Apache-2.0
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

#include <cstdint>
#include <string>

#include "multihead/core/precision.h"
#include "multihead/core/rng.h"
#include "multihead/nn/param_store.h"

namespace multihead {

class Module {
 public:
  virtual ~Module() = default;
  virtual void init(Rng& rng) = 0;
  // Frees what forward saved for backward.
  virtual void release_saved() = 0;
};

// What a forward pass needs beyond its inputs. Every dropout site draws from
// stream (step, site), so masks differ per step and per site, and a
// recomputed forward (gradient checkpointing) sees the same masks.
struct ForwardContext {
  bool training = false;
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  Precision precision = Precision::kF32;  // of the activations kept for backward

  std::uint64_t stream(std::uint32_t site) const { return (step << 24) | site; }
};

// Evaluation: no dropout, activations in precision p (fp32 for int8, whose
// products read the store's int8 weights: ParamStore::freeze).
inline ForwardContext eval_context(Precision p) {
  ForwardContext c;
  c.precision = activation_precision(p);
  return c;
}

}  // namespace multihead
