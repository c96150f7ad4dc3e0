// SPDX-License-Identifier: Apache-2.0
// A run's model on a batch of the run's own data, whatever its kind: the
// inputs as the run builds them, named as the model's forward arguments,
// and the logits the model answers for them, in fp32. What a model carried
// out of multihead (Python's Run.to_torch) is checked against.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "multihead/core/tensor.h"
#include "multihead/nn/module.h"

namespace multihead {

struct ModelSample {
  // text classifiers: ids (B, L) I64, padding (B, L) BOOL (true: padding);
  // language models: ids (B, L); images: images (B, C, S, S) F32;
  // encoder-decoders: source (B, S), source_padding (B, S), target (B, T).
  std::vector<std::pair<std::string, Tensor>> inputs;
  Tensor logits;  // (B, classes), or (B, L, vocabulary) for the token models

  ModelSample(Tensor logits_in) : logits(std::move(logits_in)) {}  // NOLINT: the logits make a sample
  ModelSample& input(std::string name, Tensor t) {
    inputs.emplace_back(std::move(name), std::move(t));
    return *this;
  }
};

// A run's own test split as text, the inputs as a user would give them and
// the answers the data holds (a classifier's label names; a pronunciation
// run's words and their first pronunciations, phonemes joined by spaces):
// what a benchmark or another framework scores or times the run on.
struct TestTexts {
  std::vector<std::string> inputs, answers;
};

// How the sample runs: eval mode, or training mode (the same arithmetic on
// the training paths, which keep what backward reads, when the job's model
// has dropout 0: sample_run_model sets it so).
struct ModelSampleSettings {
  std::int64_t examples = 8;  // the first ones of the run's test data (fewer when it has fewer)
  bool training = false;

  ForwardContext context() const {
    ForwardContext c;
    c.training = training;
    return c;
  }
};

}  // namespace multihead
