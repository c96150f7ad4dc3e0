// SPDX-License-Identifier: Apache-2.0
// multihead apply: run one module on PyTorch-named weights and inputs.
#include <memory>

#include "commands.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/output_path.h"
#include "multihead/nn/apply_module.h"

namespace multihead::cli {

Command add_apply(CLI::App& app) {
  struct Opts {
    std::string module, weights, inputs, out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "apply", "Run a module (MultiheadAttention) on safetensors weights and inputs, forward and backward");
  sub->add_option("--module", o->module, "Module config JSON ({\"type\": \"MultiheadAttention\", ...})")->required();
  sub->add_option("--weights", o->weights, "Weights, by PyTorch state_dict name (.safetensors)")->required();
  sub->add_option("--inputs", o->inputs, "query, key, value, masks, grad_output (.safetensors)")->required();
  sub->add_option("--out", o->out, "Where to write output, attn_weights and gradients (.safetensors)")->required();
  return {sub, [o] {
            check_output_apart(o->out, "--out",
                               {{"the module config (--module)", o->module},
                                {"the weights (--weights)", o->weights},
                                {"the inputs (--inputs)", o->inputs}});
            std::string cfg = read_file(o->module);
            TensorMap weights = SafetensorsFile::read(o->weights).all_tensors();
            TensorMap inputs = SafetensorsFile::read(o->inputs).all_tensors();
            TensorMap result = apply_module(cfg, o->module, weights, inputs);
            write_safetensors(o->out, result);
          }};
}

}  // namespace multihead::cli
