// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <fmt/ranges.h>

#include "common.h"
#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/kernels/machine.h"
#include "multihead/core/rng.h"
#include "multihead/tasks/presets.h"

namespace multihead {

std::string ExperimentTable::markdown() const {
  std::string md = title.empty() ? "" : "### " + title + "\n\n";
  md += "|";
  for (const auto& c : columns) md += " " + c + " |";
  md += "\n|";
  for (std::size_t i = 0; i < columns.size(); ++i) md += "---|";
  md += "\n";
  for (const auto& r : rows) {
    md += "|";
    for (const auto& cell : r) md += " " + cell + " |";
    md += "\n";
  }
  return md;
}

namespace experiment {
namespace {

// --quick's text data: two classes told apart by their words, among shared
// filler words, of lengths 4 to 40 words.
std::string write_synthetic_csv(const ExperimentContext& c) {
  std::string path = (std::filesystem::path(c.dir) / "synthetic.csv").string();
  const char* pos[] = {"good", "great", "fine", "nice", "calm"};
  const char* neg[] = {"bad", "awful", "poor", "nasty", "grim"};
  const char* filler[] = {"the", "a", "day", "was", "it", "and", "so", "then"};
  Rng rng(7);
  std::string f = "text,label\n";
  for (int i = 0; i < 240; ++i) {
    const bool p = i % 2 == 0;
    const int words = 4 + static_cast<int>(rng.next_u32() % 37);
    for (int w = 0; w < words; ++w) {
      if (w) f += ' ';
      const std::uint32_t r = rng.next_u32();
      f += (r % 3 == 0 ? (p ? pos : neg)[r / 3 % 5] : filler[r / 3 % 8]);
    }
    f += p ? ",pos\n" : ",neg\n";
  }
  write_file_atomic(path, f);
  return path;
}

}  // namespace

SequenceTaskJob sequence_job(const ExperimentContext& c, std::int64_t max_len) {
  SequenceTaskJob j;
  const bool q = c.opt.quick;
  j.task.kind = SyntheticKind::kReverse;
  j.task.min_len = 1;
  j.task.max_len = max_len;
  j.model.num_layers = q ? 1 : 2;
  j.model.layer.d_model = q ? 16 : 64;
  j.model.layer.nhead = q ? 2 : 4;
  j.model.layer.dim_feedforward = q ? 32 : 128;
  j.train.batch = q ? 8 : 32;
  j.train.steps = q ? 20 : 2500;
  j.train.schedule.warmup_steps = q ? 2 : 100;
  j.eval_batches = q ? 1 : 4;
  j.threads = c.opt.threads;
  return j;
}

TextClassificationJob quick_text_job(const ExperimentContext& c) {
  TextClassificationJob j = spam_preset();
  j.threads = c.opt.threads;
  j.source = "csv";
  j.data_path = write_synthetic_csv(c);
  j.tokenizer.kind = TokenizerKind::kWord;
  j.tokenizer.vocab_size = 64;
  j.model.num_layers = 1;
  j.model.layer.d_model = 16;
  j.model.layer.dim_feedforward = 32;
  j.max_len = j.model.max_len = 48;
  j.train.batch = 16;
  j.train.schedule.warmup_steps = 2;
  j.budget.epochs = 2;
  j.eval_batch = 64;
  return j;
}

}  // namespace experiment

std::int64_t count_loss_spikes(const std::vector<double>& losses) {
  constexpr std::size_t kWindow = 20;
  std::int64_t spikes = 0;
  for (std::size_t i = kWindow; i < losses.size(); ++i) {
    std::vector<double> w(losses.begin() + static_cast<std::ptrdiff_t>(i - kWindow),
                          losses.begin() + static_cast<std::ptrdiff_t>(i));
    std::nth_element(w.begin(), w.begin() + kWindow / 2, w.end());
    const double median = w[kWindow / 2];
    if (!(losses[i] <= 2.0 * median || losses[i] <= median + kSpikeNats)) ++spikes;  // a NaN loss counts too
  }
  return spikes;
}

namespace experiment {

ExperimentContext::ExperimentContext(const ExperimentOptions& o, const std::string& name)
    : opt(o), dir((std::filesystem::path(o.out) / name).string()), log(0, stderr, o.quiet, 1) {
  std::filesystem::create_directories(dir);
}

std::string ExperimentContext::run_dir(const std::string& label, std::int64_t seed) const {
  return (std::filesystem::path(dir) / "runs" / fmt::format("{}_seed{}", label, seed)).string();
}

std::vector<std::uint64_t> ExperimentContext::seeds() const {
  std::vector<std::uint64_t> s;
  for (std::int64_t i = 1; i <= opt.seeds; ++i) s.push_back(static_cast<std::uint64_t>(i));
  return s;
}

}  // namespace experiment

namespace {

struct ExperimentRow {
  ExperimentKind kind;
  ExperimentReport (*run)(experiment::ExperimentContext&);
};

const std::vector<ExperimentRow>& experiment_rows() {
  using namespace experiment;
  static const std::vector<ExperimentRow> rows = {
      {{"heads", "several heads against one, at equal width (text and image classification)"}, heads_experiment},
      {{"positions", "position encodings and length extrapolation"}, positions_experiment},
      {{"positions-seq2seq", "position encodings in an encoder-decoder, on pronunciation"},
       seq2seq_positions_experiment},
      {{"variants", "block-sparse, sliding-window and linear attention against full attention, by length"},
       variants_experiment},
      {{"head-analysis", "heads inside a trained model: ablation, diversity and dispersion"}, head_analysis_experiment},
      {{"optimisation", "gradient clipping and warmup"}, optimisation_experiment},
      {{"precision", "mixed precision: does it speed up training?"}, precision_experiment},
      {{"head-cost", "splitting into heads: what it costs"}, head_cost_experiment},
      {{"gradients", "where gradients flow: positions and heads"}, gradients_experiment},
  };
  return rows;
}

}  // namespace

const std::vector<ExperimentKind>& experiment_kinds() {
  static const std::vector<ExperimentKind> kinds = [] {
    std::vector<ExperimentKind> k;
    for (const ExperimentRow& r : experiment_rows()) k.push_back(r.kind);
    return k;
  }();
  return kinds;
}

std::vector<std::string> experiment_names() {
  std::vector<std::string> names;
  for (const ExperimentKind& k : experiment_kinds()) names.emplace_back(k.name);
  return names;
}

ExperimentReport run_experiment(const std::string& name, const ExperimentOptions& o) {
  const auto& rows = experiment_rows();
  const auto row = std::ranges::find_if(rows, [&](const ExperimentRow& r) { return name == r.kind.name; });
  check<ConfigError>(row != rows.end(), "unknown experiment '{}' (known: {})", name,
                     fmt::join(experiment_names(), ", "));
  check<ConfigError>(o.seeds >= 1, "seeds must be at least 1, got {}", o.seeds);
  experiment::ExperimentContext c(o, name);
  ExperimentReport r = row->run(c);
  r.name = name;
  r.dir = c.dir;
  std::string md =
      fmt::format("# Experiment: {}{}\n\n", name, o.quick ? " (quick: sizes too small to mean anything)" : "");
  if (!r.method.empty()) md += r.method + "\n\n";
  else
    md += fmt::format("{} seed{} per setting; cells are mean ± sample standard deviation over seeds.\n\n", o.seeds,
                      o.seeds == 1 ? "" : "s");
  for (const auto& t : r.tables) md += t.markdown() + "\n";
  r.results["experiment"] = name;
  r.results["quick"] = o.quick;
  r.results["seeds"] = o.seeds;
  const MachineInfo machine = machine_info();
  r.results["machine"] = machine;
  md += fmt::format("Measured on {}.\n", machine_summary(machine));
  write_file_atomic((std::filesystem::path(c.dir) / "table.md").string(), md);
  write_file_atomic((std::filesystem::path(c.dir) / "results.json").string(), r.results.dump(2) + "\n");
  return r;
}

}  // namespace multihead
