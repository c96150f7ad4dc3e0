// SPDX-License-Identifier: Apache-2.0
// A run written out in another library's layout: "hf", a text classifier of
// BERT's shape (one fine-tuned from a Hugging Face BERT checkpoint, or the
// checkpoint itself) as transformers' BertForSequenceClassification
// (train/hf_checkpoint.h). PyTorch modules and ONNX come from the Python
// package (Run.to_torch, then torch.onnx.export).
#pragma once

#include <string>

namespace multihead {

// Writes the run in run_dir into the new directory out in `format`; returns
// what was written, for a line of output. ConfigError for another format, an
// out that is or holds the run, or a run of another shape.
std::string export_run(const std::string& run_dir, const std::string& format, const std::string& out);

}  // namespace multihead
