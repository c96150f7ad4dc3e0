// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/text_classification.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "multihead/core/suggest.h"
#include "multihead/data/batching.h"
#include "multihead/data/text_datasets.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/nn/state_dict.h"
#include "multihead/report/run_report.h"
#include "multihead/tasks/attention_explorer.h"
#include "multihead/tasks/evaluation.h"
#include "multihead/tasks/trained_run.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/fit.h"
#include "multihead/train/hf_checkpoint.h"
#include "multihead/train/resume.h"

namespace multihead {

using json = nlohmann::json;

namespace {

const std::vector<std::string> kDataSources = {"spamassassin", "aclimdb", "csv", "tsv", "jsonl"};

// A classifier run's class names, in the order of the model's outputs.
constexpr const char* kLabelsFile = "labels.json";

}  // namespace

TextClassificationJob::TextClassificationJob() {
  model.vocab_size = tokenizer.vocab_size;  // until the tokenizer is trained
  train.schedule.base_lr = 1e-3;
  train.schedule.warmup_ratio = 0.1;
  train.schedule.decay = Decay::kCosine;
  train.clip_grad_norm = 1.0;
}

void TextClassificationJob::validate(const std::string& where) const {
  budget.validate(where);
  check<ConfigError>(class_weights == "none" || class_weights == "balanced",
                     "{}: class_weights must be none or balanced, got '{}'{}", where, clip_text(class_weights),
                     did_you_mean(class_weights, {"none", "balanced"}));
  check<ConfigError>(max_len > 1, "{}: max_len must be at least 2, got {}", where, max_len);
}

namespace {

struct PreparedData {
  TextDataset dataset;
  std::vector<std::int64_t> train, validation, test;
};

// The dataset's split by the job's seed and fractions, stratified by class unless the job says not.
SplitIndices split(const TextClassificationJob& job, const TextDataset& ds, double test_fraction) {
  if (!job.stratify)
    return split_indices(static_cast<std::int64_t>(ds.examples.size()), job.validation_fraction, test_fraction,
                         job.train.seed);
  std::vector<std::int64_t> labels;
  for (const TextExample& e : ds.examples) labels.push_back(e.label);
  return stratified_split_indices(labels, job.validation_fraction, test_fraction, job.train.seed);
}

PreparedData load_and_split(const TextClassificationJob& job_in) {
  PreparedData p;
  TextClassificationJob job = job_in;
  job.source = data_source(job);
  // A labelled file given to a corpus source reads as a missing corpus: name the flag instead.
  const std::string format = labelled_format_of(job.data_path);
  check<ConfigError>(format.empty() || (job.source != "spamassassin" && job.source != "aclimdb") ||
                         std::filesystem::is_directory(job.data_path),
                     "{} is a {} file, and the {} source reads its corpus's folder; give --source {} (or leave "
                     "--source out: the extension names the format)",
                     job.data_path, format, job.source, format);
  if (job.source == "aclimdb") {
    TextDataset tr = load_aclimdb(job.data_path, "train"), te = load_aclimdb(job.data_path, "test");
    SplitIndices s = split(job, tr, 0.0);
    p.dataset = std::move(tr);
    p.train = std::move(s.train);
    p.validation = std::move(s.validation);
    const std::int64_t base = static_cast<std::int64_t>(p.dataset.examples.size());
    for (auto& e : te.examples) p.dataset.examples.push_back(std::move(e));
    for (std::int64_t i = base; i < static_cast<std::int64_t>(p.dataset.examples.size()); ++i) p.test.push_back(i);
    return p;
  }
  if (job.source == "spamassassin") {
    check<IoError>(std::filesystem::is_directory(job.data_path),
                   "{}: the SpamAssassin corpus is not there; run scripts/setup.sh --data first", job.data_path);
    p.dataset = load_spamassassin(job.data_path, job.strip_headers);
  } else if (job.source == "csv" || job.source == "tsv" || job.source == "jsonl") {
    p.dataset = load_labelled_file(job.data_path, job.source, job.text_column, job.label_column);
    if (job.strip_headers)
      for (TextExample& e : p.dataset.examples) e.text = strip_mail_headers(e.text);
  } else {
    throw ConfigError(fmt::format("data source must be spamassassin, aclimdb, csv, tsv or jsonl, got '{}'{}",
                                  clip_text(job.source), did_you_mean(job.source, kDataSources)));
  }
  check_two_classes(p.dataset, job.data_path);
  SplitIndices s = split(job, p.dataset, job.test_fraction);
  p.train = std::move(s.train), p.validation = std::move(s.validation), p.test = std::move(s.test);
  check<IoError>(!p.train.empty() && !p.test.empty(), "{}: too few examples ({}) for the requested splits",
                 job.data_path, p.dataset.examples.size());
  return p;
}

// The token sequences and labels of the examples idx.
struct Gathered {
  std::vector<const std::vector<std::int64_t>*> seqs;
  std::vector<std::int64_t> labels;
};
Gathered gather(const TokenizedExamples& examples, std::span<const std::int64_t> idx) {
  Gathered g;
  for (std::int64_t i : idx) {
    g.seqs.push_back(&examples.tokens[static_cast<std::size_t>(i)]);
    g.labels.push_back(examples.labels[static_cast<std::size_t>(i)]);
  }
  return g;
}

// Accuracy and mean loss over the sequences seqs[i] with labels[i], in batches.
ClassificationMetrics evaluate_sequences(SequenceClassifier& model,
                                         const std::vector<const std::vector<std::int64_t>*>& seqs,
                                         const std::vector<std::int64_t>& labels, const TokenFrame& frame,
                                         std::int64_t batch, std::int64_t max_len, Precision precision,
                                         StopRequest* stop = nullptr, std::vector<double>* probabilities = nullptr) {
  ClassificationMetrics m;
  const ForwardContext ctx = eval_context(precision);
  double loss_sum = 0;
  std::int64_t correct = 0;
  for (std::size_t b0 = 0; b0 < seqs.size(); b0 += static_cast<std::size_t>(batch)) {
    stop_point(stop);
    const std::size_t b1 = std::min(seqs.size(), b0 + static_cast<std::size_t>(batch));
    const std::vector<const std::vector<std::int64_t>*> part(seqs.begin() + static_cast<std::ptrdiff_t>(b0),
                                                             seqs.begin() + static_cast<std::ptrdiff_t>(b1));
    const std::vector<std::int64_t> part_labels(labels.begin() + static_cast<std::ptrdiff_t>(b0),
                                                labels.begin() + static_cast<std::ptrdiff_t>(b1));
    TokenBatch tb = make_token_batch(part, part_labels, max_len, frame);
    Tensor logits = model.forward(tb.ids, &tb.padding, ctx);
    const std::int64_t B = logits.dim(0), C = logits.dim(1);
    loss_sum += cross_entropy<float>(nullptr, logits.f32(), tb.labels.data<std::int64_t>(), B, C).loss * B;
    for (std::int64_t r = 0; r < B; ++r) {
      const float* z = logits.f32() + r * C;
      if (std::max_element(z, z + C) - z == part_labels[static_cast<std::size_t>(r)]) ++correct;
      if (probabilities) append_probabilities(*probabilities, z, C);
    }
    model.release_saved();
    m.examples += B;
  }
  m.loss = m.examples ? loss_sum / static_cast<double>(m.examples) : 0.0;
  m.accuracy = m.examples ? static_cast<double>(correct) / static_cast<double>(m.examples) : 0.0;
  return m;
}

}  // namespace

ClassificationMetrics evaluate_classifier(SequenceClassifier& model, const TokenizedExamples& examples,
                                          std::span<const std::int64_t> idx, std::int64_t batch, std::int64_t max_len,
                                          Precision precision, StopRequest* stop) {
  const Gathered g = gather(examples, idx);
  return evaluate_sequences(model, g.seqs, g.labels, examples.frame, batch, max_len, precision, stop);
}

ClassificationMetrics evaluate_classifier(SequenceClassifier& model, const TokenizedExamples& examples,
                                          std::int64_t batch, std::int64_t max_len, Precision precision) {
  return evaluate_classifier(model, examples, examples.all(), batch, max_len, precision);
}

ClassificationReport report_classifier(SequenceClassifier& model, const TokenizedExamples& examples,
                                       std::span<const std::int64_t> idx, const std::vector<std::string>& labels,
                                       std::int64_t batch, std::int64_t max_len, Precision precision,
                                       StopRequest* stop) {
  const Gathered g = gather(examples, idx);
  std::vector<double> probabilities;
  const ClassificationMetrics m =
      evaluate_sequences(model, g.seqs, g.labels, examples.frame, batch, max_len, precision, stop, &probabilities);
  check_finite_result("the loss", m.loss);
  return classification_report(probabilities, g.labels, labels, m.loss);
}

MicroBatchLoss ClassifierTrainingTask::micro_step(std::span<const std::int64_t> examples, const ForwardContext& ctx,
                                                  double grad_scale) {
  const Gathered g = gather(examples_, examples);
  TokenBatch tb = make_token_batch(g.seqs, g.labels, max_len_, examples_.frame);
  Tensor logits = model_.forward(tb.ids, &tb.padding, ctx);
  return {cross_entropy_backward(model_, logits, tb.labels.data<std::int64_t>(), grad_scale, 0.0,
                                 class_weights_.empty() ? nullptr : class_weights_.data()),
          tb.tokens};
}

Validation ClassifierTrainingTask::validate() {
  const ClassificationMetrics m =
      evaluate_classifier(model_, examples_, validation_, eval_batch_, max_len_, precision_);
  return {m.loss, m.accuracy, m.examples};
}

namespace {

// Every example's tokens and label.
TokenizedExamples encode_all(const Tokenizer& tok, const TextDataset& ds) {
  TokenizedExamples out;
  out.frame = tok.frame();
  out.tokens.resize(ds.examples.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (std::size_t i = 0; i < ds.examples.size(); ++i) out.tokens[i] = tok.encode(ds.examples[i].text);
  for (const auto& e : ds.examples) out.labels.push_back(e.label);
  return out;
}

}  // namespace

// The report's attention: every layer's and head's weights for one test
// example, as heatmaps (its first 48 tokens) and in the explorer.
std::string attention_section(SequenceClassifier& model, const Tokenizer& tok, const std::vector<std::int64_t>& ids,
                              std::int64_t label_id, const std::vector<std::string>& labels,
                              const TextClassificationJob& job, RunDir& run) {
  const std::string& label = labels[static_cast<std::size_t>(label_id)];
  const AttentionMaps first =
      classifier_attention(model, tok, ids, std::min<std::int64_t>(job.max_len, 48), labels, Precision::kF32);
  const std::vector<std::string> heatmaps =
      write_heatmaps(first, run.file("plots"), "attention_layer", fmt::format(" (label: {})", label), kReportHeatmaps);
  std::string s =
      "## Attention\n\nSelf-attention weights of every head for the first test example (first 48 tokens; rows "
      "are queries, columns keys; colours from 0 to each head's largest weight).\n\n";
  AttentionMaps whole = classifier_attention(model, tok, ids, job.max_len, labels, Precision::kF32, true);
  s += report_explorer(
      run, {job.report_title,
            fmt::format("the first test example ({} tokens, label {}, predicted {})", whole.T, label, whole.prediction),
            {std::move(whole)}});
  if (static_cast<std::int64_t>(heatmaps.size()) < first.layers * first.heads)
    s += fmt::format(
        "{} of the {} heads' maps are drawn below, of layers evenly spaced from the first to the last; "
        "the explorer holds every one.\n\n",
        heatmaps.size(), first.layers * first.heads);
  for (const auto& f : heatmaps) s += fmt::format("![{0}](plots/{0})\n", f);
  return s;
}

std::vector<double> class_weights_of(const TextClassificationJob& job, const std::vector<std::int64_t>& labels,
                                     std::span<const std::int64_t> train, std::int64_t classes) {
  if (job.class_weights == "none") return {};
  std::vector<double> count(static_cast<std::size_t>(classes));
  for (std::int64_t i : train) ++count[static_cast<std::size_t>(labels[static_cast<std::size_t>(i)])];
  std::vector<double> w(count.size());
  // A class absent from training has no examples to weigh: 0, as it adds nothing to the loss anyway.
  for (std::size_t c = 0; c < w.size(); ++c)
    w[c] = count[c] > 0 ? static_cast<double>(train.size()) / (static_cast<double>(classes) * count[c]) : 0.0;
  return w;
}

std::string data_source(const TextClassificationJob& job) {
  check<ConfigError>(!job.data_path.empty() || !job.source.empty(),
                     "no data given: name a labelled file with --data (csv, tsv or jsonl), or a preset with --preset");
  check<ConfigError>(!job.data_path.empty(), "no data path given for source '{}'", job.source);
  if (!job.source.empty()) return job.source;
  std::string format = labelled_format_of(job.data_path);
  check<ConfigError>(!format.empty(),
                     "{}: cannot tell the data's format from its name; give --source (csv, tsv, jsonl, or "
                     "spamassassin or aclimdb for those corpora's folders)",
                     job.data_path);
  return format;
}

std::string title_of(const TextClassificationJob& job) {
  if (!job.report_title.empty()) return job.report_title;
  if (job.source == "spamassassin") return "SpamAssassin: ham against spam";
  if (job.source == "aclimdb") return "IMDb reviews: negative against positive";
  const std::string name = std::filesystem::path(job.data_path).filename().string();
  return name.empty() ? "Text classification" : "Text classification: " + name;
}

TextClassificationResult run_job(const TextClassificationJob& job_in, RunDir& run, Progress& progress,
                                 StopRequest* stop) {
  TextClassificationJob job = job_in;
  job.source = data_source(job);  // config.json records the format the extension named
  job.report_title = title_of(job);
  PreparedData data = load_and_split(job);
  progress.log(fmt::format("data: {} examples ({} train, {} validation, {} test), labels {}",
                           data.dataset.examples.size(), data.train.size(), data.validation.size(), data.test.size(),
                           fmt::join(data.dataset.label_names, "/")));
  for (const auto& e : data.dataset.examples)
    check<IoError>(e.label >= 0 && e.label < static_cast<std::int64_t>(data.dataset.label_names.size()),
                   "{}: label {} is out of range", job.data_path, e.label);

  // The classes' names before anything is trained: a stopped run predicts them too.
  if (run.writes()) run.write_json(kLabelsFile, {{"labels", data.dataset.label_names}});
  std::vector<std::string> train_texts;
  for (std::int64_t i : data.train) train_texts.push_back(data.dataset.examples[static_cast<std::size_t>(i)].text);
  std::unique_ptr<Tokenizer> tok = run_tokenizer(run, job.tokenizer, train_texts, &progress);
  const TokenizedExamples encoded = encode_all(*tok, data.dataset);
  progress.log(fmt::format("tokenizer: {} with {} tokens", tok->kind(), tok->vocab_size()));

  job.model.vocab_size = tok->vocab_size();
  job.model.num_classes = static_cast<std::int64_t>(data.dataset.label_names.size());
  job.model.max_len = at_least_max_len(job.model.max_len, job.max_len, progress);
  job.train.set_steps(job.budget.steps(static_cast<std::int64_t>(data.train.size()), job.train.batch));

  ModelToTrain<SequenceClassifier> m(job.model, job.train, progress);
  const std::vector<double> weights = class_weights_of(job, encoded.labels, data.train, job.model.num_classes);
  if (!weights.empty())
    progress.log(fmt::format("class weights ({}): {:.3f}", job.class_weights, fmt::join(weights, ", ")));
  ClassifierTrainingTask task(m.model, encoded, data.validation, job.max_len, job.eval_batch, job.train.precision,
                              weights);
  FitPlan plan;
  plan.on_curves = live_curves(run);  // plots/*.png redrawn as it trains
  plan.epoch_examples = data.train;
  plan.throughput_key = "tokens_per_s";
  const FitResult fitted = fit(task, m.store, job.train, plan, described_config(job), run, progress, stop);

  TextClassificationResult result;
  if (fitted.validation)
    result.validation = {fitted.validation->loss, fitted.validation->accuracy.value_or(0), fitted.validation->examples};
  result.train_seconds = fitted.total_seconds;
  result.trained = fitted.steps_and_time(fmt::format("{:.0f} tokens/s", fitted.items_per_s));
  result.steps = fitted.steps;
  result.skipped_steps = fitted.skipped_steps;
  result.tokens_per_s = fitted.items_per_s;
  result.peak_activation_bytes = fitted.curves.memory.max_activation_bytes();
  const ClassificationReport scored = report_classifier(m.model, encoded, data.test, data.dataset.label_names,
                                                        job.eval_batch, job.max_len, job.train.precision, stop);
  result.test = {scored.loss, scored.accuracy, scored.examples};
  // A two-class run's thresholds for a precision, chosen on the validation split (the test split
  // stays unseen by the choice): what a deployer passes to predict --threshold or serve.
  nlohmann::json thresholds = nlohmann::json::array();
  std::string chosen;
  if (scored.binary && !data.validation.empty()) {
    const ClassificationReport validated =
        report_classifier(m.model, encoded, data.validation, data.dataset.label_names, job.eval_batch, job.max_len,
                          job.train.precision, stop);
    if (validated.binary && !std::isnan(validated.binary->roc_auc))
      for (const auto& [goal, t] : precision_goal_thresholds(*validated.binary)) {
        thresholds.push_back({{"precision_goal", goal},
                              {"threshold", t.threshold},
                              {"validation_precision", t.precision},
                              {"validation_recall", t.recall}});
        chosen += fmt::format("{}precision >= {:.2f}: --threshold {:.4g} (recall {:.4f})", chosen.empty() ? "" : "; ",
                              goal, t.threshold, t.recall);
      }
  }
  run.append_metrics(
      {{"step", result.steps}, {"test_loss", result.test.loss}, {"test_accuracy", result.test.accuracy}});
  run.write_results({{"thresholds", thresholds},
                     {"test_accuracy", result.test.accuracy},
                     {"test_loss", result.test.loss},
                     {"test_macro_f1", scored.macro_f1},
                     {"test", to_json(scored)},
                     {"validation_accuracy", result.validation.accuracy},
                     {"train_seconds", result.train_seconds},
                     {"steps", result.steps},
                     {"skipped_steps", result.skipped_steps},
                     {"tokens_per_s", result.tokens_per_s},
                     {"labels", data.dataset.label_names}});

  RunReport report{job.report_title, {}, ""};
  report.rows = {
      {"test accuracy", fmt::format("{:.2f}% ({} examples)", 100 * result.test.accuracy, result.test.examples)},
      {"test loss", fmt::format("{:.4f}", result.test.loss)},
      {"validation accuracy", fmt::format("{:.2f}%", 100 * result.validation.accuracy)},
      {"training", fitted.summary()},
      {"model", job.model.describe(m.store.numel())},
      {"data", fmt::format("{} ({}), {} train / {} validation / {} test", job.source, job.data_path, data.train.size(),
                           data.validation.size(), data.test.size())},
      {"tokenizer", fmt::format("{} ({} tokens)", tok->kind(), tok->vocab_size())}};
  std::vector<std::string> test_texts;
  for (std::int64_t i : data.test) test_texts.push_back(data.dataset.examples[static_cast<std::size_t>(i)].text);
  report.rows.insert(report.rows.begin() + 2, {"test macro F1", fmt::format("{:.4f}", scored.macro_f1)});
  if (!chosen.empty()) report.rows.push_back({"thresholds (chosen on the validation split)", chosen});
  if (scored.binary && !std::isnan(scored.binary->roc_auc))
    report.rows.insert(
        report.rows.begin() + 3,
        {"test ROC AUC", fmt::format("{:.4f} (average precision {:.4f}; positive class {})", scored.binary->roc_auc,
                                     scored.binary->average_precision, scored.labels[1])});
  const std::string errors = errors_section(scored, &test_texts, run.file("plots"), "plots/", "test");
  report.sections =
      errors + (job.model.layer.pattern.has_weights()
                    ? attention_section(m.model, *tok, encoded.tokens[static_cast<std::size_t>(data.test.front())],
                                        data.dataset.examples[static_cast<std::size_t>(data.test.front())].label,
                                        data.dataset.label_names, job, run)
                    : std::string(kNoAttentionWeights));
  write_run_report(run, fitted, report);
  return result;
}

namespace {

std::string test_line(const ClassificationMetrics& m) {
  return fmt::format("test accuracy: {:.2f}% ({} examples), test loss {:.4f}", 100 * m.accuracy, m.examples, m.loss);
}

}  // namespace

std::vector<std::string> summary_lines(const TextClassificationResult& r) {
  return {test_line(r.test), fmt::format("training: {}", r.trained)};
}

TextDataset classifier_test_texts(const TextClassificationJob& job) {
  PreparedData data = load_and_split(job);
  const auto classes = static_cast<std::int64_t>(data.dataset.label_names.size());
  check<ConfigError>(classes == job.model.num_classes, "{} now has {} classes; the run's model was trained on {}",
                     job.data_path, classes, job.model.num_classes);
  TextDataset out;
  out.label_names = std::move(data.dataset.label_names);
  for (std::int64_t i : data.test)
    out.examples.push_back(std::move(data.dataset.examples[static_cast<std::size_t>(i)]));
  return out;
}

TestTexts test_texts(const TextClassificationJob& job, const std::string&) {
  TextDataset test = classifier_test_texts(job);
  TestTexts out;
  for (TextExample& e : test.examples) {
    out.inputs.push_back(std::move(e.text));
    out.answers.push_back(test.label_names[static_cast<std::size_t>(e.label)]);
  }
  return out;
}

TokenizedExamples classifier_test_split(const TextClassificationJob& job, const Tokenizer& tok) {
  TokenizedExamples out;
  out.frame = tok.frame();
  for (const TextExample& e : classifier_test_texts(job).examples) {
    out.tokens.push_back(tok.encode(e.text));
    out.labels.push_back(e.label);
  }
  return out;
}

ModelSample sample_classifier(SequenceClassifier& model, const TokenizedExamples& examples,
                              std::span<const std::int64_t> idx, std::int64_t max_len,
                              const ModelSampleSettings& settings) {
  const Gathered g = gather(examples, idx.first(std::min<std::size_t>(idx.size(), settings.examples)));
  TokenBatch tb = make_token_batch(g.seqs, g.labels, max_len, examples.frame);
  Tensor logits = model.forward(tb.ids, &tb.padding, settings.context());
  model.release_saved();
  return std::move(
      ModelSample(std::move(logits)).input("ids", std::move(tb.ids)).input("padding", std::move(tb.padding)));
}

ModelSample sample_model(const TextClassificationJob& job, const std::string& run_dir,
                         const ModelSampleSettings& settings) {
  LoadedTextClassifier r(job, run_dir);
  const TokenizedExamples test = classifier_test_split(r.job, *r.tokenizer);
  return sample_classifier(r.model(), test, test.all(), r.job.max_len, settings);
}

std::vector<std::string> run_class_names(const std::string& dir, std::int64_t num_classes,
                                         std::vector<std::string>* warnings) {
  if (is_hf_checkpoint(dir)) return read_hf_checkpoint(dir).labels;  // config.json's id2label
  // labels.json names the classes from the run's start (a stopped run's
  // too); a run made before it existed has them in results.json, and one
  // made before that, nowhere: its classes are their numbers, and the run says so.
  std::filesystem::path results = std::filesystem::path(dir) / kLabelsFile;
  if (!std::filesystem::exists(results)) results = std::filesystem::path(dir) / "results.json";
  std::vector<std::string> labels;
  if (!std::filesystem::exists(results)) {
    if (warnings)
      warnings->push_back(fmt::format("{} has no {}: the classes are named by their numbers, 0 to {}", dir, kLabelsFile,
                                      num_classes - 1));
    for (std::int64_t c = 0; c < num_classes; ++c) labels.push_back(std::to_string(c));
    return labels;
  }
  const nlohmann::json r = ConfigReader::parse(read_file(results.string()), results.string());
  check<IoError>(r.is_object() && r.contains("labels") && r["labels"].is_array(),
                 "{}: lacks the list of class names (\"labels\") that the run recorded", results.string());
  check<IoError>(static_cast<std::int64_t>(r["labels"].size()) == num_classes,
                 "{}: lists {} class names, but the model has {} classes", results.string(), r["labels"].size(),
                 num_classes);
  for (const auto& l : r["labels"]) {
    check<IoError>(l.is_string(), "{}: a class name is not a string: {}", results.string(), l.dump());
    // Two classes of one name: a prediction could not say which it means.
    check<IoError>(std::find(labels.begin(), labels.end(), l.get<std::string>()) == labels.end(),
                   "{}: the class name '{}' is given twice", results.string(), clip_text(l.get<std::string>(), 40));
    labels.push_back(l.get<std::string>());
  }
  return labels;
}

namespace {

// The labelled file a request names, its classes renumbered as the run's:
// a class the model does not know is an error naming the ones it does.
TextDataset eval_file(const TextClassificationJob& job, const EvalRequest& req, const std::vector<std::string>& names) {
  std::string format = req.format;
  if (format.empty()) {
    format = labelled_format_of(req.data);
    if (format.empty() && (job.source == "csv" || job.source == "tsv" || job.source == "jsonl")) format = job.source;
    check<ConfigError>(!format.empty(),
                       "{}: cannot tell the format from the extension; give --source csv, tsv or jsonl", req.data);
  }
  TextDataset ds = load_labelled_file(req.data, format, req.text_column.empty() ? job.text_column : req.text_column,
                                      req.label_column.empty() ? job.label_column : req.label_column);
  std::vector<std::int64_t> to_run(ds.label_names.size(), -1);
  for (std::size_t i = 0; i < ds.label_names.size(); ++i) {
    const auto it = std::find(names.begin(), names.end(), ds.label_names[i]);
    if (it != names.end()) to_run[i] = it - names.begin();
  }
  for (TextExample& e : ds.examples) {
    const std::int64_t c = to_run[static_cast<std::size_t>(e.label)];
    check<IoError>(c >= 0, "{}: the label '{}' is not one of the run's classes ({})", req.data,
                   clip_text(ds.label_names[static_cast<std::size_t>(e.label)], 40), fmt::join(names, ", "));
    e.label = c;
    if (job.strip_headers) e.text = strip_mail_headers(e.text);
  }
  ds.label_names = names;
  return ds;
}

}  // namespace

std::vector<std::string> evaluate_run(const TextClassificationJob& job, const std::string& run_dir,
                                      const EvalRequest& req) {
  LoadedTextClassifier r(job, run_dir);
  TextDataset data;
  if (req.data.empty()) {
    data = classifier_test_texts(r.job);
  } else {
    data = eval_file(r.job, req, run_class_names(run_dir, r.job.model.num_classes, nullptr));
  }
  TokenizedExamples examples;
  examples.frame = r.tokenizer->frame();
  std::vector<std::string> texts;
  for (TextExample& e : data.examples) {
    examples.tokens.push_back(r.tokenizer->encode(e.text));
    examples.labels.push_back(e.label);
    texts.push_back(std::move(e.text));
  }
  const ClassificationReport scored = report_classifier(r.model(), examples, examples.all(), data.label_names,
                                                        r.job.eval_batch, r.job.max_len, r.job.train.precision);
  const std::string what = req.data.empty() ? "test" : std::filesystem::path(req.data).filename().string();
  if (!req.out.empty()) {
    std::filesystem::create_directories(std::filesystem::path(req.out) / "plots");
    const std::string section = errors_section(scored, &texts, req.out + "/plots", "plots/", what);
    nlohmann::json results = to_json(scored);
    results["run"] = run_dir;
    results["data"] = req.data.empty() ? "the run's test split" : req.data;
    results["precision"] = std::string(precision_name(r.job.train.precision));
    write_file_atomic(req.out + "/results.json", results.dump(2) + "\n");
    write_file_atomic(req.out + "/report.md",
                      fmt::format("# {}: evaluation on {}\n\nRun `{}`.\n\n{}", title_of(r.job),
                                  req.data.empty() ? "its test split" : "`" + req.data + "`", run_dir, section));
  }
  std::vector<std::string> lines = {
      fmt::format("{} accuracy: {:.2f}% ({} examples), {} loss {:.4f}", what, 100 * scored.accuracy, scored.examples,
                  what, scored.loss),
      fmt::format("macro F1 {:.4f}, weighted F1 {:.4f}, expected calibration error {:.4f}", scored.macro_f1,
                  scored.weighted_f1, scored.ece),
      ""};
  std::string table = markdown(scored, nullptr);
  table.pop_back();  // the last newline: each line is printed with one
  lines.push_back(std::move(table));
  if (!req.out.empty()) lines.push_back(fmt::format("\nreport: {}/report.md", req.out));
  return lines;
}

}  // namespace multihead
