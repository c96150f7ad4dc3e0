// PNG figures for run reports (drawn with cairo): line charts of training
// curves and attention heatmaps with token labels. Files are written
// atomically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace multihead {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

// Axes end and tick at whole multiples of a round step (nice_tick_step); a
// series that is never negative keeps 0 as the floor of its axis. The legend
// sits in a box in the top right corner, over the lines.
void line_plot_png(const std::string& path, const std::string& title, const std::string& x_label,
                   const std::string& y_label, const std::vector<Series>& series);

// A round tick step for a range: 1, 2, 2.5 or 5 times a power of ten, the
// smallest giving at most about `intervals` intervals.
double nice_tick_step(double range, int intervals);

// weights: rows x cols, row-major, values in [0, 1]; labels may be empty.
// Colours run from white at 0 to dark blue at the map's largest weight (the
// colour bar names it): attention over T keys sits near 1/T, which a fixed
// 0..1 scale would draw almost white.
void heatmap_png(const std::string& path, const std::string& title, const std::vector<float>& weights,
                 std::int64_t rows, std::int64_t cols, const std::vector<std::string>& row_labels,
                 const std::vector<std::string>& col_labels);
// The same heatmap as PNG bytes, for a caller that writes a set of files
// only once every one of them is drawn.
std::string heatmap_png_bytes(const std::string& title, const std::vector<float>& weights, std::int64_t rows,
                              std::int64_t cols, const std::vector<std::string>& row_labels,
                              const std::vector<std::string>& col_labels);

}  // namespace multihead
