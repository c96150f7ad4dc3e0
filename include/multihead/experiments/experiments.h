// SPDX-License-Identifier: Apache-2.0
// `multihead experiment NAME`: measurements of the claims articles make
// about multi-head attention, one command each. An experiment trains a grid
// of settings, each with several seeds, and writes into its folder
// (results/NAME/ by default):
//   table.md      the tables, mean ± sample standard deviation over seeds;
//   results.json  every run's numbers;
//   *.png         plots;
//   runs/         each training run's own run directory.
// --quick shrinks every size so the whole experiment takes seconds (what
// the tests run); its numbers mean nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace multihead {

struct ExperimentOptions {
  bool quick = false;
  std::string out = "runs/experiments";  // the experiment writes out/NAME/, beside the runs of train
  std::int64_t seeds = 3;
  int threads = 0;
  std::string spam_dir;     // SpamAssassin data folder; empty: where scripts/setup.sh --data puts it
  std::string imdb_dir;     // an aclImdb folder; empty: not run
  std::string fashion_dir;  // Fashion-MNIST; empty: the Debian package's folder
  bool quiet = false;       // no progress lines on stderr
};

struct ExperimentTable {
  std::string title;
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  std::string markdown() const;
};

struct ExperimentReport {
  std::string name, dir;
  // How its cells were measured, when not over seeds (timings: medians of iterations).
  std::string method;
  std::vector<ExperimentTable> tables;
  nlohmann::json results;  // what results.json holds
};

// Loss spikes in a training curve: steps whose loss exceeds twice the median
// of the 20 steps before it and that median by more than kSpikeNats (near
// zero loss, noise alone doubles it). A NaN loss counts.
inline constexpr double kSpikeNats = 0.1;
std::int64_t count_loss_spikes(const std::vector<double>& losses);

// The experiments, one row each: its name (`multihead experiment NAME`) and
// the claim it measures. The table in experiments.cpp is the one place an
// experiment is added; the CLI's help and the unknown-name error read it.
struct ExperimentKind {
  const char* name;
  const char* claim;
};
const std::vector<ExperimentKind>& experiment_kinds();
// Their names, in the table's order.
std::vector<std::string> experiment_names();
// Throws ConfigError for an unknown name.
ExperimentReport run_experiment(const std::string& name, const ExperimentOptions& options);

}  // namespace multihead
