// SPDX-License-Identifier: Apache-2.0
// Text classification from data to report: load and split a dataset, train
// a tokenizer on the training split, train an encoder classifier, evaluate,
// and write the run directory (config, metrics, checkpoints, tokenizer,
// report with plots and attention heatmaps).
#pragma once

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/data/text_datasets.h"
#include "multihead/data/tokenizer.h"
#include "multihead/tasks/classification_report.h"
#include "multihead/tasks/evaluation.h"
#include "multihead/tasks/job_config.h"
#include "multihead/tasks/kinds.h"
#include "multihead/tasks/loaded_run.h"
#include "multihead/tasks/model_sample.h"
#include "multihead/train/fit.h"
#include "multihead/train/progress.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct TextClassificationJob : JobConfig<TextClassificationJob> {
  static constexpr const char* kTask = "text_classification";
  // In messages: "--epochs does not apply to text classifiers"
  static constexpr const char* kNoun = "text classifiers";
  static constexpr RunAnswers kAnswers = RunAnswers::kClassify;  // tasks/kinds.h
  static constexpr ModelFamily kModel = ModelFamily::kSequenceClassifier;
  static constexpr bool kTaskOptional = true;  // the first kind of job: the default
  // Data: "spamassassin" (data_path: the corpus's data folder), "aclimdb"
  // (data_path: the aclImdb folder; its test split is the test set), "csv",
  // "tsv" or "jsonl" (data_path: the file, with text_column and label_column
  // naming its columns or keys); "" (the default): the file's extension
  // names it (data_source), and config.json records what it named.
  std::string source;
  std::string data_path;
  bool strip_headers = false;  // remove each text's RFC 822 mail headers
  std::string text_column = "text", label_column = "label";
  double validation_fraction = 0.1, test_fraction = 0.2;
  // Each split holds each class in its share of the whole (data/text_datasets.h).
  bool stratify = true;
  // The loss's class weights: "none", or "balanced" (scikit-learn's: a
  // class's weight n / (classes x its count in the training split), so that
  // every class weighs as much in the loss), as CrossEntropyLoss(weight=...).
  std::string class_weights = "none";
  TokenizerConfig tokenizer;
  ModelConfig model;
  TrainConfig train;
  EpochBudget budget{3, 0};
  std::int64_t max_len = 256;  // tokens per example, [CLS] included
  std::int64_t eval_batch = 64;
  std::string report_title;  // empty: named after the data (title_of)

  // The recipe for a dataset of the user's, however the job is given (a
  // config, the flags without --preset, multihead.train): AdamW at 1e-3, a
  // linear warmup over the first 10% of the steps, then a cosine decay,
  // gradients clipped at norm 1.
  TextClassificationJob();
  // ConfigError, naming `where`, for a value out of range.
  void validate(const std::string& where) const;
  // The config's keys beside task, threads and title: one list that
  // from_json reads and to_json writes (tasks/job_config.h).
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& j) {
    k("max_len", j.max_len, between(2, kMaxLength)).doc("tokens an example is cut to, [CLS] included");
    k("class_weights", j.class_weights)
        .doc("the loss's class weights: \"none\", or \"balanced\" (each class weighing as much in the loss)");
    k.section("data", [&](auto& d) {
      d("source", j.source)
          .doc("the data's format: csv, tsv, jsonl, spamassassin or aclimdb (\"\": the file's extension)");
      d("path", j.data_path).doc("the data file or folder");
      d("strip_headers", j.strip_headers).doc("remove each text's RFC 822 mail headers");
      d("text_column", j.text_column).doc("the column or key of the texts");
      d("label_column", j.label_column).doc("the column or key of the labels");
      d("validation_fraction", j.validation_fraction, below_one()).doc("the share of the data held out to validate");
      d("test_fraction", j.test_fraction, below_one()).doc("the share held out to test (aclimdb: its test split)");
      d("stratify", j.stratify).doc("each split holds each class in its share of the whole");
    });
    k.tokenizer(j.tokenizer);
    k.model(j.model, j.tokenizer.vocab_size);
    k.train(j.train, &j.budget);
  }
};

// The job's data source: its source, or the one data_path's extension names
// (.csv, .tsv, .jsonl); a ConfigError naming --source when it names none.
std::string data_source(const TextClassificationJob& job);

// The class weights job.class_weights asks for, from the classes' counts
// in the training split (labels of the examples `train`); empty for "none".
std::vector<double> class_weights_of(const TextClassificationJob& job, const std::vector<std::int64_t>& labels,
                                     std::span<const std::int64_t> train, std::int64_t classes);

// The report's title: report_title, or one naming the data
// ("Text classification: tickets.csv").
std::string title_of(const TextClassificationJob& job);

struct ClassificationMetrics {
  double loss = 0, accuracy = 0;
  std::int64_t examples = 0;
};

struct TextClassificationResult {
  ClassificationMetrics validation, test;
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient
  double train_seconds = 0;
  // "60 steps in 15.1 s (steps 49-60 in this run: 3.1 s)" (FitResult::steps_and_time); train_seconds
  // is the whole run's, over every invocation.
  std::string trained;
  double tokens_per_s = 0;
  std::int64_t peak_activation_bytes = 0;  // the largest of any step
};

TextClassificationResult run_job(const TextClassificationJob& job, RunDir& run, Progress& progress,
                                 StopRequest* stop = nullptr);
// "test accuracy: ...", "training: ...": what `multihead train` prints.
std::vector<std::string> summary_lines(const TextClassificationResult& result);

// A trained classifier run loaded back (tasks/loaded_run.h).
using LoadedTextClassifier = LoadedRun<TextClassificationJob, SequenceClassifier>;

// Examples as token ids with their labels, addressed by index.
struct TokenizedExamples {
  std::vector<std::vector<std::int64_t>> tokens;
  std::vector<std::int64_t> labels;
  TokenFrame frame;  // the tokenizer's (data/tokenizer.h)

  // Every example's index, 0 .. size - 1.
  std::vector<std::int64_t> all() const {
    std::vector<std::int64_t> idx(tokens.size());
    std::iota(idx.begin(), idx.end(), std::int64_t{0});
    return idx;
  }
};
// The test split of the job's data, split as training split it and
// tokenised by the run's tokenizer. Data whose classes are no longer the
// model's is a ConfigError naming both counts.
TokenizedExamples classifier_test_split(const TextClassificationJob& job, const Tokenizer& tok);
// The same examples as texts, with the names of the labels (what a benchmark
// or another framework reads to score the run on its own test data).
TextDataset classifier_test_texts(const TextClassificationJob& job);
// Those texts and their label names (tasks/model_sample.h).
TestTexts test_texts(const TextClassificationJob& job, const std::string& run_dir);

// Accuracy and mean loss over the examples idx, in batches of `batch`
// ([CLS] first, cut to max_len tokens; eval mode), taking a stop at each batch.
ClassificationMetrics evaluate_classifier(SequenceClassifier& model, const TokenizedExamples& examples,
                                          std::span<const std::int64_t> idx, std::int64_t batch, std::int64_t max_len,
                                          Precision precision, StopRequest* stop = nullptr);
// The same over every example.
ClassificationMetrics evaluate_classifier(SequenceClassifier& model, const TokenizedExamples& examples,
                                          std::int64_t batch, std::int64_t max_len, Precision precision);

// The full report over the examples idx (tasks/classification_report.h),
// `labels` naming the classes, evaluated as evaluate_classifier does.
ClassificationReport report_classifier(SequenceClassifier& model, const TokenizedExamples& examples,
                                       std::span<const std::int64_t> idx, const std::vector<std::string>& labels,
                                       std::int64_t batch, std::int64_t max_len, Precision precision,
                                       StopRequest* stop = nullptr);

// Training a sequence classifier on tokenised examples: batches of examples
// ([CLS] first, cut to max_len tokens), the cross-entropy of their labels;
// validation over the examples `validation`. Text classification and word
// stress train so.
class ClassifierTrainingTask final : public TrainingTask {
 public:
  // class_weights: PyTorch's CrossEntropyLoss weight, a weight a class (empty: none).
  ClassifierTrainingTask(SequenceClassifier& model, const TokenizedExamples& examples,
                         std::vector<std::int64_t> validation, std::int64_t max_len, std::int64_t eval_batch,
                         Precision precision, std::vector<double> class_weights = {})
      : model_(model),
        examples_(examples),
        validation_(std::move(validation)),
        max_len_(max_len),
        eval_batch_(eval_batch),
        precision_(precision),
        class_weights_(std::move(class_weights)) {}
  MicroBatchLoss micro_step(std::span<const std::int64_t> examples, const ForwardContext& ctx,
                            double grad_scale) override;
  Validation validate() override;

 private:
  SequenceClassifier& model_;
  const TokenizedExamples& examples_;
  std::vector<std::int64_t> validation_;
  std::int64_t max_len_, eval_batch_;
  Precision precision_;
  std::vector<double> class_weights_;
};

// The classifier's logits for the first settings.examples of the examples
// idx, batched as training batches them ([CLS] first, cut to max_len tokens).
ModelSample sample_classifier(SequenceClassifier& model, const TokenizedExamples& examples,
                              std::span<const std::int64_t> idx, std::int64_t max_len,
                              const ModelSampleSettings& settings);
// The run's model on the first examples of its test split (tasks/model_sample.h).
ModelSample sample_model(const TextClassificationJob& job, const std::string& run_dir,
                         const ModelSampleSettings& settings);

// The classes' names a run recorded in its results.json; a run without one
// has its classes' numbers, and says so in `warnings`.
std::vector<std::string> run_class_names(const std::string& dir, std::int64_t num_classes,
                                         std::vector<std::string>* warnings);

// The model saved in a run directory, whose config.json holds `job` (with
// the precision to evaluate in), scored on its test split or on the file
// req.data names (its labels those of the run's classes): accuracy, loss,
// per-class precision, recall and F1, the confusion matrix and calibration,
// as lines; with req.out, a folder with results.json, report.md and the figures.
std::vector<std::string> evaluate_run(const TextClassificationJob& job, const std::string& run_dir,
                                      const EvalRequest& req);

}  // namespace multihead
