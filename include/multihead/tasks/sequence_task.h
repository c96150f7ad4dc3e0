// SPDX-License-Identifier: Apache-2.0
// Synthetic sequence tasks (copy, reverse, sort) learned by a causal
// language model, trained on one range of lengths and tested on others:
// the length-extrapolation benchmark of positional encodings.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/data/synthetic.h"
#include "multihead/tasks/job_config.h"
#include "multihead/tasks/kinds.h"
#include "multihead/tasks/model_sample.h"
#include "multihead/train/fit.h"
#include "multihead/train/progress.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct SequenceTaskJob : JobConfig<SequenceTaskJob> {
  static constexpr const char* kTask = "sequence_task";
  // In messages: "--epochs does not apply to synthetic sequence tasks"
  static constexpr const char* kNoun = "synthetic sequence tasks";
  static constexpr RunAnswers kAnswers = RunAnswers::kNone;  // tasks/kinds.h
  static constexpr ModelFamily kModel = ModelFamily::kLanguageModel;
  SyntheticTask task;  // its min_len / max_len are the training range
  std::vector<std::int64_t> test_lengths = {16, 32, 64};
  std::int64_t eval_batches = 8;  // batches of train.batch sequences per test length
  ModelConfig model;
  TrainConfig train;
  std::string report_title = "Synthetic sequence task";
  SequenceTaskJob();  // the "reverse" preset
  void validate(const std::string& where) const;
  // The config's keys beside task, threads and title: one list that
  // from_json reads and to_json writes (tasks/job_config.h).
  // A synthetic task's symbols and lengths leave room for the specials and
  // the targets (up to four times a sequence's length).
  static constexpr std::int64_t kMaxSymbols = kMaxVocab / 2, kMaxTaskLength = kMaxLength / 4;

  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& j) {
    k.section("data", [&](auto& d) {
      d.named("kind", j.task.kind, synthetic_kind_name, parse_synthetic_kind).doc("the synthetic task");
      d("symbols", j.task.symbols, between(1, kMaxSymbols)).doc("distinct symbols in the sequences");
      d("min_len", j.task.min_len, between(1, kMaxTaskLength)).doc("the shortest training sequence");
      d("max_len", j.task.max_len, between(1, kMaxTaskLength)).doc("the longest training sequence");
      d("test_lengths", j.test_lengths).doc("the lengths tested, trained on or longer");
      d("eval_batches", j.eval_batches, between(1, kMaxBatch)).doc("batches of train.batch sequences a test length");
    });
    k.model(j.model, j.task.vocab_size());
    k.train(j.train);
  }
};

struct LengthAccuracy {
  std::int64_t length = 0;
  double token_accuracy = 0;     // answer tokens predicted right (teacher forced, greedy)
  double sequence_accuracy = 0;  // sequences with every answer token right
};

struct SequenceTaskResult {
  std::vector<LengthAccuracy> by_length;
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient
  double train_seconds = 0, ms_per_step = 0;
  // "60 steps in 15.1 s (steps 49-60 in this run: 3.1 s)" (FitResult::steps_and_time); train_seconds
  // is the whole run's, over every invocation.
  std::string trained;
  std::vector<double> losses;              // per step
  std::int64_t peak_activation_bytes = 0;  // the largest of any step
};

SequenceTaskResult run_job(const SequenceTaskJob& job, RunDir& run, Progress& progress, StopRequest* stop = nullptr);
std::vector<std::string> summary_lines(const SequenceTaskResult& result);

// The accuracies by test length of the model saved in a run directory whose
// config.json holds `job`, a line each.
std::vector<std::string> evaluate_run(const SequenceTaskJob& job, const std::string& run_dir);
// The run's model on sequences of the task (tasks/model_sample.h).
ModelSample sample_model(const SequenceTaskJob& job, const std::string& run_dir, const ModelSampleSettings& settings);

}  // namespace multihead
