// SPDX-License-Identifier: Apache-2.0
// `multihead experiment variants`: full, block-sparse, sliding-window and
// linear attention against sequence length.
#include <filesystem>
#include <map>

#include "common.h"
#include "multihead/report/plots.h"
#include "multihead/tasks/sequence_task.h"

namespace multihead::experiment {

using json = nlohmann::json;

// Full, block-sparse, sliding-window and linear attention on the copy task,
// trained and tested at growing lengths: accuracy, time and memory.
ExperimentReport variants_experiment(ExperimentContext& c) {
  const bool q = c.opt.quick;
  const std::vector<std::string> variants = {"full", "block_sparse", "sliding_window", "linear"};
  const std::vector<std::int64_t> lengths =
      q ? std::vector<std::int64_t>{8, 16} : std::vector<std::int64_t>{64, 128, 256};
  const std::int64_t window = q ? 4 : 32;
  json runs = json::array();
  ExperimentTable t;
  t.title =
      fmt::format("Copy task at each length (trained and tested there); window {} keys, blocks of {}", window, window);
  t.columns = {"attention", "length", "token accuracy", "sequence accuracy", "ms per step", "peak activations MiB"};
  std::map<std::string, Series> time_curves, acc_curves;
  for (const auto& v : variants) {
    for (std::int64_t L : lengths) {
      std::vector<double> tok, seq, ms, mem;
      for (std::uint64_t seed : c.seeds()) {
        SequenceTaskJob j = sequence_job(c, L);
        j.task.kind = SyntheticKind::kCopy;
        j.task.min_len = L;
        j.test_lengths = {L};
        j.train.batch = q ? 4 : 16;
        j.train.steps = q ? 10 : 600;
        j.model.positions = PositionKind::kRope;
        AttentionPattern& p = j.model.layer.pattern;
        p.variant = parse_attention_variant(v);
        p.window_left = p.window_right = window;
        p.sparse_block = window;
        SequenceTaskResult r = run_quietly(c, j, fmt::format("{}_L{}", v, L), seed);
        tok.push_back(r.by_length[0].token_accuracy);
        seq.push_back(r.by_length[0].sequence_accuracy);
        ms.push_back(r.ms_per_step);
        mem.push_back(static_cast<double>(r.peak_activation_bytes) / (1024.0 * 1024.0));
        runs.push_back({{"attention", v},
                        {"length", L},
                        {"seed", seed},
                        {"token_accuracy", tok.back()},
                        {"sequence_accuracy", seq.back()},
                        {"ms_per_step", r.ms_per_step},
                        {"peak_activation_bytes", r.peak_activation_bytes}});
      }
      c.log.log(
          fmt::format("variants: {} at {}: token accuracy {:.1f}%, {:.1f} ms/step", v, L, 100 * mean(tok), mean(ms)));
      t.rows.push_back({v, std::to_string(L), pct(tok, 1), pct(seq, 1), mean_std(ms, 1), mean_std(mem, 1)});
      time_curves[v].name = acc_curves[v].name = v;
      add_point(time_curves[v], static_cast<double>(L), ms);
      add_point(acc_curves[v], static_cast<double>(L), tok);
    }
  }
  auto values = [](const std::map<std::string, Series>& m) {
    std::vector<Series> s;
    for (const auto& [k, v] : m) s.push_back(v);
    return s;
  };
  // Lengths double from point to point, and so (or faster) does the time of full attention.
  PlotAxes log_log;
  log_log.log_x = log_log.log_y = true;
  line_plot_png((std::filesystem::path(c.dir) / "ms_per_step.png").string(),
                "Training step time (mean ± std over seeds)", "length", "ms per step", values(time_curves), log_log);
  line_plot_png((std::filesystem::path(c.dir) / "token_accuracy.png").string(),
                "Token accuracy (mean ± std over seeds)", "length", "token accuracy", values(acc_curves),
                fraction_axes(true));
  ExperimentReport r;
  r.tables = {t};
  r.results = {{"runs", runs}};
  return r;
}

}  // namespace multihead::experiment
