// SPDX-License-Identifier: Apache-2.0
#include "multihead/report/run_report.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "multihead/report/plots.h"
#include "multihead/train/described_config.h"

namespace multihead {

void plot_memory(const MemoryCurve& memory, const std::string& path) {
  // A part equal to one drawn already (fp32 gradients are as large as the
  // parameters) would lie under it unseen: one line, named for both.
  std::vector<Series> series;
  for (const auto& line : memory.lines()) {
    const std::string& name = line.first;
    const std::vector<double>& y = *line.second;
    const auto same = std::find_if(series.begin(), series.end(), [&](const Series& s) { return s.y == y; });
    if (same != series.end()) same->name += fmt::format(" = {}", name);
    else series.push_back({name, memory.steps(), y});
  }
  line_plot_png(path, "Memory per step (allocator peak)", "optimizer step", "memory (MiB)", series);
}

namespace {

// "tokens_per_s" -> "tokens per second".
std::string throughput_label(const std::string& key) {
  std::string name = key.substr(0, key.size() - 6);
  std::replace(name.begin(), name.end(), '_', ' ');
  return name + " per second";
}

}  // namespace

namespace {

// One figure of the training curves: its alt text, file name and drawing.
struct CurveFigure {
  std::string alt, name;
  std::function<void(const std::string&)> draw;
};

// The training curves' figures the curves so far have data for, in the
// report's order: what the report shows and what training redraws as it goes.
std::vector<CurveFigure> curve_figures(const TrainingCurves& c, bool accuracy) {
  const double weight = smoothing_weight(c.loss.size());
  std::vector<CurveFigure> figures;
  figures.push_back({"loss", "loss.png", [&c, weight](const std::string& path) {
                       // The per-step loss is noisy: drawn faint, with its smoothed line over it.
                       Series raw("train (per step)", c.step, c.loss);
                       raw.faint = true;
                       std::vector<Series> loss = {raw, {"train (smoothed)", c.step, smoothed(c.loss, weight)}};
                       if (!c.eval_step.empty()) loss.push_back({"validation", c.eval_step, c.eval_loss});
                       line_plot_png(path, "Loss", "optimizer step", "cross-entropy (nats)", loss);
                     }});
  if (accuracy)
    figures.push_back({"accuracy", "accuracy.png", [&c](const std::string& path) {
                         PlotAxes unit;
                         unit.y_floor = 0, unit.y_ceiling = 1;
                         line_plot_png(path, "Validation accuracy", "optimizer step", "accuracy (fraction right)",
                                       {{"validation", c.eval_step, c.eval_accuracy}}, unit);
                       }});
  figures.push_back({"learning rate", "learning_rate.png", [&c](const std::string& path) {
                       line_plot_png(path, "Learning rate", "optimizer step", "learning rate (per step, unitless)",
                                     {{"learning rate", c.step, c.lr}});
                     }});
  figures.push_back({"gradient norm", "grad_norm.png", [&c, weight](const std::string& path) {
                       Series norm("per step", c.step, c.grad_norm);
                       norm.faint = true;
                       line_plot_png(path, "Gradient norm (global, before clipping)", "optimizer step",
                                     "L2 norm (of the loss's gradient)",
                                     {norm, {"smoothed", c.step, smoothed(c.grad_norm, weight)}});
                     }});
  if (!c.throughput.empty())
    figures.push_back({"throughput", "throughput.png", [&c](const std::string& path) {
                         line_plot_png(path, "Training throughput (mean since the start)", "optimizer step",
                                       throughput_label(c.throughput_key),
                                       {{throughput_label(c.throughput_key), c.throughput_step, c.throughput}});
                       }});
  return figures;
}

}  // namespace

void draw_training_curves(RunDir& run, const TrainingCurves& curves, bool accuracy) {
  if (!run.writes() || curves.step.empty()) return;
  for (const CurveFigure& f : curve_figures(curves, accuracy)) f.draw(run.file("plots/" + f.name));
  plot_memory(curves.memory, run.file("plots/memory.png"));
}

void write_run_report(RunDir& run, const FitResult& fit, const RunReport& report) {
  const TrainingCurves& c = fit.curves;
  // Each figure drawn as its link is written: one that fails is named in the report, not fatal to it.
  auto figure = [&](const std::string& alt, const std::string& name,
                    const std::function<void(const std::string&)>& draw) {
    return figure_markdown(alt, "plots/" + name, [&] { draw(run.file("plots/" + name)); });
  };
  std::string md = fmt::format("# {}\n\n| | |\n|---|---|\n", report.title);
  for (const auto& [key, value] : report.rows) md += fmt::format("| {} | {} |\n", key, value);
  // Where the weights started, when not from the model's initialisation.
  const TrainConfig t = train_section(run.config(), run.file("config.json")).train;
  if (!t.init_from.empty())
    md += fmt::format(
        "| started from | `{}` (SHA-256 `{}`){} |\n", t.init_from, t.init_sha256,
        t.init_skip.empty() ? "" : fmt::format("; parameters matching `{}` initialised afresh", t.init_skip));
  md += fmt::format(
      "\n## Training curves\n\nThe per-step loss, faint, with an exponential moving average over it (weight {:.2f}, "
      "debiased as TensorBoard smooths; the weight grows with the run's length so that the line lags about 1% of "
      "it).\n\n",
      smoothing_weight(c.loss.size()));
  for (const CurveFigure& f : curve_figures(c, fit.validation && fit.validation->accuracy))
    md += figure(f.alt, f.name, f.draw);
  md += "## Memory\n\nAllocator peak per step, and its parts.\n\n";
  md += figure("memory", "memory.png", [&](const std::string& path) { plot_memory(c.memory, path); });
  md += report.sections;
  md += "\nThe full configuration is in `config.json`, the per-step metrics in `metrics.jsonl`.\n";
  run.write_report(md);
}

}  // namespace multihead
