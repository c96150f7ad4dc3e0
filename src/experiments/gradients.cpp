// SPDX-License-Identifier: Apache-2.0
// Two claims about the backward pass, measured over training on the reverse
// and spam presets (learned and sinusoidal positions, post-LN and pre-LN):
//   "the positional encoding's gradients flow mainly to the lower layers":
//     the gradient of the position table split by the first sublayer each
//     path to the loss enters (nn/gradient_probe.h), as shares of the whole;
//   "the attention heads' gradients compete during backpropagation": the
//     pairwise cosine of the heads' shares of the gradient of each layer's
//     input (negative: competing, near zero: independent, positive: cooperating).
// Each run keeps its checkpoints (train.keep_checkpoints); the probe runs a
// fixed batch through the weights of each, in fp32 without dropout.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "common.h"
#include "multihead/data/batching.h"
#include "multihead/nn/gradient_probe.h"
#include "multihead/tasks/presets.h"
#include "multihead/tasks/text_classification.h"
#include "multihead/train/checkpoint.h"

namespace multihead::experiment {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// One model setting of the grid.
struct Setting {
  PositionKind positions;
  bool pre_ln;
  std::string label() const {
    return fmt::format("{} {}", position_kind_name(positions), pre_ln ? "pre-LN" : "post-LN");
  }
  std::string slug() const { return fmt::format("{}_{}", position_kind_name(positions), pre_ln ? "pre" : "post"); }
};

// What one probe of one checkpoint gives.
struct Probe {
  std::int64_t step = 0;
  std::vector<double> share;           // per layer: the first-sublayer share of the position table's gradient
  double residual_share = 0;           // the paths through no sublayer
  std::vector<double> head_cosine;     // per layer: the mean over pairs of heads
  std::vector<double> negative_pairs;  // per layer: the fraction of pairs below zero
};

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The gradient of the position table's rows 0 .. L-1 from a gradient of the
// stack's input (B, L, d): summed over the batch, (L * d).
std::vector<double> table_gradient(const Tensor& g) {
  const std::int64_t B = g.dim(0), n = g.numel() / B;
  std::vector<double> t(static_cast<std::size_t>(n), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] += g.f32()[b * n + i];
  return t;
}

Probe read_probe(const GradientProbe& p, std::int64_t step) {
  Probe r;
  r.step = step;
  std::vector<std::vector<double>> parts;
  for (const Tensor& t : p.first_sublayer) parts.push_back(table_gradient(t));
  const std::vector<double> residual = table_gradient(p.residual_only);
  std::vector<double> whole = residual;
  for (const auto& part : parts)
    for (std::size_t i = 0; i < whole.size(); ++i) whole[i] += part[i];
  // Shares as projections on the whole gradient: they sum to 1, and a part
  // that points against the whole counts below zero.
  const double norm2 = dot(whole, whole);
  for (const auto& part : parts) r.share.push_back(norm2 > 0 ? dot(part, whole) / norm2 : 0.0);
  r.residual_share = norm2 > 0 ? dot(residual, whole) / norm2 : 0.0;
  for (const auto& gram : p.head_gram) {
    const auto H = static_cast<std::size_t>(std::llround(std::sqrt(static_cast<double>(gram.size()))));
    double sum = 0;
    std::int64_t pairs = 0, negative = 0;
    for (std::size_t a = 0; a < H; ++a)
      for (std::size_t b = a + 1; b < H; ++b) {
        const double den = std::sqrt(gram[a * H + a] * gram[b * H + b]);
        const double cosine = den > 0 ? gram[a * H + b] / den : 0.0;
        sum += cosine;
        ++pairs;
        negative += cosine < 0;
      }
    r.head_cosine.push_back(pairs ? sum / static_cast<double>(pairs) : 0.0);
    r.negative_pairs.push_back(pairs ? static_cast<double>(negative) / static_cast<double>(pairs) : 0.0);
  }
  return r;
}

// The probe of every kept checkpoint of a run, and of the initial weights
// (the model as its training built it: ModelToTrain of the run's config).
// `batch` runs one forward and backward of the model on the probe batch.
template <typename Model, typename Batch>
std::vector<Probe> probe_run(const ModelConfig& cfg, const TrainConfig& train, const std::string& run_dir,
                             Batch batch) {
  std::vector<std::int64_t> steps = {0};
  for (std::int64_t s : kept_checkpoint_steps(run_dir)) steps.push_back(s);
  std::vector<Probe> out;
  Progress quiet(0, stderr, true);
  for (std::int64_t step : steps) {
    ModelToTrain<Model> m(cfg, train, quiet);
    if (step) load_checkpoint_weights(m.store, kept_checkpoint_path(run_dir, step));
    GradientProbe p;
    m.model.encoder().set_backward_observer(&p);
    batch(m.model);
    m.model.encoder().set_backward_observer(nullptr);
    out.push_back(read_probe(p, step));
  }
  // The kept copies are only for this probe.
  for (std::int64_t step : steps)
    if (step) fs::remove(kept_checkpoint_path(run_dir, step));
  return out;
}

// `j` with `s`'s positions and norms, keeping a checkpoint every tenth of
// its `steps`.
template <typename Job>
Job with_setting(Job j, const ExperimentContext& c, const Setting& s, std::int64_t steps) {
  j.threads = c.opt.threads;
  j.model.positions = s.positions;
  j.model.layer.norm_first = s.pre_ln;
  j.train.keep_checkpoints = true;
  j.train.checkpoint_every = std::max<std::int64_t>(1, steps / 10);
  return j;
}

// The reverse preset (or --quick's small one, with two layers too).
SequenceTaskJob reverse_job(const ExperimentContext& c, const Setting& s) {
  SequenceTaskJob j;  // the reverse preset
  if (c.opt.quick) {
    j = sequence_job(c, 8);
    j.model.num_layers = 2;
  }
  return with_setting(j, c, s, j.train.steps);
}

// The spam preset (or --quick's synthetic words, with two layers), trained
// for a fixed number of steps (2 epochs would be 266).
TextClassificationJob spam_job(const ExperimentContext& c, const Setting& s) {
  TextClassificationJob j = spam_preset();
  if (c.opt.quick) {
    j = quick_text_job(c);
    j.model.num_layers = 2;
    j.budget.max_steps = 10;
  } else {
    if (!c.opt.spam_dir.empty()) j.data_path = c.opt.spam_dir;
    j.budget.epochs = 2;
    j.budget.max_steps = 250;
  }
  return with_setting(j, c, s, j.budget.max_steps);
}

std::vector<Probe> probe_reverse(const ExperimentContext& c, const std::string& run_dir) {
  const RunConfig config = read_run_config(run_dir);
  const SequenceTaskJob trained = SequenceTaskJob::from_json(config.json, config.path);
  // A fixed batch of the training lengths, the same for every checkpoint and seed.
  const SyntheticBatch b = synthetic_batch(trained.task, c.opt.quick ? 8 : 64, 20261206, 0);
  return probe_run<LanguageModel>(trained.model, trained.train, run_dir, [&](LanguageModel& m) {
    Tensor logits = m.forward(b.ids, eval_context(Precision::kF32));
    cross_entropy_backward(m, logits, b.targets.data<std::int64_t>(), 1.0);
  });
}

std::vector<Probe> probe_spam(const ExperimentContext& c, const std::string& run_dir) {
  const RunConfig config = read_run_config(run_dir);
  const TextClassificationJob job = TextClassificationJob::from_json(config.json, config.path);
  const std::unique_ptr<Tokenizer> tokenizer = load_run_tokenizer(run_dir, job.model.vocab_size);
  const TokenizedExamples test = classifier_test_split(job, *tokenizer);
  // The first test messages, both classes among them.
  const std::size_t n = std::min<std::size_t>(test.tokens.size(), c.opt.quick ? 16 : 32);
  std::vector<const std::vector<std::int64_t>*> seqs;
  std::vector<std::int64_t> labels;
  for (std::size_t i = 0; i < n; ++i) seqs.push_back(&test.tokens[i]), labels.push_back(test.labels[i]);
  const TokenBatch tb = make_token_batch(seqs, labels, job.max_len, test.frame);
  return probe_run<SequenceClassifier>(job.model, job.train, run_dir, [&](SequenceClassifier& m) {
    Tensor logits = m.forward(tb.ids, &tb.padding, eval_context(Precision::kF32));
    cross_entropy_backward(m, logits, tb.labels.data<std::int64_t>(), 1.0);
  });
}

// Per setting, per seed, the probes over training.
using Probes = std::map<std::string, std::vector<std::vector<Probe>>>;

// The probe of `runs` (one per seed) nearest to `fraction` of training.
std::vector<const Probe*> at_fraction(const std::vector<std::vector<Probe>>& runs, double fraction) {
  std::vector<const Probe*> out;
  for (const auto& run : runs) {
    const double target = fraction * static_cast<double>(run.back().step);
    const Probe* best = &run.front();
    for (const Probe& p : run)
      if (std::abs(static_cast<double>(p.step) - target) < std::abs(static_cast<double>(best->step) - target))
        best = &p;
    out.push_back(best);
  }
  return out;
}

template <typename F>
std::vector<double> over(const std::vector<const Probe*>& ps, F f) {
  std::vector<double> v;
  for (const Probe* p : ps) v.push_back(f(*p));
  return v;
}

const std::pair<const char*, double> kWhen[] = {
    {"start", 0.0}, {"early (10%)", 0.1}, {"middle (50%)", 0.5}, {"end", 1.0}};

ExperimentTable positions_table(const std::string& task, const std::vector<Setting>& settings, const Probes& probes,
                                std::int64_t layers) {
  ExperimentTable t;
  t.title = fmt::format("{}: share of the position table's gradient by the first sublayer its path enters", task);
  t.columns = {"positions", "when", "step"};
  for (std::int64_t l = 0; l < layers; ++l) t.columns.push_back(fmt::format("layer {}", l + 1));
  t.columns.push_back("residual stream only");
  for (const Setting& s : settings)
    for (const auto& [when, fraction] : kWhen) {
      const auto ps = at_fraction(probes.at(s.slug()), fraction);
      std::vector<std::string> row = {s.label(), when, fmt::format("{}", ps.front()->step)};
      for (std::int64_t l = 0; l < layers; ++l)
        row.push_back(mean_std(over(ps, [&](const Probe& p) { return p.share[static_cast<std::size_t>(l)]; })));
      row.push_back(mean_std(over(ps, [](const Probe& p) { return p.residual_share; })));
      t.rows.push_back(row);
    }
  return t;
}

ExperimentTable heads_table(const std::string& task, const std::vector<Setting>& settings, const Probes& probes,
                            std::int64_t layers) {
  ExperimentTable t;
  t.title = fmt::format(
      "{}: mean pairwise cosine of the heads' shares of each layer's input gradient "
      "(in brackets: pairs below zero)",
      task);
  t.columns = {"positions", "when", "step"};
  for (std::int64_t l = 0; l < layers; ++l) t.columns.push_back(fmt::format("layer {}", l + 1));
  for (const Setting& s : settings)
    for (const auto& [when, fraction] : kWhen) {
      const auto ps = at_fraction(probes.at(s.slug()), fraction);
      std::vector<std::string> row = {s.label(), when, fmt::format("{}", ps.front()->step)};
      for (std::int64_t l = 0; l < layers; ++l) {
        const auto i = static_cast<std::size_t>(l);
        row.push_back(fmt::format("{} ({})", mean_std(over(ps, [&](const Probe& p) { return p.head_cosine[i]; })),
                                  pct(over(ps, [&](const Probe& p) { return p.negative_pairs[i]; }), 0)));
      }
      t.rows.push_back(row);
    }
  return t;
}

// A series per layer (and the residual stream) of one setting over training,
// mean and std over seeds at each kept step.
void add_curves(std::vector<Series>& out, const std::string& prefix, const std::vector<std::vector<Probe>>& runs,
                std::int64_t layers, bool heads) {
  const std::size_t points = runs.front().size();
  for (std::int64_t l = 0; l < layers + (heads ? 0 : 1); ++l) {
    Series s{l == layers ? prefix + "residual only" : fmt::format("{}layer {}", prefix, l + 1), {}, {}};
    for (std::size_t k = 0; k < points; ++k) {
      std::vector<double> v;
      for (const auto& run : runs) {
        if (k >= run.size()) continue;
        const Probe& p = run[k];
        const auto i = static_cast<std::size_t>(l);
        v.push_back(heads ? p.head_cosine[i] : l == layers ? p.residual_share : p.share[i]);
      }
      add_point(s, static_cast<double>(runs.front()[k].step), v);
    }
    out.push_back(std::move(s));
  }
}

json probes_json(const std::vector<Probe>& run) {
  json a = json::array();
  for (const Probe& p : run)
    a.push_back({{"step", p.step},
                 {"position_share", p.share},
                 {"residual_share", p.residual_share},
                 {"head_cosine", p.head_cosine},
                 {"negative_pairs", p.negative_pairs}});
  return a;
}

}  // namespace

ExperimentReport gradients_experiment(ExperimentContext& c) {
  const std::vector<Setting> settings = {{PositionKind::kLearned, false},
                                         {PositionKind::kLearned, true},
                                         {PositionKind::kSinusoidal, false},
                                         {PositionKind::kSinusoidal, true}};
  ExperimentReport r;
  r.method = fmt::format(
      "{} seed{} per setting; cells are mean ± sample standard deviation over seeds. Each run keeps its "
      "checkpoints (every tenth of training); a fixed batch (reverse: 64 sequences of the training lengths; "
      "spam: the first 32 test messages) goes forward and back through each, in fp32 without dropout. "
      "Position shares: the gradient of the position table (rows summed over the batch) split exactly by the "
      "first sublayer (attention or feed-forward block) each path from the table to the loss enters, as the "
      "projection of each part on the whole (the shares sum to 1; below 0, a part points against the whole). "
      "Head cosines: per layer, the mean over pairs of heads of the cosine between their shares of the gradient "
      "of the layer's input (each head's along its own query, key and value rows).",
      c.opt.seeds, c.opt.seeds == 1 ? "" : "s");
  json runs = json::array();
  const std::vector<std::string> tasks = {"reverse", "spam"};
  for (const std::string& task : tasks) {
    Probes probes;
    std::map<std::string, std::vector<double>> accuracy;  // what each setting's runs learned
    std::int64_t layers = 0, test_length = 0;
    for (const Setting& s : settings)
      for (std::uint64_t seed : c.seeds()) {
        const std::string label = task + "_" + s.slug();
        std::vector<Probe> run;
        double acc = 0;
        if (task == "reverse") {
          const SequenceTaskJob job = reverse_job(c, s);
          layers = job.model.num_layers;
          test_length = job.test_lengths.front();
          acc = run_quietly(c, job, label, seed).by_length.front().token_accuracy;
          run = probe_reverse(c, c.run_dir(label, static_cast<std::int64_t>(seed)));
        } else {
          const TextClassificationJob job = spam_job(c, s);
          layers = job.model.num_layers;
          acc = run_quietly(c, job, label, seed).test.accuracy;
          run = probe_spam(c, c.run_dir(label, static_cast<std::int64_t>(seed)));
        }
        accuracy[s.slug()].push_back(acc);
        const Probe& end = run.back();
        c.log.log(
            fmt::format("gradients: {} {} seed {}: at step {} layer 1 position share {:.2f}, layer 1 head "
                        "cosine {:.3f}",
                        task, s.label(), seed, end.step, end.share.front(), end.head_cosine.front()));
        runs.push_back({{"task", task},
                        {"positions", position_kind_name(s.positions)},
                        {"pre_ln", s.pre_ln},
                        {"seed", seed},
                        {"accuracy", acc},
                        {"probes", probes_json(run)}});
        probes[s.slug()].push_back(std::move(run));
      }
    ExperimentTable learned;
    learned.title = fmt::format("{}: what the runs learned", task);
    learned.columns = {"positions",
                       task == "reverse" ? fmt::format("token accuracy at length {}", test_length) : "test accuracy"};
    for (const Setting& s : settings) learned.rows.push_back({s.label(), pct(accuracy[s.slug()], 1)});
    r.tables.push_back(learned);
    r.tables.push_back(positions_table(task, settings, probes, layers));
    r.tables.push_back(heads_table(task, settings, probes, layers));
    for (bool pre : {false, true}) {
      std::vector<Series> shares, cosines;
      for (const Setting& s : settings)
        if (s.pre_ln == pre) {
          const std::string prefix = fmt::format("{}, ", position_kind_name(s.positions));
          add_curves(shares, prefix, probes.at(s.slug()), layers, false);
          add_curves(cosines, prefix, probes.at(s.slug()), layers, true);
        }
      const std::string norm = pre ? "pre-LN" : "post-LN";
      line_plot_png((fs::path(c.dir) / fmt::format("position_share_{}_{}.png", task, pre ? "pre" : "post")).string(),
                    fmt::format("{} ({}): share of the position table's gradient by first sublayer", task, norm),
                    "step", "share of the gradient", shares);
      line_plot_png((fs::path(c.dir) / fmt::format("head_cosine_{}_{}.png", task, pre ? "pre" : "post")).string(),
                    fmt::format("{} ({}): mean pairwise cosine of the heads' input gradients", task, norm), "step",
                    "cosine", cosines);
    }
  }
  r.results["runs"] = runs;
  return r;
}

}  // namespace multihead::experiment
