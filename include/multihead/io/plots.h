// PNG figures for run reports (drawn with cairo): line charts of training
// curves and attention heatmaps with token labels. Files are written
// atomically.
#pragma once

#include <string>
#include <vector>

namespace multihead {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

void line_plot_png(const std::string& path, const std::string& title, const std::string& x_label,
                   const std::string& y_label, const std::vector<Series>& series);

// weights: rows x cols, row-major, values in [0, 1]; labels may be empty.
void heatmap_png(const std::string& path, const std::string& title, const std::vector<float>& weights,
                 std::int64_t rows, std::int64_t cols, const std::vector<std::string>& row_labels,
                 const std::vector<std::string>& col_labels);

}  // namespace multihead
