#include "multihead/train/image_classification.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "multihead/core/threading.h"
#include "multihead/data/batching.h"
#include "multihead/data/idx.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/io/state_dict.h"
#include "multihead/io/plots.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/train/resume.h"

namespace multihead {

using json = nlohmann::json;
namespace fs = std::filesystem;

json to_json(const ImageClassificationJob& j) {
  json model = {{"image_size", j.model.image_size}, {"patch", j.model.patch}, {"channels", j.model.channels},
           {"num_layers", j.model.num_layers}, {"d_model", j.model.layer.d_model}, {"nhead", j.model.layer.nhead},
           {"dim_feedforward", j.model.layer.dim_feedforward}, {"dropout", j.model.layer.dropout},
           {"norm_first", j.model.layer.norm_first}, {"num_classes", j.model.num_classes}};
  json train = train_config_json(j.train);
  train["epochs"] = j.epochs;
  train["max_steps"] = j.max_steps;
  return json{{"task", "image_classification"},
              {"data", {{"path", j.data_dir}, {"validation_examples", j.validation_examples}, {"limit_train", j.limit_train}}},
              {"model", model},
              {"train", train},
              {"threads", j.threads},
              {"title", j.report_title}};
}

ImageClassificationJob image_classification_job_from_json(const json& root, const std::string& src) {
  ImageClassificationJob job;
  ConfigReader r(root, src);
  check<ConfigError>(r.get_string("task") == "image_classification", "{}: task must be image_classification", src);
  job.threads = static_cast<int>(r.get_int("threads", 0));
  job.report_title = r.get_string("title", job.report_title);
  const json data = r.get_object("data");
  ConfigReader d(data, src + ": data");
  job.data_dir = d.get_string("path", job.data_dir);
  job.validation_examples = d.get_int("validation_examples", job.validation_examples);
  job.limit_train = d.get_int("limit_train", 0);
  d.finish();
  const json model = r.get_object("model");
  ConfigReader m(model, src + ": model");
  job.model.image_size = m.get_int("image_size", 28);
  job.model.patch = m.get_int("patch", 4);
  job.model.channels = m.get_int("channels", 1);
  job.model.num_layers = m.get_int("num_layers", 4);
  job.model.layer.d_model = m.get_int("d_model", 64);
  job.model.layer.nhead = m.get_int("nhead", 4);
  job.model.layer.dim_feedforward = m.get_int("dim_feedforward", 128);
  job.model.layer.dropout = m.get_number("dropout", 0.1);
  job.model.layer.norm_first = m.get_bool("norm_first", true);
  job.model.num_classes = m.get_int("num_classes", 10);
  m.finish();
  const json train = r.get_object("train");
  ConfigReader t(train, src + ": train");
  job.epochs = t.get_int("epochs", job.epochs);
  job.max_steps = t.get_int("max_steps", 0);
  check<ConfigError>(job.max_steps >= 0, "{}: max_steps must be >= 0 (0: no cap), got {}", src, job.max_steps);
  job.train = read_train_config(t);
  t.finish();
  r.finish();
  job.model.validate();
  return job;
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
  throw IoError(fmt::format("{}: no {} or {}.gz (install dataset-fashion-mnist with scripts/setup.sh --data)", dir,
                            stem, stem));
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
    std::memcpy(out.f32() + static_cast<std::int64_t>(i) * per, pixels.f32() + idx[i] * per, sizeof(float) * static_cast<std::size_t>(per));
  return out;
}

std::pair<double, double> evaluate(VisionTransformer& model, const Images& data, const std::vector<std::int64_t>& idx,
                                   Precision precision) {
  double loss = 0;
  std::int64_t correct = 0;
  for (const auto& b : epoch_batches(idx, 256, 0, 0, false)) {
    Tensor x = gather(data.pixels, b);
    std::vector<std::int64_t> labels;
    for (auto i : b) labels.push_back(data.labels[static_cast<std::size_t>(i)]);
    Tensor logits = model.forward(x, eval_context(precision));
    const std::int64_t B = logits.dim(0), C = logits.dim(1);
    loss += cross_entropy<float>(nullptr, logits.f32(), labels.data(), B, C).loss * static_cast<double>(B);
    for (std::int64_t r = 0; r < B; ++r)
      correct += std::max_element(logits.f32() + r * C, logits.f32() + (r + 1) * C) - (logits.f32() + r * C) ==
                 labels[static_cast<std::size_t>(r)];
    model.clear_cache();
  }
  const double n = static_cast<double>(idx.size());
  return {loss / n, static_cast<double>(correct) / n};
}

}  // namespace

double evaluate_image_run(const std::string& run_dir, int threads, std::optional<Precision> precision) {
  const RunConfig cfg = read_run_config(run_dir);
  ImageClassificationJob job = image_classification_job_from_json(cfg.json, cfg.path);
  set_num_threads(threads);
  if (precision) job.train.precision = *precision;
  ParamStore store;
  VisionTransformer model(store, job.model);
  store.finalize();
  load_state_dict_file(store, last_checkpoint_path(run_dir), true);
  Images test = load_split(job.data_dir, "t10k", job.model.image_size);
  std::vector<std::int64_t> idx(test.labels.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(i);
  return evaluate(model, test, idx, job.train.precision).second;
}

ImageClassificationResult run_image_classification(const ImageClassificationJob& job_in, RunDir& run,
                                                   Progress& progress) {
  ImageClassificationJob job = job_in;
  set_num_threads(job.threads);
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
  if (job.limit_train > 0 && job.limit_train < static_cast<std::int64_t>(tr.size())) tr.resize(static_cast<std::size_t>(job.limit_train));
  std::vector<std::int64_t> test_idx(test.labels.size());
  for (std::size_t i = 0; i < test_idx.size(); ++i) test_idx[i] = static_cast<std::int64_t>(i);
  progress.log(fmt::format("data: {} training, {} validation, {} test images", tr.size(), val.size(), test_idx.size()));

  const std::int64_t steps_per_epoch = (static_cast<std::int64_t>(tr.size()) + job.train.batch - 1) / job.train.batch;
  job.train.steps = epoch_job_steps(steps_per_epoch, job.epochs, job.max_steps);
  job.train.schedule.total_steps = job.train.steps;
  ParamStore store;
  VisionTransformer model(store, job.model);
  store.finalize();
  Rng rng(job.train.seed);
  model.init(rng);
  model.encoder().set_checkpointing(job.train.checkpoint_layers);
  Trainer trainer(store, job.train);
  const std::vector<nlohmann::json> records = start_or_resume(run, to_json(job), trainer);
  progress.set_total(job.train.steps);
  progress.log(fmt::format("model: ViT, {} patches of {}x{}, {} layers, d_model {}, {} heads, {} parameters",
                           job.model.patches(), job.model.patch, job.model.patch, job.model.num_layers,
                           job.model.layer.d_model, job.model.layer.nhead, store.numel()));
  TrainingCurves curves;
  ImageClassificationResult result;
  for (const auto& rec : records) curves.add_record(rec);
  if (!curves.eval_accuracy.empty()) result.validation_accuracy = curves.eval_accuracy.back();
  const auto t0 = std::chrono::steady_clock::now();
  // Batches are a function of (seed, epoch): a resumed run starts where its checkpoint was.
  const std::int64_t first = trainer.steps_done();
  progress.resume_at(first);
  // job.train.steps <= steps_per_epoch * epochs; less when max_steps cuts the last epoch short.
  for (std::int64_t epoch = first / steps_per_epoch; epoch * steps_per_epoch < job.train.steps; ++epoch) {
    const auto batches = epoch_batches(tr, job.train.batch, job.train.seed, epoch, true);
    for (std::size_t bi = static_cast<std::size_t>(trainer.steps_done() - epoch * steps_per_epoch);
         bi < batches.size() && trainer.steps_done() < job.train.steps; ++bi) {
      const auto& b = batches[bi];
      StepStats st = trainer.step([&](std::int64_t micro, const ForwardContext& ctx, double scale) {
        const std::size_t parts = static_cast<std::size_t>(job.train.grad_accumulation);
        const std::vector<std::int64_t> mine(b.begin() + static_cast<std::ptrdiff_t>(b.size() * static_cast<std::size_t>(micro) / parts),
                                             b.begin() + static_cast<std::ptrdiff_t>(b.size() * static_cast<std::size_t>(micro + 1) / parts));
        if (mine.empty()) return 0.0;
        Tensor x = gather(train.pixels, mine);
        std::vector<std::int64_t> labels;
        for (auto i : mine) labels.push_back(train.labels[static_cast<std::size_t>(i)]);
        Tensor logits = model.forward(x, ctx);
        Tensor dl = Tensor::empty(logits.shape());
        auto ce = cross_entropy(dl.f32(), logits.f32(), labels.data(), logits.dim(0), logits.dim(1), -100, 0.0, scale);
        model.backward(dl);
        model.clear_cache();
        return ce.loss;
      });
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      curves.add_step(st);
      nlohmann::json rec = step_json(st, job.train.loss_scaling);
      rec["epoch"] = epoch;
      finish_step(run, progress, trainer, st, rec, bi + 1 < batches.size() && trainer.steps_done() < job.train.steps);
      progress.update(st.step + 1, epoch + 1, st.loss,
                      static_cast<double>((st.step + 1 - first) * job.train.batch) / secs, "img/s",
                      MemoryCurve::text(st));
    }
    auto [vl, va] = evaluate(model, train, val, job.train.precision);
    curves.add_eval(trainer.steps_done(), vl, va);
    result.validation_accuracy = va;
    run.append_metrics({{"step", trainer.steps_done()}, {"epoch", epoch}, {"validation_loss", vl}, {"validation_accuracy", va}});
    save_run_checkpoint(run, trainer, {{"data.epoch", std::to_string(epoch + 1)}});
    progress.log(fmt::format("epoch {}: validation loss {:.4f}, accuracy {:.2f}%", epoch + 1, vl, 100 * va));
  }
  progress.finish();
  result.steps = trainer.steps_done();
  result.skipped_steps = trainer.skipped_steps();
  result.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::tie(result.test_loss, result.test_accuracy) = evaluate(model, test, test_idx, job.train.precision);
  run.write_results({{"test_accuracy", result.test_accuracy},
                     {"test_loss", result.test_loss},
                     {"validation_accuracy", result.validation_accuracy},
                     {"train_seconds", result.train_seconds},
                     {"steps", result.steps},
                     {"skipped_steps", result.skipped_steps}});
  line_plot_png(
      run.file("plots/loss.png"), "Loss", "step", "cross-entropy",
      {{"train (per step)", curves.step, curves.loss}, {"validation (per epoch)", curves.eval_step, curves.eval_loss}});
  line_plot_png(run.file("plots/accuracy.png"), "Validation accuracy", "step", "accuracy",
                {{"validation", curves.eval_step, curves.eval_accuracy}});
  // Attention of the last layer for the first test image.
  Tensor first_image = gather(test.pixels, {0});
  const std::int64_t last = model.encoder().num_layers() - 1;
  model.encoder().layer(last).set_capture_weights(true);
  model.forward(first_image, ForwardContext{});
  const Tensor& w = model.encoder().layer(last).attention_weights();
  const std::int64_t T = w.dim(2), G = job.model.image_size / job.model.patch;
  std::vector<std::string> labels = {"cls"};
  for (std::int64_t p = 0; p + 1 < T; ++p) labels.push_back(fmt::format("{},{}", p / G, p % G));
  std::string md = fmt::format("# {}\n\n| | |\n|---|---|\n| test accuracy | {:.2f}% ({} images) |\n", job.report_title,
                               100 * result.test_accuracy, test_idx.size());
  const std::int64_t epochs_run = (result.steps + steps_per_epoch - 1) / steps_per_epoch;  // the last may be cut short
  md += fmt::format("| validation accuracy | {:.2f}% |\n| training | {} steps, {} epochs, {:.1f} s |\n",
                    100 * result.validation_accuracy, result.steps, epochs_run, result.train_seconds);
  md += fmt::format("| model | ViT: {} patches of {}x{}, {} layers, d_model {}, {} heads, {} parameters |\n\n",
                    job.model.patches(), job.model.patch, job.model.patch, job.model.num_layers,
                    job.model.layer.d_model, job.model.layer.nhead, store.numel());
  curves.memory.plot(run.file("plots/memory.png"));
  result.peak_activation_bytes = curves.memory.max_activation_bytes();
  md += "## Training curves\n\n![loss](plots/loss.png)\n\n![accuracy](plots/accuracy.png)\n\n";
  md += "## Memory\n\n![memory](plots/memory.png)\n\n## Attention\n\n";
  md += fmt::format("Last layer, first test image (class {}); tokens are [CLS] and the patches by (row, column).\n\n",
                    test.labels[0]);
  for (std::int64_t h = 0; h < w.dim(1); ++h) {
    std::vector<float> m(w.f32() + h * T * T, w.f32() + (h + 1) * T * T);
    const std::string name = fmt::format("plots/attention_layer{}_head{}.png", last, h);
    heatmap_png(run.file(name), fmt::format("layer {}, head {}", last, h), m, T, T, labels, labels);
    md += fmt::format("![{}]({})\n", name, name);
  }
  model.clear_cache();
  run.write_report(md);
  return result;
}

}  // namespace multihead
