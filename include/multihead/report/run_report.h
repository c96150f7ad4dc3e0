// SPDX-License-Identifier: Apache-2.0
// A run's report.md and its figures, written after training.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "multihead/train/fit.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/trainer.h"

namespace multihead {

// A run's report.md: the title, a table of the task's rows, the training
// curves (loss; validation accuracy when there was any), the memory by
// part, then the task's own sections. Draws plots/loss.png (smoothed over
// the per-step values), plots/accuracy.png (axis 0 to 1), plots/learning_rate.png,
// plots/grad_norm.png, plots/throughput.png and plots/memory.png.
struct RunReport {
  std::string title;
  std::vector<std::pair<std::string, std::string>> rows;
  std::string sections;  // Markdown, "## ..." headings
};
void write_run_report(RunDir& run, const FitResult& fit, const RunReport& report);

// The training curves' figures (those write_run_report draws) from the
// curves so far, with the accuracy's when the validation has one: what
// training redraws as it goes (FitPlan::on_curves), so that plots/*.png can
// be watched while a run trains.
void draw_training_curves(RunDir& run, const TrainingCurves& curves, bool accuracy);
// The FitPlan::on_curves that draws them into `run`.
inline auto live_curves(RunDir& run) {
  return [&run](const TrainingCurves& curves, bool accuracy) { draw_training_curves(run, curves, accuracy); };
}

// PNG of the memory's parts and peak against the step.
void plot_memory(const MemoryCurve& memory, const std::string& path);

}  // namespace multihead
