// SPDX-License-Identifier: Apache-2.0
// The experiment about mixed precision: does training in bf16 or fp16 run
// faster, and does it keep the accuracy of fp32?
#include <filesystem>
#include <map>

#include "common.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/tasks/image_classification.h"
#include "multihead/tasks/presets.h"
#include "multihead/train/train_config.h"

namespace multihead::experiment {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const Precision kPrecisions[] = {Precision::kF32, Precision::kBF16, Precision::kF16};

// Per-seed numbers of one precision.
struct PrecisionRow {
  std::vector<double> acc, secs, step_ms, mem;
};

ExperimentTable precision_table(const std::string& title, std::map<Precision, PrecisionRow>& rows) {
  ExperimentTable t;
  t.title = title;
  t.columns = {"precision", "test accuracy", "training s", "ms per step", "speed vs fp32", "peak activations MiB"};
  const double fp32_ms = mean(rows[Precision::kF32].step_ms);
  for (Precision p : kPrecisions) {
    const PrecisionRow& r = rows[p];
    t.rows.push_back({std::string(precision_name(p)), pct(r.acc), mean_std(r.secs, 1), mean_std(r.step_ms, 1),
                      fmt::format("{:.2f}x", fp32_ms / mean(r.step_ms)), mib(r.mem)});
  }
  return t;
}

void add_run(PrecisionRow& row, json& runs, const std::string& dataset, Precision p, std::uint64_t seed, double acc,
             double secs, std::int64_t steps, std::int64_t mem) {
  row.acc.push_back(acc);
  row.secs.push_back(secs);
  row.step_ms.push_back(1000.0 * secs / static_cast<double>(std::max<std::int64_t>(steps, 1)));
  row.mem.push_back(static_cast<double>(mem));
  runs.push_back({{"dataset", dataset},
                  {"precision", precision_name(p)},
                  {"seed", seed},
                  {"test_accuracy", acc},
                  {"train_seconds", secs},
                  {"steps", steps},
                  {"peak_activation_bytes", mem}});
}

}  // namespace

// Claim: mixed precision speeds up training, at the same accuracy.
ExperimentReport precision_experiment(ExperimentContext& c) {
  const bool q = c.opt.quick;
  ExperimentReport r;
  json runs = json::array();
  // Text: the spam preset (3 of its 6 epochs), or the tiny synthetic task.
  TextClassificationJob text = q ? quick_text_job(c) : spam_preset();
  text.threads = c.opt.threads;
  if (!q) {
    text.budget.epochs = 3;
    if (!c.opt.spam_dir.empty()) text.data_path = c.opt.spam_dir;
  }
  const std::string text_name = q ? "synthetic" : "spam";
  std::map<Precision, PrecisionRow> rows;
  for (Precision p : kPrecisions)
    for (std::uint64_t seed : c.seeds()) {
      TextClassificationJob j = text;
      j.train.precision = p;
      const TextClassificationResult res = run_quietly(c, j, fmt::format("{}_{}", text_name, precision_name(p)), seed);
      add_run(rows[p], runs, text_name, p, seed, res.test.accuracy, res.train_seconds, res.steps,
              res.peak_activation_bytes);
      c.log.log(fmt::format("precision: {} {} seed {}: test accuracy {:.2f}%, {:.1f} s", text_name, precision_name(p),
                            seed, 100 * res.test.accuracy, res.train_seconds));
    }
  const std::string products = bf16_path_name(bf16_path());
  r.tables.push_back(precision_table(
      q ? "synthetic: text classification (quick)"
        : fmt::format("spam: the spam preset (2 layers, d_model 128, 384 tokens), 3 epochs; bf16 products: {}",
                      products),
      rows));
  // Fashion-MNIST when its files are there (not in --quick): the preset's
  // model on 20 000 training images, 2 epochs.
  ImageClassificationJob image = fashion_preset();
  if (!c.opt.fashion_dir.empty()) image.data_dir = c.opt.fashion_dir;
  if (!q && fs::exists(fs::path(image.data_dir) / "train-images-idx3-ubyte.gz")) {
    image.threads = c.opt.threads;
    image.limit_train = 20000;
    image.budget.epochs = 2;
    std::map<Precision, PrecisionRow> image_rows;
    for (Precision p : kPrecisions)
      for (std::uint64_t seed : c.seeds()) {
        ImageClassificationJob j = image;
        j.train.precision = p;
        const ImageClassificationResult res = run_quietly(c, j, fmt::format("fashion_{}", precision_name(p)), seed);
        add_run(image_rows[p], runs, "fashion-mnist", p, seed, res.test_accuracy, res.train_seconds, res.steps,
                res.peak_activation_bytes);
        c.log.log(fmt::format("precision: fashion-mnist {} seed {}: test accuracy {:.2f}%, {:.1f} s", precision_name(p),
                              seed, 100 * res.test_accuracy, res.train_seconds));
      }
    r.tables.push_back(precision_table(
        fmt::format("fashion-mnist: the fashion-mnist preset's model (4 pre-LN layers, d_model 96), 20 000 training "
                    "images, 2 epochs; bf16 products: {}",
                    products),
        image_rows));
  }
  r.results = {{"runs", runs}, {"bf16_products", products}};
  return r;
}

}  // namespace multihead::experiment
