// SPDX-License-Identifier: Apache-2.0
// Word stress from spelling: which syllable of an English word carries its
// primary stress, predicted from the letters alone by an encoder classifier
// (a [CLS] token pooled, as BERT classifies). The labels come from the CMU
// Pronouncing Dictionary, whose vowels carry stress digits (1 primary):
//   class 0: the first syllable (TA-ble), class 1: the second (a-BAN-don),
//   class 2: the third (en-ter-TAIN), class 3: a later one.
// Words of one syllable have no choice to make and are left out; so are
// words whose pronunciations stress different syllables (RECORD, the noun
// and the verb) and words with no primary stress marked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "multihead/nn/models.h"
#include "multihead/tasks/job_config.h"
#include "multihead/tasks/kinds.h"
#include "multihead/tasks/model_sample.h"
#include "multihead/tasks/pronunciation.h"
#include "multihead/train/fit.h"
#include "multihead/train/progress.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct WordStressJob : JobConfig<WordStressJob> {
  static constexpr const char* kTask = "word_stress";
  // In messages: "--tokenizer does not apply to word stress jobs"
  static constexpr const char* kNoun = "word stress jobs";
  static constexpr RunAnswers kAnswers = RunAnswers::kNone;  // tasks/kinds.h
  static constexpr ModelFamily kModel = ModelFamily::kSequenceClassifier;
  static constexpr std::int64_t kClasses = 4;
  // Letters as tokens: tokenizer.h's four special ids, then A-Z, ' - . (any
  // other character reads as unknown).
  static constexpr const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ'-.";
  static constexpr std::int64_t kLetterTokens = 4 + 29;
  std::string data_path = kCmudictPath;
  double validation_fraction = 0.05, test_fraction = 0.1;  // of the words
  std::int64_t max_letters = 32;                           // letters read of a word, [CLS] included
  std::int64_t eval_batch = 256;
  ModelConfig model;  // vocab_size and num_classes are the task's, set when it trains
  TrainConfig train;
  EpochBudget budget{3, 0};
  std::string report_title = "CMUdict: word stress from spelling";

  WordStressJob() { model.vocab_size = kLetterTokens, model.num_classes = kClasses; }

  void validate(const std::string& where) const;
  // The config's keys beside task, threads and title: one list that
  // from_json reads and to_json writes (tasks/job_config.h).
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& j) {
    k.section("data", [&](auto& d) {
      d("path", j.data_path).doc("the CMU Pronouncing Dictionary's file");
      d("validation_fraction", j.validation_fraction, between(0, 0.5))
          .doc("the share of the words held out to validate");
      d("test_fraction", j.test_fraction, Range{0, 0.5, true, false}).doc("the share of the words held out to test");
      d("max_letters", j.max_letters, between(2, 1024)).doc("letters read of a word, [CLS] included");
    });
    k("eval_batch", j.eval_batch, between(1, kMaxBatch)).doc("words a batch when validating and testing");
    k.model(j.model, kLetterTokens);
    k.train(j.train, &j.budget);
  }
};

// The class of a word's primary stress (0 to 3, as above) from its
// pronunciations, each a list of ARPAbet symbols with stress digits; none
// for a word of one syllable, with no primary stress, or whose
// pronunciations disagree.
std::optional<std::int64_t> stress_class(const std::vector<std::vector<std::string>>& pronunciations);
// "first syllable", "second syllable", "third syllable", "a later syllable".
const std::vector<std::string>& stress_class_names();

struct WordStressResult {
  double validation_accuracy = 0, test_accuracy = 0, test_loss = 0;
  double majority_accuracy = 0;  // always answering the training split's most common class
  std::int64_t test_words = 0;
  std::int64_t steps = 0;
  std::int64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient
  double train_seconds = 0;
  // "60 steps in 15.1 s (steps 49-60 in this run: 3.1 s)" (FitResult::steps_and_time); train_seconds
  // is the whole run's, over every invocation.
  std::string trained;
  std::int64_t peak_activation_bytes = 0;  // the largest of any step
};

WordStressResult run_job(const WordStressJob& job, RunDir& run, Progress& progress, StopRequest* stop = nullptr);
std::vector<std::string> summary_lines(const WordStressResult& result);

// The test accuracy of the model saved in a run directory whose config.json
// holds `job`, as a line.
std::vector<std::string> evaluate_run(const WordStressJob& job, const std::string& run_dir);
// The run's model on the first words of its test split (tasks/model_sample.h).
ModelSample sample_model(const WordStressJob& job, const std::string& run_dir, const ModelSampleSettings& settings);

}  // namespace multihead
