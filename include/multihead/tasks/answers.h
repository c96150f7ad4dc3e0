// SPDX-License-Identifier: Apache-2.0
// A trained run's answers to new inputs, as JSON objects: what `predict
// --json` prints a line each and what `multihead serve` returns, made in one
// place so that the two always agree.
//   classifier:     {"input", "label", "probabilities": {label: p, ...}}, and
//                   "truncated": true when the text was cut to the model's length,
//                   "threshold": t when the label came from a threshold
//   language model: {"input", "output"}  (the prompt and its continuation)
//   pronunciation:  {"input", "pronunciations": [{"phonemes", "log_prob", "score", "ended"}, ...]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/core/error.h"
#include "multihead/io/json_config.h"
#include "multihead/tasks/generation.h"
#include "multihead/tasks/trained_run.h"

namespace multihead {

struct AnswerSettings {
  std::int64_t tokens = 200;                 // language models: tokens generated
  SamplingConfig sampling{0.8, 0, 0.95, 0};  // language models
  std::int64_t n_best = 1, beam = 0;         // pronunciation runs (beam 0: the run's, at least n_best)
  // Two-class classifiers: the positive (second) class is the label when
  // its probability is at least this; -1, the default: the likelier class.
  double threshold = -1;
  // Text encoders: each input's sentence embedding ({"embedding": [...]},
  // TrainedRun::embed) rather than its prediction. Set by the endpoint
  // (serve's POST /v1/embed), not by a request's keys.
  bool embed = false;

  // The settings' keys, as a request to `multihead serve` names them (a
  // kind takes those of its TrainedRun::request_fields()); max_tokens and
  // max_beam bound tokens, n_best and beam.
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& s, std::int64_t max_tokens, std::int64_t max_beam) {
    k("tokens", s.tokens, between(0, static_cast<double>(max_tokens))).doc("language models: tokens generated");
    k("temperature", s.sampling.temperature, at_least(0)).doc("language models: the sampling temperature (0: greedy)");
    k("top_k", s.sampling.top_k, at_least(0)).doc("language models: sample among the k likeliest tokens (0: all)");
    k("top_p", s.sampling.top_p, Range{0, 1, true, false})
        .doc("language models: sample among the likeliest tokens holding p");
    k("seed", s.sampling.seed).doc("language models: the sampling seed");
    k("n_best", s.n_best, between(1, static_cast<double>(max_beam)))
        .doc("pronunciation runs: pronunciations a word, best first");
    k("beam", s.beam, between(0, static_cast<double>(max_beam))).doc("pronunciation runs: the beam (0: the run's)");
    // In [0, 1], which the classifier checks: its default, -1, is not.
    k("threshold", s.threshold)
        .doc("two-class classifiers: the positive class's probability from which it is the label");
  }
  bool operator==(const AnswerSettings& o) const {
    return tokens == o.tokens && sampling.temperature == o.sampling.temperature && sampling.top_k == o.sampling.top_k &&
           sampling.top_p == o.sampling.top_p && sampling.seed == o.sampling.seed && n_best == o.n_best &&
           beam == o.beam && threshold == o.threshold && embed == o.embed;
  }
};

// Settings that do not fit the run's task or are out of range: a ConfigError
// naming the setting (as the CLI spells it, `--n-best`; the server's JSON
// field names are the same words with underscores).
void check_answer_settings(TrainedRun& run, const AnswerSettings& s);

// One input that its run cannot answer (not valid UTF-8, a word longer than
// the model reads, ...): which one, and why.
class InputError : public ConfigError {
 public:
  InputError(std::size_t at, const std::string& why) : ConfigError(why), index(at) {}
  std::size_t index;
};

// The answers of each kind, shaped here so that every kind's look alike.
nlohmann::json classified_answer(const std::string& input, const Prediction& p, const std::vector<std::string>& labels);
nlohmann::json pronounced_answer(const std::string& input, const std::vector<Pronounced>& ps);

// The answers of a batched call; when the batch fails, each input alone, so
// that the error names the input that caused it (InputError).
template <typename Batch, typename One>
std::vector<nlohmann::json> batched_answers(const std::vector<std::string>& inputs, Batch batch, One one) {
  try {
    return batch(inputs);
  } catch (const Error&) {
    for (std::size_t i = 0; i < inputs.size(); ++i) try {
        one(inputs[i]);
      } catch (const Error& e) {
        throw InputError(i, e.what());
      }
    throw;
  }
}

// The answer to each input, in order (the run's kind answers: TrainedRun::answer). Classifiers and pronunciation runs
// take the inputs in batches (an answer equal, up to rounding, to that input's alone); a language model continues them
// one by one, each sampled from settings.sampling.seed. Settings are checked first; a bad input throws InputError.
std::vector<nlohmann::json> answer(TrainedRun& run, const std::vector<std::string>& inputs,
                                   const AnswerSettings& settings);

}  // namespace multihead
