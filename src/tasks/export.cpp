// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/export.h"

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/io/output_path.h"
#include "multihead/tasks/language_modeling.h"
#include "multihead/tasks/text_classification.h"
#include "multihead/train/hf_checkpoint.h"
#include "multihead/train/initial_weights.h"
#include "multihead/train/run_dir.h"

namespace multihead {

std::string export_run(const std::string& run_dir, const std::string& format, const std::string& out) {
  check<ConfigError>(format == "hf",
                     "export --format must be hf, got '{}' (PyTorch modules and ONNX graphs come from the Python "
                     "package: Run.to_torch, and python -m multihead.onnx_export --run RUN --out DIR)",
                     format);
  check_output_apart(out, "--out", {{"the run (--run)", run_dir}});
  const RunConfig cfg = read_run_config(run_dir);
  const std::string task = cfg.json.value("task", std::string());
  if (task == LanguageModelJob::kTask) {
    const LanguageModelJob job = LanguageModelJob::from_json(cfg.json, cfg.path);
    const std::unique_ptr<Tokenizer> tok = load_run_tokenizer(run_dir, job.model.vocab_size);
    const std::string arch = write_hf_checkpoint(out, to_json(job), read_initial_weights(run_dir).tensors, {}, *tok);
    return fmt::format(
        "wrote {} (transformers' {}: config.json, model.safetensors, tokenizer.json, "
        "tokenizer_config.json)",
        out, arch);
  }
  check<ConfigError>(task == TextClassificationJob::kTask,
                     "export --format hf writes text classifiers and language models; {} is a {} run", run_dir,
                     task.empty() ? "?" : task);
  const TextClassificationJob job = TextClassificationJob::from_json(cfg.json, cfg.path);
  const std::vector<std::string> labels = run_class_names(run_dir, job.model.num_classes, nullptr);
  const std::unique_ptr<Tokenizer> tok = load_run_tokenizer(run_dir, job.model.vocab_size);
  const InitialWeights weights = read_initial_weights(run_dir);
  const std::string arch = write_hf_checkpoint(out, to_json(job), weights.tensors, labels, *tok);
  return fmt::format(
      "wrote {} (transformers' {}: config.json, model.safetensors, tokenizer.json, "
      "tokenizer_config.json)",
      out, arch);
}

}  // namespace multihead
