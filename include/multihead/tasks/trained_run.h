// SPDX-License-Identifier: Apache-2.0
// A finished run of `multihead train`, loaded for use: a text classifier's
// predictions, a language model's continuations, a pronunciation model's
// pronunciations, and the attention of each for one input (what `inspect`, `generate` and Python's
// multihead.load_run use). Only the run directory is read: config.json,
// tokenizer/ and the last checkpoint (the data need not be there).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/core/precision.h"
#include "multihead/data/tokenizer.h"
#include "multihead/tasks/generation.h"
#include "multihead/tasks/inspect.h"
#include "multihead/tasks/pronunciation.h"

namespace multihead {

// A classifier's attention over one tokenised text ([CLS] put first, cut to
// max_len tokens), with its predicted class named from labels: what inspect
// draws and a run's report shows. With ablate, also each head's ablation
// effect (AttentionMaps::ablation: one more forward pass a head).
AttentionMaps classifier_attention(SequenceClassifier& model, const Tokenizer& tok,
                                   const std::vector<std::int64_t>& ids, std::int64_t max_len,
                                   const std::vector<std::string>& labels, Precision precision, bool ablate = false);
// A language model's attention over the tokens ids, layers first_layer on.
AttentionMaps language_model_attention(LanguageModel& model, const Tokenizer& tok, const std::vector<std::int64_t>& ids,
                                       std::int64_t first_layer, Precision precision);

struct AnswerSettings;  // tasks/answers.h

struct Prediction {
  std::string label;                  // the most likely class
  std::vector<double> probabilities;  // of every class, in labels() order
  bool truncated = false;             // the text had more tokens than the model reads: its first ones were read
};

class TrainedRun {
 public:
  // Text classification, language model and pronunciation runs; another
  // kind is a ConfigError naming it. precision: of the activations (default the run's).
  static std::unique_ptr<TrainedRun> load(const std::string& run_dir,
                                          std::optional<Precision> precision = std::nullopt);
  virtual ~TrainedRun() = default;

  virtual const char* task() const = 0;

  // Each kind answers in its own way, and these are the one place that
  // depends on it: the answer to each input as JSON (tasks/answers.h, which
  // checks the settings first), the checks of the settings, the request
  // fields `multihead serve` takes for it beyond "inputs", and what its
  // /v1/model description adds (a classifier: its labels).
  virtual std::vector<nlohmann::json> answer(const std::vector<std::string>& inputs, const AnswerSettings& s) = 0;
  // ConfigError naming a setting that does not fit this kind or is out of range.
  virtual void check_settings(const AnswerSettings& s);
  virtual std::vector<std::string> request_fields() const { return {}; }
  virtual void describe(nlohmann::json& /*model*/) const {}

  // What the load noticed and worked around, one line each, for the caller
  // to show (a checkpoint of an older format, which cannot be checked as the
  // current one is; a classifier without results.json: classes named by number).
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Classifiers: the class names (as the dataset named them when the run
  // recorded them, else "0", "1", ...) and each text's prediction.
  virtual std::vector<std::string> labels() const;
  virtual std::vector<Prediction> predict(const std::vector<std::string>& texts);
  // Text encoders (classifiers' runs, and checkpoints without a head): each
  // text's sentence embedding (tasks/embedding.h).
  virtual std::vector<std::vector<float>> embed(const std::vector<std::string>& texts);
  // Language models: the prompt's continuation by `tokens` sampled tokens.
  virtual std::string generate(const std::string& prompt, std::int64_t tokens, const SamplingConfig& sampling);
  // Several prompts of equal token count continued together, a batch row
  // each (tasks/generation.h's generate_batch): the first row is what
  // generate gives for its prompt.
  virtual std::vector<std::string> generate_batch(const std::vector<std::string>& prompts, std::int64_t tokens,
                                                  const SamplingConfig& sampling);
  // Pronunciation runs: the n_best best pronunciations of each word, by
  // beam search of width beam (0: the run's own).
  virtual std::vector<std::vector<Pronounced>> pronounce(const std::vector<std::string>& words, std::int64_t n_best,
                                                         std::int64_t beam = 0);
  // Every layer's and head's attention over the first max_tokens tokens of
  // text (a classifier's [CLS] first).
  virtual AttentionMaps attention(const std::string& text, std::int64_t max_tokens) = 0;
  // Every kind of attention the model has for that input, attention()'s
  // first: a pronunciation model adds the decoder's cross-attention over
  // the letters while it reads its own greedy pronunciation.
  virtual std::vector<AttentionMaps> attention_views(const std::string& text, std::int64_t max_tokens) {
    return {attention(text, max_tokens)};
  }

 protected:
  std::vector<std::string> warnings_;
  // ConfigErrors for settings of another kind than given their defaults:
  // pronunciation's (--n-best, --beam), and generation's (--tokens, ...).
  static void check_no_pronunciation_settings(const AnswerSettings& s);
  static void check_no_generation_settings(const AnswerSettings& s);
  static void check_no_threshold(const AnswerSettings& s);
};

}  // namespace multihead
