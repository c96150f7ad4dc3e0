// SPDX-License-Identifier: Apache-2.0
// Image classification with a Vision Transformer on IDX data (Fashion-MNIST),
// from files to report.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/nn/models.h"
#include "multihead/tasks/job_config.h"
#include "multihead/tasks/kinds.h"
#include "multihead/tasks/model_sample.h"
#include "multihead/train/fit.h"
#include "multihead/train/progress.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct ImageClassificationJob : JobConfig<ImageClassificationJob> {
  static constexpr const char* kTask = "image_classification";
  static constexpr const char* kNoun = "image jobs";         // in messages: "--epochs does not apply to image jobs"
  static constexpr RunAnswers kAnswers = RunAnswers::kNone;  // tasks/kinds.h
  static constexpr ModelFamily kModel = ModelFamily::kVisionTransformer;
  // Folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::int64_t validation_examples = 5000;  // held out of the training files
  std::int64_t limit_train = 0;             // 0: all
  VisionConfig model;                       // a small pre-norm encoder (the constructor)
  TrainConfig train;
  EpochBudget budget{5, 0};
  std::string report_title = "Fashion-MNIST: a Vision Transformer";

  ImageClassificationJob();
  void validate(const std::string& where) const;
  // The config's keys beside task, threads and title: one list that
  // from_json reads and to_json writes (tasks/job_config.h).
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& j) {
    k.section("data", [&](auto& d) {
      d("path", j.data_dir).doc("the Fashion-MNIST folder (its IDX files)");
      d("validation_examples", j.validation_examples, between(0, kMaxVocab))
          .doc("training images held out to validate");
      d("limit_train", j.limit_train, between(0, kMaxVocab)).doc("train on the first this many images (0: all)");
    });
    k.section("model", [&](auto& m) { VisionConfig::keys(m, j.model); });
    k.train(j.train, &j.budget);
  }
};

struct ImageClassificationResult {
  double validation_accuracy = 0, test_accuracy = 0, test_loss = 0;
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient
  double train_seconds = 0;
  // "60 steps in 15.1 s (steps 49-60 in this run: 3.1 s)" (FitResult::steps_and_time); train_seconds
  // is the whole run's, over every invocation.
  std::string trained;
  std::int64_t peak_activation_bytes = 0;  // the largest of any step
};

ImageClassificationResult run_job(const ImageClassificationJob& job, RunDir& run, Progress& progress,
                                  StopRequest* stop = nullptr);
std::vector<std::string> summary_lines(const ImageClassificationResult& result);

// The test accuracy of the model saved in a run directory whose
// config.json holds `job`, as a line.
std::vector<std::string> evaluate_run(const ImageClassificationJob& job, const std::string& run_dir);
// The run's model on the first test images (tasks/model_sample.h).
ModelSample sample_model(const ImageClassificationJob& job, const std::string& run_dir,
                         const ModelSampleSettings& settings);

}  // namespace multihead
