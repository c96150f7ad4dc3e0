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

// PNG of the memory's parts and peak against the step.
void plot_memory(const MemoryCurve& memory, const std::string& path);

}  // namespace multihead
