// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/word_stress.h"

#include <algorithm>
#include <array>

#include "multihead/data/cmudict.h"
#include "multihead/data/text_datasets.h"
#include "multihead/data/tokenizer.h"
#include "multihead/report/run_report.h"
#include "multihead/tasks/text_classification.h"

namespace multihead {

void WordStressJob::validate(const std::string& where) const {
  budget.validate(where);
  check<ConfigError>(validation_fraction + test_fraction < 1,
                     "{}: the validation and test fractions leave no words "
                     "to train on",
                     where);
}

std::optional<std::int64_t> stress_class(const std::vector<std::vector<std::string>>& pronunciations) {
  std::optional<std::int64_t> agreed;
  for (const auto& phonemes : pronunciations) {
    // Vowels are the symbols with a stress digit; the first primary one counts.
    std::int64_t vowels = 0, primary = -1;
    for (const std::string& p : phonemes) {
      const char digit = p.empty() ? '\0' : p.back();
      if (digit < '0' || digit > '2') continue;
      if (digit == '1' && primary < 0) primary = vowels;
      ++vowels;
    }
    if (vowels < 2 || primary < 0) return std::nullopt;
    const std::int64_t c = std::min<std::int64_t>(primary, WordStressJob::kClasses - 1);
    if (agreed && *agreed != c) return std::nullopt;
    agreed = c;
  }
  return agreed;
}

const std::vector<std::string>& stress_class_names() {
  static const std::vector<std::string> names = {"first syllable", "second syllable", "third syllable",
                                                 "a later syllable"};
  return names;
}

namespace {

// The dictionary's words that have a class, as letter ids and labels, split
// by word (with the job's seed).
struct StressData {
  TokenizedExamples examples;      // the words' letters, and their classes
  std::vector<std::string> words;  // as written, for the report's mistakes
  SplitIndices split;
};

std::vector<std::int64_t> encode_letters(const std::string& word) {
  static const std::string alphabet = WordStressJob::kAlphabet;
  std::vector<std::int64_t> ids;
  for (const std::string& ch : utf8_characters(word)) {
    const std::size_t at = ch.size() == 1 ? alphabet.find(ch[0]) : std::string::npos;
    ids.push_back(at == std::string::npos ? kUnkId : 4 + static_cast<std::int64_t>(at));
  }
  return ids;
}

StressData load_data(const WordStressJob& job) {
  const CmuDict dict = load_cmudict(job.data_path, true);
  StressData d;
  for (const CmuWord& w : dict.words)
    if (const std::optional<std::int64_t> c = stress_class(w.pronunciations)) {
      d.examples.tokens.push_back(encode_letters(w.word));
      d.examples.labels.push_back(*c);
      d.words.push_back(w.word);
    }
  const auto words = static_cast<std::int64_t>(d.examples.labels.size());
  d.split = split_indices(words, job.validation_fraction, job.test_fraction, job.train.seed);
  check<IoError>(!d.split.train.empty() && !d.split.test.empty(),
                 "{}: too few words of two or more syllables ({}) for the requested splits", job.data_path, words);
  return d;
}

ClassificationMetrics evaluate_split(SequenceClassifier& model, const StressData& d,
                                     const std::vector<std::int64_t>& idx, const WordStressJob& job,
                                     StopRequest* stop = nullptr) {
  return evaluate_classifier(model, d.examples, idx, job.eval_batch, job.max_letters, job.train.precision, stop);
}

std::string test_line(double accuracy, std::int64_t words, double loss) {
  return fmt::format("test accuracy: {:.2f}% ({} words), test loss {:.4f}", 100 * accuracy, words, loss);
}

}  // namespace

WordStressResult run_job(const WordStressJob& job_in, RunDir& run, Progress& progress, StopRequest* stop) {
  WordStressJob job = job_in;
  const StressData data = load_data(job);
  std::array<std::int64_t, WordStressJob::kClasses> counts{};
  for (std::int64_t i : data.split.train)
    ++counts[static_cast<std::size_t>(data.examples.labels[static_cast<std::size_t>(i)])];
  const auto majority = static_cast<std::int64_t>(std::max_element(counts.begin(), counts.end()) - counts.begin());
  progress.log(
      fmt::format("data: {} words of two or more syllables ({} train, {} validation, {} test); training "
                  "words by stressed syllable: {} first, {} second, {} third, {} later",
                  data.examples.labels.size(), data.split.train.size(), data.split.validation.size(),
                  data.split.test.size(), counts[0], counts[1], counts[2], counts[3]));

  job.model.vocab_size = WordStressJob::kLetterTokens;
  job.model.num_classes = WordStressJob::kClasses;
  job.model.max_len = at_least_max_len(job.model.max_len, job.max_letters, progress);
  job.train.set_steps(job.budget.steps(static_cast<std::int64_t>(data.split.train.size()), job.train.batch));

  ModelToTrain<SequenceClassifier> m(job.model, job.train, progress);
  ClassifierTrainingTask task(m.model, data.examples, data.split.validation, job.max_letters, job.eval_batch,
                              job.train.precision);
  FitPlan plan;
  plan.on_curves = live_curves(run);  // plots/*.png redrawn as it trains
  plan.epoch_examples = data.split.train;
  plan.throughput_key = "tokens_per_s";
  const FitResult fitted = fit(task, m.store, job.train, plan, described_config(job), run, progress, stop);

  WordStressResult r;
  if (fitted.validation) r.validation_accuracy = fitted.validation->accuracy.value_or(0);
  r.steps = fitted.steps;
  r.skipped_steps = fitted.skipped_steps;
  r.train_seconds = fitted.total_seconds;
  r.trained = fitted.steps_and_time();
  r.peak_activation_bytes = fitted.curves.memory.max_activation_bytes();
  const ClassificationReport test = report_classifier(m.model, data.examples, data.split.test, stress_class_names(),
                                                      job.eval_batch, job.max_letters, job.train.precision, stop);
  r.test_accuracy = test.accuracy, r.test_loss = test.loss, r.test_words = test.examples;
  r.majority_accuracy =
      static_cast<double>(std::count_if(
          data.split.test.begin(), data.split.test.end(),
          [&](std::int64_t i) { return data.examples.labels[static_cast<std::size_t>(i)] == majority; })) /
      static_cast<double>(data.split.test.size());
  run.append_metrics({{"step", r.steps}, {"test_loss", r.test_loss}, {"test_accuracy", r.test_accuracy}});
  run.write_results({{"test_accuracy", r.test_accuracy},
                     {"test_loss", r.test_loss},
                     {"majority_accuracy", r.majority_accuracy},
                     {"validation_accuracy", r.validation_accuracy},
                     {"train_seconds", r.train_seconds},
                     {"steps", r.steps},
                     {"skipped_steps", r.skipped_steps},
                     {"test_macro_f1", test.macro_f1},
                     {"test", to_json(test)},
                     {"labels", stress_class_names()}});
  RunReport report{job.report_title, {}, ""};
  report.rows = {
      {"test accuracy", fmt::format("{:.2f}% ({} words)", 100 * r.test_accuracy, r.test_words)},
      {"always the most common class", fmt::format("{:.2f}% ({})", 100 * r.majority_accuracy,
                                                   stress_class_names()[static_cast<std::size_t>(majority)])},
      {"validation accuracy", fmt::format("{:.2f}%", 100 * r.validation_accuracy)},
      {"training", fitted.summary()},
      {"model", job.model.describe(m.store.numel())},
      {"data", fmt::format("{}: {} words of two or more syllables, {} train / {} validation / {} test", job.data_path,
                           data.examples.labels.size(), data.split.train.size(), data.split.validation.size(),
                           data.split.test.size())}};
  std::vector<std::string> test_words;
  for (std::int64_t i : data.split.test) test_words.push_back(data.words[static_cast<std::size_t>(i)]);
  report.sections = errors_section(test, &test_words, run.file("plots"), "plots/", "test");
  write_run_report(run, fitted, report);
  return r;
}

std::vector<std::string> summary_lines(const WordStressResult& r) {
  return {test_line(r.test_accuracy, r.test_words, r.test_loss),
          fmt::format("always the most common class: {:.2f}%", 100 * r.majority_accuracy),
          fmt::format("training: {}", r.trained)};
}

ModelSample sample_model(const WordStressJob& job, const std::string& run_dir, const ModelSampleSettings& settings) {
  TrainedModel<SequenceClassifier> m(job.model, run_dir);
  const StressData data = load_data(job);
  return sample_classifier(m.model, data.examples, data.split.test, job.max_letters, settings);
}

std::vector<std::string> evaluate_run(const WordStressJob& job, const std::string& run_dir) {
  TrainedModel<SequenceClassifier> m(job.model, run_dir, job.train.precision);
  const StressData data = load_data(job);
  const ClassificationMetrics test = evaluate_split(m.model, data, data.split.test, job);
  check_finite_result("the test loss", test.loss);
  return {test_line(test.accuracy, test.examples, test.loss)};
}

}  // namespace multihead
