// SPDX-License-Identifier: Apache-2.0
// The registry of kinds: what each kind of job's run offers beyond
// training, declared once on its job type and read by the run loaders, the
// CLI and the Python package (`multihead._multihead.kinds()`).
//
// Each job type XJob declares, beside kTask and kNoun,
//   static constexpr RunAnswers kAnswers;   // what its loaded run answers, or kNone
//   static constexpr ModelFamily kModel;    // the model its run holds
// A job type without them does not compile into Job (tasks/jobs.h); one
// that answers inputs without a loaded run (LoadedRunOf in trained_run.cpp)
// does not compile either.
#pragma once

#include <string_view>
#include <vector>

namespace multihead {

// What a loaded run (TrainedRun) of the kind answers: a classifier its
// texts' labels, a language model continuations, a pronunciation run its
// words' phonemes; kNone: the kind has no loaded run.
enum class RunAnswers { kNone, kClassify, kGenerate, kPronounce };
// The model a run of the kind holds, which `to_torch` and the ONNX export
// rebuild: an encoder with a classifier head, a causal language model, a
// Vision Transformer or an encoder-decoder.
enum class ModelFamily { kSequenceClassifier, kLanguageModel, kVisionTransformer, kEncoderDecoder };

struct KindInfo {
  const char* task;  // the "task" key of its configs
  const char* noun;  // in messages: "--epochs does not apply to {noun}"
  RunAnswers answers;
  ModelFamily model;
};

const char* run_answers_name(RunAnswers a);    // "none", "classify", "generate", "pronounce"
const char* model_family_name(ModelFamily m);  // "sequence_classifier", "language_model", ...

// Every kind, in Job's order (the first is the default task).
const std::vector<KindInfo>& kinds();
// The kind of a task; a ConfigError naming the known ones for another.
const KindInfo& kind_of(std::string_view task);

}  // namespace multihead
