// SPDX-License-Identifier: Apache-2.0
// The experiments about heads: how many (text and image classification),
// and what trained heads do (ablation, diversity, dispersion with length).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "common.h"
#include "multihead/core/rng.h"
#include "multihead/data/batching.h"
#include "multihead/report/plots.h"
#include "multihead/tasks/presets.h"

namespace multihead::experiment {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The text classifier every heads experiment trains: the spam preset made
// small, or a tiny model on the synthetic words (--quick).
TextClassificationJob text_job(const ExperimentContext& c, const std::string& dataset, std::int64_t heads) {
  if (c.opt.quick) {
    TextClassificationJob j = quick_text_job(c);
    j.model.layer.nhead = heads;
    return j;
  }
  TextClassificationJob j = spam_preset();
  j.threads = c.opt.threads;
  j.model.layer.nhead = heads;
  j.model.layer.d_model = 64;
  j.model.layer.dim_feedforward = 128;
  j.max_len = j.model.max_len = 256;
  j.tokenizer.vocab_size = 2000;
  j.budget.epochs = 3;
  if (dataset == "imdb") {
    j.source = "aclimdb";
    j.data_path = c.opt.imdb_dir;
    j.budget.epochs = 2;
  } else if (!c.opt.spam_dir.empty()) {
    j.data_path = c.opt.spam_dir;
  }
  return j;
}

// One row of the heads table from per-seed numbers.
struct HeadsRow {
  std::vector<double> acc, secs, mem;
};

ExperimentTable heads_table(const std::string& title, const std::vector<std::int64_t>& heads, std::int64_t d_model,
                            std::map<std::int64_t, HeadsRow>& rows, std::vector<Series>& curves,
                            const std::string& dataset) {
  Series s{dataset, {}, {}};
  for (auto h : heads) add_point(s, static_cast<double>(h), rows[h].acc);
  curves.push_back(s);
  ExperimentTable t;
  t.title = title;
  t.columns = {"heads", "head dim", "test accuracy", "training s", "peak activations MiB"};
  for (auto h : heads)
    t.rows.push_back({std::to_string(h), std::to_string(d_model / h), pct(rows[h].acc), mean_std(rows[h].secs, 1),
                      mib(rows[h].mem)});
  return t;
}

}  // namespace

// Claim: several heads beat one head.
ExperimentReport heads_experiment(ExperimentContext& c) {
  const bool q = c.opt.quick;
  const std::vector<std::int64_t> heads = {1, 2, 4, 8, 16};
  ExperimentReport r;
  json runs = json::array();
  std::vector<Series> curves;
  std::vector<std::string> datasets = {q ? "synthetic" : "spam"};
  if (!q && !c.opt.imdb_dir.empty()) datasets.push_back("imdb");
  for (const auto& ds : datasets) {
    std::map<std::int64_t, HeadsRow> rows;
    std::int64_t d_model = 0;
    for (auto h : heads)
      for (std::uint64_t seed : c.seeds()) {
        const TextClassificationJob job = text_job(c, ds, h);
        d_model = job.model.layer.d_model;
        TextClassificationResult res = run_quietly(c, job, fmt::format("{}_h{}", ds, h), seed);
        rows[h].acc.push_back(res.test.accuracy);
        rows[h].secs.push_back(res.train_seconds);
        rows[h].mem.push_back(static_cast<double>(res.peak_activation_bytes));
        runs.push_back({{"dataset", ds},
                        {"heads", h},
                        {"seed", seed},
                        {"test_accuracy", res.test.accuracy},
                        {"train_seconds", res.train_seconds},
                        {"peak_activation_bytes", res.peak_activation_bytes}});
        c.log.log(fmt::format("heads: {} h={} seed {}: test accuracy {:.2f}%, {:.1f} s", ds, h, seed,
                              100 * res.test.accuracy, res.train_seconds));
      }
    r.tables.push_back(
        heads_table(fmt::format("{}: text classification, d_model {}", ds, d_model), heads, d_model, rows, curves, ds));
  }
  // Fashion-MNIST when its files are there (not in --quick).
  ImageClassificationJob image = fashion_preset();
  if (!c.opt.fashion_dir.empty()) image.data_dir = c.opt.fashion_dir;
  if (!q && fs::exists(fs::path(image.data_dir) / "train-images-idx3-ubyte.gz")) {
    image.threads = c.opt.threads;
    image.model.num_layers = 2;
    image.model.layer.d_model = 64;
    image.model.layer.dim_feedforward = 128;
    image.limit_train = 20000;
    image.budget.epochs = 2;
    std::map<std::int64_t, HeadsRow> rows;
    for (auto h : heads)
      for (std::uint64_t seed : c.seeds()) {
        ImageClassificationJob j = image;
        j.model.layer.nhead = h;
        ImageClassificationResult res = run_quietly(c, j, fmt::format("fashion_h{}", h), seed);
        rows[h].acc.push_back(res.test_accuracy);
        rows[h].secs.push_back(res.train_seconds);
        rows[h].mem.push_back(static_cast<double>(res.peak_activation_bytes));
        runs.push_back({{"dataset", "fashion-mnist"},
                        {"heads", h},
                        {"seed", seed},
                        {"test_accuracy", res.test_accuracy},
                        {"train_seconds", res.train_seconds},
                        {"peak_activation_bytes", res.peak_activation_bytes}});
        c.log.log(
            fmt::format("heads: fashion-mnist h={} seed {}: test accuracy {:.2f}%", h, seed, 100 * res.test_accuracy));
      }
    r.tables.push_back(
        heads_table("fashion-mnist: Vision Transformer, 2 layers, d_model 64, 20 000 training images, 2 epochs", heads,
                    64, rows, curves, "fashion-mnist"));
  }
  line_plot_png((fs::path(c.dir) / "accuracy_by_heads.png").string(),
                "Test accuracy by number of heads (mean ± std over seeds)", "heads", "test accuracy", curves,
                fraction_axes(true));
  r.results = {{"runs", runs}};
  return r;
}

namespace {

// Per-head attention weights (B, H, L, L) of every layer for one batch.
std::vector<Tensor> capture(LoadedTextClassifier& m, const std::vector<std::vector<std::int64_t>>& seqs,
                            std::int64_t max_len) {
  std::vector<const std::vector<std::int64_t>*> ptrs;
  for (const auto& s : seqs) ptrs.push_back(&s);
  TokenBatch tb = make_token_batch(ptrs, std::vector<std::int64_t>(seqs.size(), 0), max_len, m.tokenizer->frame());
  SequenceClassifier& model = m.model();
  model.encoder().set_capture_weights(true);
  model.forward(tb.ids, &tb.padding, eval_context(m.job.train.precision));
  model.encoder().set_capture_weights(false);
  std::vector<Tensor> w;
  for (std::int64_t l = 0; l < model.encoder().num_layers(); ++l)
    w.push_back(model.encoder().layer(l).attention_weights().clone());
  model.release_saved();
  return w;
}

// Jensen-Shannon distance (base 2, in [0, 1]) between two distributions.
double js_distance(const float* p, const float* q, std::int64_t n) {
  double js = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double a = p[i], b = q[i], m = 0.5 * (a + b);
    if (a > 0) js += 0.5 * a * std::log2(a / m);
    if (b > 0) js += 0.5 * b * std::log2(b / m);
  }
  return std::sqrt(std::max(0.0, js));
}

struct Dispersion {
  double entropy = 0;      // nats, mean over rows, heads and layers
  double outside_top = 0;  // attention mass outside the top-k keys
};

Dispersion dispersion(const std::vector<Tensor>& weights, std::int64_t k) {
  Dispersion d;
  std::int64_t rows = 0;
  for (const Tensor& w : weights) {
    const std::int64_t L = w.dim(3), n = w.numel() / L;
    for (std::int64_t r = 0; r < n; ++r) {
      std::vector<float> row(w.f32() + r * L, w.f32() + (r + 1) * L);
      for (float p : row)
        if (p > 0) d.entropy -= p * std::log(static_cast<double>(p));
      std::partial_sort(row.begin(), row.begin() + std::min(k, L), row.end(), std::greater<>());
      double top = 0;
      for (std::int64_t i = 0; i < std::min(k, L); ++i) top += row[static_cast<std::size_t>(i)];
      d.outside_top += 1.0 - top;
      ++rows;
    }
  }
  d.entropy /= static_cast<double>(rows);
  d.outside_top /= static_cast<double>(rows);
  return d;
}

}  // namespace

// Michel et al. 2019 ablation, head diversity, and the "dispersion" claim:
// one head spreads its attention thinner on long sequences than many do.
ExperimentReport head_analysis_experiment(ExperimentContext& c) {
  const bool q = c.opt.quick;
  const std::int64_t many = q ? 4 : 8, top_k = q ? 2 : 4, examples = q ? 8 : 32;
  const std::vector<std::int64_t> lengths =
      q ? std::vector<std::int64_t>{4, 8, 16} : std::vector<std::int64_t>{16, 32, 64, 128, 256};
  json runs = json::array();
  ExperimentTable per_head;  // seed 1: heads are not comparable across seeds
  per_head.title = fmt::format("Ablation, seed 1: test accuracy with one head masked ({} heads a layer)", many);
  per_head.columns = {"layer", "head", "accuracy without it", "drop (points)"};
  std::vector<double> base_acc, mean_drop, max_drop, cheap;
  std::map<std::int64_t, std::vector<double>> js_by_layer;
  // By length, for 1 head and for `many` heads: entropy and mass outside the top k.
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<double>> entropy, outside;
  std::int64_t layers = 0;
  for (std::uint64_t seed : c.seeds()) {
    for (std::int64_t h : {many, std::int64_t{1}}) {
      const std::string label = fmt::format("h{}", h);
      TextClassificationJob job = text_job(c, "spam", h);
      run_quietly(c, job, label, seed);
      LoadedTextClassifier loaded(c.run_dir(label, static_cast<std::int64_t>(seed)));
      SequenceClassifier& model = loaded.model();
      const TokenizedExamples test = classifier_test_split(loaded.job, *loaded.tokenizer);
      layers = model.encoder().num_layers();
      const auto& jb = loaded.job;
      if (h == many) {
        // Ablation over the test split.
        const double base = evaluate_classifier(model, test, jb.eval_batch, jb.max_len, jb.train.precision).accuracy;
        base_acc.push_back(base);
        std::vector<double> drops;
        for (std::int64_t l = 0; l < layers; ++l)
          for (std::int64_t head = 0; head < h; ++head) {
            std::vector<std::uint8_t> mask(static_cast<std::size_t>(h), 0);
            mask[static_cast<std::size_t>(head)] = 1;
            MultiheadAttention& attn = model.encoder().layer(l).self_attention();
            attn.set_head_mask(mask);
            const double acc = evaluate_classifier(model, test, jb.eval_batch, jb.max_len, jb.train.precision).accuracy;
            attn.set_head_mask({});
            drops.push_back(base - acc);
            runs.push_back(
                {{"seed", seed}, {"layer", l}, {"head", head}, {"accuracy_without", acc}, {"baseline", base}});
            if (seed == 1)
              per_head.rows.push_back({std::to_string(l), std::to_string(head), fmt::format("{:.2f}%", 100 * acc),
                                       fmt::format("{:+.2f}", 100 * (base - acc))});
          }
        mean_drop.push_back(mean(drops));
        max_drop.push_back(*std::max_element(drops.begin(), drops.end()));
        cheap.push_back(
            static_cast<double>(std::count_if(drops.begin(), drops.end(), [](double d) { return d < 0.005; })));
        // Diversity on the first test examples.
        std::vector<std::vector<std::int64_t>> first(
            test.tokens.begin(),
            test.tokens.begin() + std::min<std::ptrdiff_t>(examples, static_cast<std::ptrdiff_t>(test.tokens.size())));
        std::vector<Tensor> w = capture(loaded, first, jb.max_len);
        for (std::int64_t l = 0; l < layers; ++l) {
          const Tensor& t = w[static_cast<std::size_t>(l)];  // (B, H, L, L)
          const std::int64_t B = t.dim(0), H = t.dim(1), L = t.dim(2);
          double sum = 0;
          std::int64_t pairs = 0;
          for (std::int64_t b = 0; b < B; ++b) {
            const std::int64_t len =
                std::min<std::int64_t>(L, static_cast<std::int64_t>(first[static_cast<std::size_t>(b)].size()) + 1);
            for (std::int64_t i = 0; i < len; ++i)
              for (std::int64_t h1 = 0; h1 < H; ++h1)
                for (std::int64_t h2 = h1 + 1; h2 < H; ++h2, ++pairs)
                  sum += js_distance(t.f32() + ((b * H + h1) * L + i) * L, t.f32() + ((b * H + h2) * L + i) * L, L);
          }
          js_by_layer[l].push_back(sum / static_cast<double>(std::max<std::int64_t>(pairs, 1)));
        }
      }
      // Dispersion against length: test examples at least that long, cut to it.
      for (std::int64_t L : lengths) {
        std::vector<std::vector<std::int64_t>> cut;
        for (const auto& s : test.tokens)
          if (static_cast<std::int64_t>(s.size()) >= L - 1 && static_cast<std::int64_t>(cut.size()) < examples)
            cut.emplace_back(s.begin(), s.begin() + (L - 1));  // [CLS] makes L
        if (cut.empty()) continue;
        const Dispersion d = dispersion(capture(loaded, cut, L), top_k);
        entropy[{h, L}].push_back(d.entropy);
        outside[{h, L}].push_back(d.outside_top);
        runs.push_back({{"seed", seed},
                        {"heads", h},
                        {"length", L},
                        {"examples", cut.size()},
                        {"entropy", d.entropy},
                        {"mass_outside_top_k", d.outside_top}});
      }
      c.log.log(fmt::format("head-analysis: seed {} with {} head{} done", seed, h, h == 1 ? "" : "s"));
    }
  }
  ExperimentTable summary;
  summary.title = fmt::format("Ablation over seeds ({} layers x {} heads)", layers, many);
  summary.columns = {"baseline accuracy", "mean drop per head (points)", "largest drop (points)",
                     "heads removable at < 0.5 points"};
  summary.rows.push_back({pct(base_acc), mean_std(mean_drop, 2, 100.0), mean_std(max_drop, 2, 100.0),
                          mean_std(cheap, 1) + fmt::format(" of {}", layers * many)});
  ExperimentTable diversity;
  diversity.title = "Head diversity: mean pairwise Jensen-Shannon distance between heads' attention rows (base 2)";
  diversity.columns = {"layer", "JS distance"};
  for (const auto& [l, v] : js_by_layer) diversity.rows.push_back({std::to_string(l), mean_std(v, 3)});
  ExperimentTable disp;
  disp.title = fmt::format(
      "Dispersion against length: mean attention entropy (nats; uniform = ln L) and mass outside the top {} keys",
      top_k);
  disp.columns = {"length",
                  "ln L",
                  "entropy, 1 head",
                  fmt::format("entropy, {} heads", many),
                  fmt::format("outside top {}, 1 head", top_k),
                  fmt::format("outside top {}, {} heads", top_k, many)};
  std::vector<Series> curves = {
      {"1 head", {}, {}}, {fmt::format("{} heads", many), {}, {}}, {"uniform (ln L)", {}, {}}};
  curves[2].dashed = true;
  for (std::int64_t L : lengths) {
    if (entropy[{1, L}].empty()) continue;
    disp.rows.push_back({std::to_string(L), fmt::format("{:.2f}", std::log(static_cast<double>(L))),
                         mean_std(entropy[{1, L}], 2), mean_std(entropy[{many, L}], 2), mean_std(outside[{1, L}], 3),
                         mean_std(outside[{many, L}], 3)});
    add_point(curves[0], static_cast<double>(L), entropy[{1, L}]);
    add_point(curves[1], static_cast<double>(L), entropy[{many, L}]);
    curves[2].x.push_back(static_cast<double>(L));
    curves[2].y.push_back(std::log(static_cast<double>(L)));
  }
  PlotAxes lengths_axes;
  lengths_axes.log_x = true;
  line_plot_png((fs::path(c.dir) / "entropy_by_length.png").string(),
                "Attention entropy by length (mean ± std over seeds)", "length", "entropy (nats)", curves,
                lengths_axes);
  ExperimentReport r;
  r.tables = {summary, per_head, diversity, disp};
  r.results = {{"runs", runs}};
  return r;
}

}  // namespace multihead::experiment
