// SPDX-License-Identifier: Apache-2.0
// `multihead experiment positions`: positional encodings and length
// extrapolation on a synthetic sequence task (no dataset needed).
#include <filesystem>
#include <map>

#include "common.h"
#include "multihead/report/plots.h"
#include "multihead/tasks/sequence_task.h"

namespace multihead::experiment {

using json = nlohmann::json;

// Claims: sinusoidal positions train fastest but extrapolate badly; learned
// ones are ~20% slower with medium extrapolation; relative ones ~35% slower
// with the best extrapolation (Shaw et al. measured 7%).
ExperimentReport positions_experiment(ExperimentContext& c) {
  const bool q = c.opt.quick;
  const std::vector<std::string> kinds = {"none", "sinusoidal", "learned", "relative", "rope", "alibi"};
  const std::int64_t train_len = q ? 8 : 64;
  const std::vector<std::int64_t> lengths =
      q ? std::vector<std::int64_t>{8, 16, 32} : std::vector<std::int64_t>{64, 128, 256};
  SequenceTaskJob base = sequence_job(c, train_len);
  base.test_lengths = lengths;
  // Per kind: token accuracy per test length, sequence accuracy at the
  // training length, ms per step; each a list over seeds.
  std::map<std::string, std::vector<std::vector<double>>> tok;
  std::map<std::string, std::vector<double>> seq, ms;
  json runs = json::array();
  for (const auto& kind : kinds) {
    tok[kind].assign(lengths.size(), {});
    for (std::uint64_t seed : c.seeds()) {
      SequenceTaskJob j = base;
      j.model.positions = parse_position_kind(kind);
      SequenceTaskResult r = run_quietly(c, j, kind, seed);
      for (std::size_t i = 0; i < lengths.size(); ++i) tok[kind][i].push_back(r.by_length[i].token_accuracy);
      seq[kind].push_back(r.by_length[0].sequence_accuracy);
      ms[kind].push_back(r.ms_per_step);
      json rec = {{"positions", kind}, {"seed", seed}, {"ms_per_step", r.ms_per_step}, {"by_length", json::array()}};
      for (const auto& a : r.by_length)
        rec["by_length"].push_back(
            {{"length", a.length}, {"token_accuracy", a.token_accuracy}, {"sequence_accuracy", a.sequence_accuracy}});
      runs.push_back(rec);
      c.log.log(fmt::format("positions: {} seed {}: token accuracy {:.1f}% at {}, {:.1f} ms/step", kind, seed,
                            100 * r.by_length.back().token_accuracy, lengths.back(), r.ms_per_step));
    }
  }
  ExperimentTable t;
  t.title = fmt::format("Reverse task, trained on lengths 1 to {}, {} steps", train_len, base.train.steps);
  t.columns = {"positions"};
  for (auto L : lengths) t.columns.push_back(fmt::format("token accuracy at {}", L));
  t.columns.push_back(fmt::format("sequence accuracy at {}", lengths[0]));
  t.columns.push_back("ms per step");
  t.columns.push_back("step time vs sinusoidal");
  const double sin_ms = mean(ms["sinusoidal"]);
  std::vector<Series> curves;
  for (const auto& kind : kinds) {
    std::vector<std::string> row = {kind};
    Series s{kind, {}, {}};
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      row.push_back(pct(tok[kind][i], 1));
      add_point(s, static_cast<double>(lengths[i]), tok[kind][i]);
    }
    row.push_back(pct(seq[kind], 1));
    row.push_back(mean_std(ms[kind], 1));
    row.push_back(fmt::format("{:+.0f}%", 100 * (mean(ms[kind]) / sin_ms - 1)));
    t.rows.push_back(row);
    curves.push_back(s);
  }
  line_plot_png((std::filesystem::path(c.dir) / "token_accuracy_by_length.png").string(),
                "Token accuracy by test length (mean ± std over seeds)", "length", "token accuracy", curves,
                fraction_axes(true));
  ExperimentReport r;
  r.tables = {t};
  r.results = {{"runs", runs}, {"train_max_len", train_len}, {"steps", base.train.steps}};
  return r;
}

}  // namespace multihead::experiment
