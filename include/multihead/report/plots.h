// SPDX-License-Identifier: Apache-2.0
// PNG figures for run reports (drawn with cairo): line charts of training
// curves and attention heatmaps with token labels. Files are written
// atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace multihead {

struct Series {
  Series() = default;
  Series(std::string name_, std::vector<double> x_, std::vector<double> y_)
      : name(std::move(name_)), x(std::move(x_)), y(std::move(y_)) {}
  std::string name;
  std::vector<double> x, y;
  std::vector<double> err;          // optional: +- this at each point, drawn as error bars
  bool faint = false;               // thin and pale, under the others (raw values beneath their smoothed line)
  bool dashed = false;              // a reference line (perfect calibration, a bound)
  std::vector<std::string> labels;  // optional: a few characters beside each point (a bin's count)
};

// Axis settings; by default each axis spans its data.
struct PlotAxes {
  // Fixed ends of the y axis (a reliability diagram: 0 and 1); data outside is clipped.
  std::optional<double> y_min, y_max;
  // Bounds the y axis never passes but need not reach: it spans the data
  // (an accuracy between 0.94 and 0.97 is drawn there), within [y_floor, y_ceiling].
  std::optional<double> y_floor, y_ceiling;
  // Logarithmic axes, ticks at powers of two (x, head counts) or ten (y), for
  // a variable that grows geometrically; values <= 0 are left out.
  bool log_x = false, log_y = false;
};

// A tick's value with as many decimals as the axis's step needs (0.25
// steps: "23.25", not "23.2"), or in scientific notation when the step or
// the value is very small or large, with the mantissa digits that tell one
// tick from the next (a step of 2.5e-4: "1.25e-03", not "1.3e-03").
std::string tick_label(double v, double step);

// Axes end and tick at whole multiples of a round step (nice_tick_step); a
// series that is never negative keeps 0 as the floor of its axis. Series
// of at most kMarkersUpTo points are drawn with a marker at each point.
// The legend sits in the corner of the plot where it covers the fewest
// points, in a box over the lines.
void line_plot_png(const std::string& path, const std::string& title, const std::string& x_label,
                   const std::string& y_label, const std::vector<Series>& series, const PlotAxes& axes = {});
inline constexpr std::size_t kMarkersUpTo = 40;

// Exponential moving average with TensorBoard's debiasing: s_t = w s_{t-1} +
// (1 - w) y_t, divided by 1 - w^t, so the line starts at the data rather
// than at 0. Non-finite values are skipped (the line carries on).
std::vector<double> smoothed(const std::vector<double>& y, double weight = 0.9);
// A smoothing weight for a series of n points: its line lags about 1% of
// them (w / (1 - w) = n / 100), between TensorBoard's default 0.6 and 0.98.
double smoothing_weight(std::size_t n);

// A matrix of counts (a confusion matrix): each cell shows its count,
// coloured by its share of its row's total; rows labelled on the left,
// columns on top.
void count_matrix_png(const std::string& path, const std::string& title, const std::vector<std::int64_t>& counts,
                      std::int64_t rows, std::int64_t cols, const std::vector<std::string>& row_labels,
                      const std::vector<std::string>& col_labels, const std::string& row_axis,
                      const std::string& col_axis);

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

// A figure a report links, drawn by `draw` (which writes it): its Markdown
// image link, "![alt](link)". A figure that cannot be drawn (a library error,
// memory) is left out, and the link's place says so and why: a report, and
// the run it reports on, is never lost to one figure.
std::string figure_markdown(const std::string& alt, const std::string& link, const std::function<void()>& draw);

}  // namespace multihead
