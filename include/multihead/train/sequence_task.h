// Synthetic sequence tasks (copy, reverse, sort) learned by a causal
// language model, trained on one range of lengths and tested on others:
// the length-extrapolation benchmark of positional encodings.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/data/synthetic.h"
#include "multihead/io/run_dir.h"
#include "multihead/train/progress.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct SequenceTaskJob {
  SyntheticTask task;                          // its min_len / max_len are the training range
  std::vector<std::int64_t> test_lengths = {16, 32, 64};
  std::int64_t eval_batches = 8;               // batches of train.batch sequences per test length
  ModelConfig model;
  TrainConfig train;
  int threads = 0;
  std::string report_title = "Synthetic sequence task";
  SequenceTaskJob();
};

nlohmann::json to_json(const SequenceTaskJob& job);
SequenceTaskJob sequence_task_job_from_json(const nlohmann::json& j, const std::string& source);

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
  std::vector<double> losses;             // per step
  std::int64_t peak_activation_bytes = 0;  // the largest of any step
};

SequenceTaskResult run_sequence_task(const SequenceTaskJob& job, RunDir& run, Progress& progress);

// The accuracies by test length of a finished run, from its config.json and
// last checkpoint: what `multihead eval` prints.
std::vector<LengthAccuracy> evaluate_sequence_task_run(const std::string& run_dir, int threads,
                                                       std::optional<Precision> precision = std::nullopt);

}  // namespace multihead
