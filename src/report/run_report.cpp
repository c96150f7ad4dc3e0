#include "multihead/report/run_report.h"

#include <fmt/format.h>

#include "multihead/report/plots.h"

namespace multihead {

void plot_memory(const MemoryCurve& memory, const std::string& path) {
  std::vector<Series> series;
  for (const auto& [name, y] : memory.lines()) series.push_back({name, memory.steps(), *y});
  line_plot_png(path, "Memory per step (allocator peak)", "step", "MiB", series);
}

void write_run_report(RunDir& run, const FitResult& fit, const RunReport& report) {
  const TrainingCurves& c = fit.curves;
  std::vector<Series> loss = {{"train (per step)", c.step, c.loss}};
  if (!c.eval_step.empty()) loss.push_back({"validation", c.eval_step, c.eval_loss});
  line_plot_png(run.file("plots/loss.png"), "Loss", "step", "cross-entropy", loss);
  const bool accuracy = fit.validation && fit.validation->accuracy;
  if (accuracy)
    line_plot_png(run.file("plots/accuracy.png"), "Validation accuracy", "step", "accuracy",
                  {{"validation", c.eval_step, c.eval_accuracy}});
  plot_memory(c.memory, run.file("plots/memory.png"));

  std::string md = fmt::format("# {}\n\n| | |\n|---|---|\n", report.title);
  for (const auto& [key, value] : report.rows) md += fmt::format("| {} | {} |\n", key, value);
  md += "\n## Training curves\n\n![loss](plots/loss.png)\n\n";
  if (accuracy) md += "![accuracy](plots/accuracy.png)\n\n";
  md += "## Memory\n\nAllocator peak per step, and its parts.\n\n![memory](plots/memory.png)\n\n";
  md += report.sections;
  md += "\nThe full configuration is in `config.json`, the per-step metrics in `metrics.jsonl`.\n";
  run.write_report(md);
}

}  // namespace multihead
