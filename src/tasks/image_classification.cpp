// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/image_classification.h"

#include <algorithm>
#include <filesystem>

#include "multihead/data/batching.h"
#include "multihead/data/idx.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/nn/state_dict.h"
#include "multihead/report/run_report.h"
#include "multihead/tasks/attention_explorer.h"
#include "multihead/tasks/classification_report.h"
#include "multihead/tasks/inspect.h"
#include "multihead/train/fit.h"

namespace multihead {

using json = nlohmann::json;
namespace fs = std::filesystem;

// results.json: the result but its peak memory (in the metrics and the report).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ImageClassificationResult, test_accuracy, test_loss, validation_accuracy,
                                   train_seconds, steps, skipped_steps)

ImageClassificationJob::ImageClassificationJob() {
  model.layer.d_model = 64;
  model.layer.nhead = 4;
  model.layer.dim_feedforward = 128;
  model.layer.norm_first = true;
}

void ImageClassificationJob::validate(const std::string& where) const {
  budget.validate(where);
  check<ConfigError>(validation_examples >= 0 && limit_train >= 0,
                     "{}: validation_examples and limit_train must be >= 0", where);
  model.validate();
}

namespace {

struct Images {
  Tensor pixels;  // (N, 1, S, S), normalised
  std::vector<std::int64_t> labels;
};

fs::path idx_file(const std::string& dir, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    fs::path p = fs::path(dir) / (stem + ext);
    if (fs::exists(p)) return p;
  }
  throw IoError(
      fmt::format("{}: no {} or {}.gz (install dataset-fashion-mnist with scripts/setup.sh --data)", dir, stem, stem));
}

Images load_split(const std::string& dir, const std::string& split, std::int64_t size) {
  const fs::path ip = idx_file(dir, split + "-images-idx3-ubyte"), lp = idx_file(dir, split + "-labels-idx1-ubyte");
  IdxArray im = read_idx(ip.string()), lb = read_idx(lp.string());
  check<IoError>(im.shape.size() == 3 && im.shape[1] == size && im.shape[2] == size, "{}: expected (N, {}, {}) images",
                 ip.string(), size, size);
  check<IoError>(lb.shape.size() == 1 && lb.shape[0] == im.shape[0], "{}: {} labels for {} images", lp.string(),
                 lb.shape.empty() ? 0 : lb.shape[0], im.shape[0]);
  Images out{Tensor::empty({im.shape[0], 1, size, size}), {}};
  // Fashion-MNIST's pixel mean and standard deviation (0.286, 0.353) on [0, 1].
  for (std::size_t i = 0; i < im.data.size(); ++i)
    out.pixels.f32()[i] = (static_cast<float>(im.data[i]) / 255.0f - 0.286f) / 0.353f;
  for (std::uint8_t l : lb.data) {
    check<IoError>(l < 10, "{}: label {} is out of range", lp.string(), static_cast<int>(l));
    out.labels.push_back(l);
  }
  return out;
}

Tensor gather(const Tensor& pixels, const std::vector<std::int64_t>& idx) {
  const std::int64_t per = pixels.numel() / pixels.dim(0);
  Shape s = pixels.shape();
  s[0] = static_cast<std::int64_t>(idx.size());
  Tensor out = Tensor::empty(s);
  for (std::size_t i = 0; i < idx.size(); ++i)
    std::memcpy(out.f32() + static_cast<std::int64_t>(i) * per, pixels.f32() + idx[i] * per,
                sizeof(float) * static_cast<std::size_t>(per));
  return out;
}

// Mean loss and accuracy over the images idx; with `probabilities`, each
// image's class probabilities appended ((N, C), append_probabilities).
std::pair<double, double> evaluate(VisionTransformer& model, const Images& data, const std::vector<std::int64_t>& idx,
                                   Precision precision, StopRequest* stop = nullptr,
                                   std::vector<double>* probabilities = nullptr) {
  double loss = 0;
  std::int64_t correct = 0;
  for (const auto& b : epoch_batches(idx, 256, 0, 0, false)) {
    stop_point(stop);
    Tensor x = gather(data.pixels, b);
    std::vector<std::int64_t> labels;
    for (auto i : b) labels.push_back(data.labels[static_cast<std::size_t>(i)]);
    Tensor logits = model.forward(x, eval_context(precision));
    const std::int64_t B = logits.dim(0), C = logits.dim(1);
    loss += cross_entropy<float>(nullptr, logits.f32(), labels.data(), B, C).loss * static_cast<double>(B);
    for (std::int64_t r = 0; r < B; ++r) {
      const float* z = logits.f32() + r * C;
      correct += std::max_element(z, z + C) - z == labels[static_cast<std::size_t>(r)];
      if (probabilities) append_probabilities(*probabilities, z, C);
    }
    model.release_saved();
  }
  const double n = static_cast<double>(idx.size());
  return {loss / n, static_cast<double>(correct) / n};
}

}  // namespace

std::vector<std::string> evaluate_run(const ImageClassificationJob& job, const std::string& run_dir) {
  TrainedModel<VisionTransformer> m(job.model, run_dir, job.train.precision);
  Images test = load_split(job.data_dir, "t10k", job.model.image_size);
  std::vector<std::int64_t> idx(test.labels.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(i);
  const auto [loss, accuracy] = evaluate(m.model, test, idx, job.train.precision);
  check_finite_result("the test loss", loss);
  return {fmt::format("test accuracy: {:.2f}%, test loss {:.4f}", 100 * accuracy, loss)};
}

ModelSample sample_model(const ImageClassificationJob& job, const std::string& run_dir,
                         const ModelSampleSettings& settings) {
  TrainedModel<VisionTransformer> m(job.model, run_dir);
  const Images test = load_split(job.data_dir, "t10k", job.model.image_size);
  std::vector<std::int64_t> idx;
  for (std::int64_t i = 0; i < std::min<std::int64_t>(settings.examples, static_cast<std::int64_t>(test.labels.size()));
       ++i)
    idx.push_back(i);
  Tensor images = gather(test.pixels, idx);
  Tensor logits = m.model.forward(images, settings.context());
  m.model.release_saved();
  return std::move(ModelSample(std::move(logits)).input("images", std::move(images)));
}

std::vector<std::string> summary_lines(const ImageClassificationResult& r) {
  return {fmt::format("test accuracy: {:.2f}%, test loss {:.4f}", 100 * r.test_accuracy, r.test_loss),
          fmt::format("training: {}", r.trained)};
}

namespace {

// Training: batches of images, cross-entropy of the class.
class ImageClassificationTask final : public TrainingTask {
 public:
  ImageClassificationTask(VisionTransformer& model, const ImageClassificationJob& job, const Images& train,
                          const std::vector<std::int64_t>& validation)
      : model_(model), job_(job), train_(train), validation_(validation) {}

  MicroBatchLoss micro_step(std::span<const std::int64_t> examples, const ForwardContext& ctx,
                            double grad_scale) override {
    const std::vector<std::int64_t> idx(examples.begin(), examples.end());
    Tensor x = gather(train_.pixels, idx);
    std::vector<std::int64_t> labels;
    for (auto i : idx) labels.push_back(train_.labels[static_cast<std::size_t>(i)]);
    Tensor logits = model_.forward(x, ctx);
    return {cross_entropy_backward(model_, logits, labels.data(), grad_scale), static_cast<std::int64_t>(idx.size())};
  }

  Validation validate() override {
    const auto [loss, accuracy] = evaluate(model_, train_, validation_, job_.train.precision);
    return {loss, accuracy, static_cast<std::int64_t>(validation_.size())};
  }

 private:
  VisionTransformer& model_;
  const ImageClassificationJob& job_;
  const Images& train_;
  const std::vector<std::int64_t>& validation_;
};

// The report's attention section for one image: the explorer page of every
// layer, and the last layer's heads as PNGs in plots/; tokens are [CLS] and
// the patches by (row, column).
std::string attention_section(VisionTransformer& model, const Tensor& image, std::int64_t label,
                              const std::string& title, RunDir& run) {
  model.encoder().set_capture_weights(true);
  model.forward(image, ForwardContext{});
  model.encoder().set_capture_weights(false);
  const std::int64_t G = model.config().image_size / model.config().patch;
  std::vector<std::string> labels = {"cls"};
  for (std::int64_t p = 0; p < model.config().patches(); ++p) labels.push_back(fmt::format("{},{}", p / G, p % G));
  const std::int64_t last = model.encoder().num_layers() - 1;
  std::string s = fmt::format(
      "## Attention\n\nThe first test image (class {}); tokens are [CLS] and the patches by (row, column).\n\n", label);
  s += report_explorer(
      run,
      {title, fmt::format("the first test image (class {})", label), {captured_attention(model.encoder(), 0, labels)}});
  s += "The last layer's heads (colours from 0 to each head's largest weight):\n\n";
  for (const auto& f : write_heatmaps(captured_attention(model.encoder(), last, labels), run.file("plots"),
                                      "attention_layer", "", kReportHeatmaps))
    s += fmt::format("![{0}](plots/{0})\n", f);
  model.release_saved();
  return s;
}

}  // namespace

ImageClassificationResult run_job(const ImageClassificationJob& job_in, RunDir& run, Progress& progress,
                                  StopRequest* stop) {
  ImageClassificationJob job = job_in;
  Images train = load_split(job.data_dir, "train", job.model.image_size);
  Images test = load_split(job.data_dir, "t10k", job.model.image_size);
  // At least one image to train on after the validation split takes up to half.
  check<IoError>(train.labels.size() >= 2 && !test.labels.empty(),
                 "{}: too few images ({} for training, {} for testing)", job.data_dir, train.labels.size(),
                 test.labels.size());
  std::vector<std::int64_t> all(train.labels.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
  auto shuffled = epoch_batches(all, static_cast<std::int64_t>(all.size()), job.train.seed, -1, true).front();
  const std::int64_t nval = std::min<std::int64_t>(job.validation_examples, static_cast<std::int64_t>(all.size()) / 2);
  std::vector<std::int64_t> val(shuffled.begin(), shuffled.begin() + nval), tr(shuffled.begin() + nval, shuffled.end());
  if (job.limit_train > 0 && job.limit_train < static_cast<std::int64_t>(tr.size()))
    tr.resize(static_cast<std::size_t>(job.limit_train));
  std::vector<std::int64_t> test_idx(test.labels.size());
  for (std::size_t i = 0; i < test_idx.size(); ++i) test_idx[i] = static_cast<std::int64_t>(i);
  progress.log(fmt::format("data: {} training, {} validation, {} test images", tr.size(), val.size(), test_idx.size()));

  job.train.set_steps(job.budget.steps(static_cast<std::int64_t>(tr.size()), job.train.batch));
  ModelToTrain<VisionTransformer> m(job.model, job.train, progress);
  ImageClassificationTask task(m.model, job, train, val);
  FitPlan plan;
  plan.on_curves = live_curves(run);  // plots/*.png redrawn as it trains
  plan.epoch_examples = tr;
  plan.unit = "img/s";
  const FitResult fitted = fit(task, m.store, job.train, plan, described_config(job), run, progress, stop);

  ImageClassificationResult result;
  if (fitted.validation) result.validation_accuracy = fitted.validation->accuracy.value_or(0);
  result.steps = fitted.steps;
  result.skipped_steps = fitted.skipped_steps;
  result.train_seconds = fitted.total_seconds;
  result.trained = fitted.steps_and_time();
  result.peak_activation_bytes = fitted.curves.memory.max_activation_bytes();
  std::vector<double> probabilities;
  std::tie(result.test_loss, result.test_accuracy) =
      evaluate(m.model, test, test_idx, job.train.precision, stop, &probabilities);
  check_finite_result("the test loss", result.test_loss);
  // The classes by their numbers, as the IDX labels have them.
  std::vector<std::string> classes;
  for (std::int64_t c = 0; c < job.model.num_classes; ++c) classes.push_back(std::to_string(c));
  std::vector<std::int64_t> truth;
  for (std::int64_t i : test_idx) truth.push_back(test.labels[static_cast<std::size_t>(i)]);
  const ClassificationReport scored = classification_report(probabilities, truth, classes, result.test_loss);
  nlohmann::json results = result;
  results["test_macro_f1"] = scored.macro_f1;
  results["test"] = to_json(scored);
  run.write_results(results);
  RunReport report{job.report_title, {}, ""};
  report.rows = {{"test accuracy", fmt::format("{:.2f}% ({} images)", 100 * result.test_accuracy, test_idx.size())},
                 {"validation accuracy", fmt::format("{:.2f}%", 100 * result.validation_accuracy)},
                 {"training", fitted.summary()},
                 {"model", job.model.describe(m.store.numel())}};
  report.sections = errors_section(scored, nullptr, run.file("plots"), "plots/", "test") +
                    attention_section(m.model, gather(test.pixels, {0}), test.labels[0], job.report_title, run);
  write_run_report(run, fitted, report);
  return result;
}

}  // namespace multihead
