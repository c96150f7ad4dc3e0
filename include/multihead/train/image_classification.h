// Image classification with a Vision Transformer on IDX data (Fashion-MNIST),
// from files to report.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "multihead/io/run_dir.h"
#include "multihead/nn/models.h"
#include "multihead/train/progress.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct ImageClassificationJob {
  // Folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::int64_t validation_examples = 5000;  // held out of the training files
  std::int64_t limit_train = 0;             // 0: all
  VisionConfig model;
  TrainConfig train;
  std::int64_t epochs = 5;
  std::int64_t max_steps = 0;  // 0: every epoch in full; else a cap (epoch_job_steps)
  int threads = 0;
  std::string report_title = "Fashion-MNIST: a Vision Transformer";
};

nlohmann::json to_json(const ImageClassificationJob& job);
ImageClassificationJob image_classification_job_from_json(const nlohmann::json& j, const std::string& source);

struct ImageClassificationResult {
  double validation_accuracy = 0, test_accuracy = 0, test_loss = 0;
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient
  double train_seconds = 0;
  std::int64_t peak_activation_bytes = 0;  // the largest of any step
};

// Test accuracy of the model saved in a run directory.
// precision: that of the activations; by default the run's own.
double evaluate_image_run(const std::string& run_dir, int threads, std::optional<Precision> precision = std::nullopt);

ImageClassificationResult run_image_classification(const ImageClassificationJob& job, RunDir& run, Progress& progress);

}  // namespace multihead
