#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "experiment_common.h"
#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/kernels/machine.h"

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

Context::Context(const ExperimentOptions& o, const std::string& name)
    : opt(o), dir((std::filesystem::path(o.out) / name).string()), log(0, stderr, o.quiet, 1) {
  std::filesystem::create_directories(dir);
}

std::string Context::run_dir(const std::string& label, std::int64_t seed) const {
  return (std::filesystem::path(dir) / "runs" / fmt::format("{}_seed{}", label, seed)).string();
}

std::vector<std::uint64_t> Context::seeds() const {
  std::vector<std::uint64_t> s;
  for (std::int64_t i = 1; i <= opt.seeds; ++i) s.push_back(static_cast<std::uint64_t>(i));
  return s;
}

}  // namespace experiment

const std::vector<std::string>& experiment_names() {
  static const std::vector<std::string> names = {"heads", "positions", "variants", "head-analysis", "optimisation"};
  return names;
}

ExperimentReport run_experiment(const std::string& name, const ExperimentOptions& o) {
  check<ConfigError>(std::ranges::find(experiment_names(), name) != experiment_names().end(),
                     "unknown experiment '{}' (known: heads, positions, variants, head-analysis, optimisation)",
                     name);
  check<ConfigError>(o.seeds >= 1, "seeds must be at least 1, got {}", o.seeds);
  experiment::Context c(o, name);
  ExperimentReport r = name == "heads"           ? experiment::heads_experiment(c)
                       : name == "positions"     ? experiment::positions_experiment(c)
                       : name == "variants"      ? experiment::variants_experiment(c)
                       : name == "head-analysis" ? experiment::head_analysis_experiment(c)
                                                 : experiment::optimisation_experiment(c);
  r.name = name;
  r.dir = c.dir;
  std::string md = fmt::format("# Experiment: {}{}\n\n", name, o.quick ? " (quick: sizes too small to mean anything)" : "");
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
