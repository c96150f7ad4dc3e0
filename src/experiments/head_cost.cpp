// SPDX-License-Identifier: Apache-2.0
// The experiment about what splitting into heads costs: "splitting into h
// heads reduces the complexity from O(n^2 d) to O(n^2 d / h)" and "parallel
// heads are 2.8x faster". In FLOPs the split changes nothing: the scores are
// h products of (L, d/h) by (d/h, L), 2 L^2 d in all, whatever h. What it
// does to time on a CPU is measured here: the attention layer at fixed
// d_model and length, h from 1 to 64 (d_model / h >= 4), forward and
// forward+backward, fp32 and bf16.
#include <filesystem>
#include <map>

#include "common.h"
#include "multihead/bench/attention_bench.h"
#include "multihead/report/plots.h"

namespace multihead::experiment {

namespace {

using json = nlohmann::json;

constexpr std::int64_t kMinHeadDim = 4;

}  // namespace

ExperimentReport head_cost_experiment(ExperimentContext& c) {
  const bool q = c.opt.quick;
  const std::vector<std::int64_t> widths = q ? std::vector<std::int64_t>{32} : std::vector<std::int64_t>{256, 512};
  const std::vector<std::int64_t> lengths = q ? std::vector<std::int64_t>{16} : std::vector<std::int64_t>{512, 2048};
  json runs = json::array();
  ExperimentReport r;
  // (d, L, precision, backward) -> the series of the attention core's time against h.
  std::map<std::string, Series> core_ms, layer_gflops;
  for (const Precision precision : {Precision::kF32, Precision::kBF16})
    for (const bool backward : {false, true})
      for (const std::int64_t d : widths)
        for (const std::int64_t L : lengths) {
          ExperimentTable t;
          t.title = fmt::format(
              "d_model {}, L = {}, batch 1, {}, {}: the attention core (scores, softmax, weighted "
              "sum) and the whole layer (projections included)",
              d, L, precision_name(precision), backward ? "forward+backward" : "forward");
          t.columns = {"heads",          "head dim", "core ms",       "core GFLOP/s",
                       "core vs 1 head", "layer ms", "layer GFLOP/s", "peak activations MiB"};
          const std::string key =
              fmt::format("d {}, L {}, {}, {}", d, L, precision_name(precision), backward ? "fwd+bwd" : "fwd");
          double one_head_ms = 0;
          for (std::int64_t h = 1; h <= 64 && d / h >= kMinHeadDim; h *= 2) {
            AttentionBenchConfig cfg;
            cfg.batch = 1, cfg.seq_len = L, cfg.embed_dim = d, cfg.num_heads = h;
            cfg.backward = backward;
            cfg.precision = precision;
            cfg.warmup = q ? 0 : 2;  // quick: no warm-up (timing.h warms up for a second at least)
            cfg.iters = q ? 2 : 7;
            const AttentionBenchResult b = run_attention_bench(cfg);
            if (h == 1) one_head_ms = b.attention_ms;
            const double act_mib = static_cast<double>(b.peak_activation_bytes) / (1024.0 * 1024.0);
            t.rows.push_back({std::to_string(h), std::to_string(d / h), fmt::format("{:.2f}", b.attention_ms),
                              fmt::format("{:.0f}", b.attention_gflops),
                              fmt::format("{:.2f}x", one_head_ms / b.attention_ms), fmt::format("{:.2f}", b.ms),
                              fmt::format("{:.0f}", b.gflops), fmt::format("{:.1f}", act_mib)});
            runs.push_back({{"d_model", d},
                            {"length", L},
                            {"heads", h},
                            {"precision", precision_name(precision)},
                            {"backward", backward},
                            {"core_ms", b.attention_ms},
                            {"core_flops", b.attention_flops},
                            {"layer_ms", b.ms},
                            {"layer_flops", b.flops},
                            {"peak_activation_bytes", b.peak_activation_bytes},
                            {"samples_ms", b.samples_ms}});
            Series& s = core_ms[key];
            s.name = key;
            s.x.push_back(static_cast<double>(h));
            s.y.push_back(b.attention_ms);
            Series& g = layer_gflops[key];
            g.name = key;
            g.x.push_back(static_cast<double>(h));
            g.y.push_back(b.gflops);
            c.log.log(fmt::format("head-cost: {}, h = {}: core {:.2f} ms ({:.0f} GFLOP/s), layer {:.2f} ms", key, h,
                                  b.attention_ms, b.attention_gflops, b.ms));
          }
          r.tables.push_back(std::move(t));
        }
  // Time against h on log axes for each precision and pass, a line a (d, L).
  for (const Precision precision : {Precision::kF32, Precision::kBF16})
    for (const bool backward : {false, true}) {
      std::vector<Series> curves;
      const std::string suffix = fmt::format(", {}, {}", precision_name(precision), backward ? "fwd+bwd" : "fwd");
      for (const auto& [key, s] : core_ms)
        if (key.ends_with(suffix)) {
          Series copy = s;
          copy.name = key.substr(0, key.size() - suffix.size());
          curves.push_back(std::move(copy));
        }
      PlotAxes log_log;
      log_log.log_x = log_log.log_y = true;
      const std::string file =
          fmt::format("core_ms_{}_{}.png", precision_name(precision), backward ? "fwd_bwd" : "fwd");
      line_plot_png((std::filesystem::path(c.dir) / file).string(),
                    fmt::format("Attention core time against heads ({}, {}; FLOPs constant in h)",
                                precision_name(precision), backward ? "forward+backward" : "forward"),
                    "heads", "ms", curves, log_log);
    }
  r.method = fmt::format(
      "Timings, not training: each cell is the median of {} timed iterations {} (`bench attention`'s timing); "
      "--seeds does not apply. FLOPs are the same at every head count: the core's scores and weighted sum are "
      "4 L^2 d a forward (3x with backward), the projections 8 L d^2.",
      q ? 2 : 7, q ? "without a warm-up" : "after a warm-up of at least a second");
  r.results = {{"runs", runs},
               {"flops",
                "the scores and the weighted sum: 4 L^2 d a forward whatever h (3x that with backward); "
                "the projections 8 L d^2"}};
  return r;
}

}  // namespace multihead::experiment
