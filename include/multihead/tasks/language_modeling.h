// SPDX-License-Identifier: Apache-2.0
// Language modelling from text to report: a tokenizer trained on the
// training part of a corpus, a causal Transformer trained on random windows,
// validation loss, and samples in the report.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/data/tokenizer.h"
#include "multihead/tasks/evaluation.h"
#include "multihead/tasks/generation.h"
#include "multihead/tasks/job_config.h"
#include "multihead/tasks/kinds.h"
#include "multihead/tasks/model_sample.h"
#include "multihead/train/fit.h"
#include "multihead/train/progress.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct LanguageModelJob : JobConfig<LanguageModelJob> {
  static constexpr const char* kTask = "language_modeling";
  // In messages: "--epochs does not apply to language models"
  static constexpr const char* kNoun = "language models";
  static constexpr RunAnswers kAnswers = RunAnswers::kGenerate;  // tasks/kinds.h
  static constexpr ModelFamily kModel = ModelFamily::kLanguageModel;
  std::string text_path;             // a file or a folder of .txt files
  double validation_fraction = 0.1;  // the end of the text
  TokenizerConfig tokenizer;         // char by default
  ModelConfig model;
  TrainConfig train;  // train.steps windows of train.batch x train.seq_len tokens
  std::int64_t eval_every = 250;
  std::int64_t eval_windows = 64;
  std::string prompt = "Call me";
  std::int64_t sample_tokens = 400;
  SamplingConfig sampling{0.8, 0, 0.95, 1};
  std::string report_title = "Language model";
  LanguageModelJob();
  void validate(const std::string& where) const;
  // The config's keys beside task, threads and title: one list that
  // from_json reads and to_json writes (tasks/job_config.h).
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& j) {
    k("eval_every", j.eval_every, between(1, kMaxSteps)).doc("steps between validations");
    k("eval_windows", j.eval_windows, between(1, kMaxBatch)).doc("windows of validation text each validation reads");
    k.section("data", [&](auto& d) {
      d("path", j.text_path).doc("a text file, or a folder of .txt files");
      d("validation_fraction", j.validation_fraction, Range{0, 1, true, true})
          .doc("the share at the end of the text held out to validate");
    });
    k.tokenizer(j.tokenizer);
    k.model(j.model, j.tokenizer.vocab_size);
    k.train(j.train);
    k.section("sample", [&](auto& s) {
      s("prompt", j.prompt).doc("the text the report's sample continues");
      s("tokens", j.sample_tokens, between(0, kMaxLength)).doc("tokens the sample adds");
      s("temperature", j.sampling.temperature, at_least(0)).doc("the sampling temperature (0: greedy)");
      s("top_k", j.sampling.top_k, at_least(0)).doc("sample among the k likeliest tokens (0: all)");
      s("top_p", j.sampling.top_p, Range{0, 1, true, false}).doc("sample among the likeliest tokens holding p");
      s("seed", j.sampling.seed).doc("the sample's seed");
    });
  }
};

struct LanguageModelResult {
  double validation_loss = 0;        // nats per token
  double validation_perplexity = 0;  // exp(validation_loss)
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient
  double train_seconds = 0, tokens_per_s = 0;
  // "60 steps in 15.1 s (steps 49-60 in this run: 3.1 s)" (FitResult::steps_and_time); train_seconds
  // is the whole run's, over every invocation.
  std::string trained;
  std::string sample;
};

LanguageModelResult run_job(const LanguageModelJob& job, RunDir& run, Progress& progress, StopRequest* stop = nullptr);
std::vector<std::string> summary_lines(const LanguageModelResult& result);

// The validation loss (nats per token, bits and perplexity) of the model
// saved in a run directory whose config.json holds `job`, as a line; with
// req.data, the loss over that text file instead (eval_windows windows of
// train.seq_len tokens spread over it).
std::vector<std::string> evaluate_run(const LanguageModelJob& job, const std::string& run_dir, const EvalRequest& req);
// "1.2345 nats/token (1.781 bits, perplexity 3.437)".
std::string loss_text(double nats);
// The run's model on windows of train.seq_len tokens spread over its
// validation text (tasks/model_sample.h).
ModelSample sample_model(const LanguageModelJob& job, const std::string& run_dir, const ModelSampleSettings& settings);

// Loads the model of a run directory and continues `prompt`; precision by default the run's own.
std::string generate_from_run(const std::string& run_dir, const std::string& prompt, std::int64_t tokens,
                              const SamplingConfig& sampling, std::optional<Precision> precision = std::nullopt);

}  // namespace multihead
