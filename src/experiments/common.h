// SPDX-License-Identifier: Apache-2.0
// Shared by the experiments (internal): statistics over seeds, quiet runs,
// the per-experiment folder.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "multihead/experiments/experiments.h"
#include "multihead/report/plots.h"
#include "multihead/tasks/jobs.h"
#include "multihead/train/progress.h"
#include "multihead/train/run_dir.h"

namespace multihead::experiment {

inline double mean(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m += x;
  return v.empty() ? 0.0 : m / static_cast<double>(v.size());
}

// The sample standard deviation (n - 1); 0 for fewer than two values.
inline double sample_std(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

// "mean ± std" of v scaled by `scale`, with `decimals` places; the sample
// standard deviation, left out for a single seed.
inline std::string mean_std(const std::vector<double>& v, int decimals = 2, double scale = 1.0) {
  if (v.empty()) return "-";
  if (v.size() == 1) return fmt::format("{:.{}f}", scale * v[0], decimals);
  return fmt::format("{:.{}f} ± {:.{}f}", scale * mean(v), decimals, scale * sample_std(v), decimals);
}

// A point of a plotted series at x: the mean of v over the seeds, with the
// sample standard deviation as its error bar.
inline void add_point(Series& s, double x, const std::vector<double>& v) {
  s.x.push_back(x);
  s.y.push_back(mean(v));
  s.err.push_back(sample_std(v));
}

// Axes for a fraction (accuracy): never past 0 and 1; log_x for a variable
// that doubles from point to point (head counts, lengths).
inline PlotAxes fraction_axes(bool log_x) {
  PlotAxes a;
  a.y_floor = 0, a.y_ceiling = 1;
  a.log_x = log_x;
  return a;
}

// Percentages (fractions times 100) and MiB (from bytes), as mean ± std.
inline std::string pct(const std::vector<double>& v, int decimals = 2) { return mean_std(v, decimals, 100.0) + "%"; }
inline std::string mib(const std::vector<double>& bytes) {
  std::vector<double> m;
  for (double b : bytes) m.push_back(b / (1024.0 * 1024.0));
  return mean_std(m, 1);
}

// The folder of one experiment, its progress lines, and the run folders under it.
struct ExperimentContext {
  const ExperimentOptions& opt;
  std::string dir;
  Progress log;
  ExperimentContext(const ExperimentOptions& o, const std::string& name);
  std::string run_dir(const std::string& label, std::int64_t seed) const;
  // Seeds 1..opt.seeds.
  std::vector<std::uint64_t> seeds() const;
};

// Trains one job of the grid with `seed`, quietly, in its own run folder;
// returns the job's result (TextClassificationResult, ...).
template <typename TaskJob>
auto run_quietly(const ExperimentContext& c, TaskJob job, const std::string& label, std::uint64_t seed) {
  job.train.seed = seed;
  job.report_title = label;
  RunDir dir(c.run_dir(label, static_cast<std::int64_t>(seed)), RunMode::kOverwrite);
  Progress quiet(0, stderr, true);
  return run_job(job, dir, quiet);
}

// The positions, variants and optimisation experiments' job: a small causal
// LM on the reverse task, trained on lengths 1..max_len, sized by --quick.
SequenceTaskJob sequence_job(const ExperimentContext& c, std::int64_t max_len);

// --quick's text classifier: a tiny model on synthetic data (two classes
// told apart by their words), written into the experiment's folder.
TextClassificationJob quick_text_job(const ExperimentContext& c);

ExperimentReport positions_experiment(ExperimentContext& c);
ExperimentReport seq2seq_positions_experiment(ExperimentContext& c);
ExperimentReport variants_experiment(ExperimentContext& c);
ExperimentReport optimisation_experiment(ExperimentContext& c);
ExperimentReport heads_experiment(ExperimentContext& c);
ExperimentReport head_analysis_experiment(ExperimentContext& c);
ExperimentReport precision_experiment(ExperimentContext& c);
ExperimentReport head_cost_experiment(ExperimentContext& c);
ExperimentReport gradients_experiment(ExperimentContext& c);

}  // namespace multihead::experiment
