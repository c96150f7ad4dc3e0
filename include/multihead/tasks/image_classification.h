// Image classification with a Vision Transformer on IDX data (Fashion-MNIST),
// from files to report.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/io/run_dir.h"
#include "multihead/tasks/overrides.h"
#include "multihead/nn/models.h"
#include "multihead/train/progress.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct ImageClassificationJob {
  static constexpr const char* kTask = "image_classification";
  // Folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::int64_t validation_examples = 5000;  // held out of the training files
  std::int64_t limit_train = 0;             // 0: all
  VisionConfig model;
  TrainConfig train;
  EpochBudget budget{5, 0};
  int threads = 0;
  std::string report_title = "Fashion-MNIST: a Vision Transformer";

  static ImageClassificationJob from_json(const nlohmann::json& j, const std::string& source);
  void validate(const std::string& where) const;
};

nlohmann::json to_json(const ImageClassificationJob& job);
// The flags: data, epochs, steps (a cap), and the training and layer ones;
// token flags (source, positions, tokenizer, max_len, vocab_size) are refused.
void apply_overrides(ImageClassificationJob& job, const JobOverrides& flags);

struct ImageClassificationResult {
  double validation_accuracy = 0, test_accuracy = 0, test_loss = 0;
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient
  double train_seconds = 0;
  std::int64_t peak_activation_bytes = 0;  // the largest of any step
};

ImageClassificationResult run_job(const ImageClassificationJob& job, RunDir& run, Progress& progress);
std::vector<std::string> summary_lines(const ImageClassificationResult& result);

// The test accuracy of the model saved in a run directory whose
// config.json holds `job`, as a line.
std::vector<std::string> evaluate_run(const ImageClassificationJob& job, const std::string& run_dir, int threads);

}  // namespace multihead
