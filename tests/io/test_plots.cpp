// SPDX-License-Identifier: Apache-2.0
// Line plots: round tick steps, and valid PNG files for awkward series
// (empty, one point, constant, NaN gaps, negative values).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <stdexcept>

#include <cairo.h>

#include "multihead/core/error.h"
#include "multihead/report/plots.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;

TEST(Plots, TickStepsAreRound) {
  EXPECT_DOUBLE_EQ(nice_tick_step(0.74, 5), 0.2);
  EXPECT_DOUBLE_EQ(nice_tick_step(132, 8), 20);
  EXPECT_DOUBLE_EQ(nice_tick_step(797, 8), 100);
  EXPECT_DOUBLE_EQ(nice_tick_step(206, 5), 50);
  EXPECT_DOUBLE_EQ(nice_tick_step(1, 4), 0.25);
  EXPECT_DOUBLE_EQ(nice_tick_step(10, 5), 2);
  EXPECT_NEAR(nice_tick_step(3e-4, 5), 1e-4, 1e-18);
  EXPECT_DOUBLE_EQ(nice_tick_step(9.5e6, 5), 2e6);
}

bool is_png(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::string head(std::istreambuf_iterator<char>(in), {});
  return head.size() > 8 && head.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0;
}

// A learning-rate axis of 2.5e-4 steps labelled each tick apart (1.25e-3
// was "1.3e-03", like 1.3e-3's).
TEST(Plots, TickLabelsTellEveryTickApart) {
  EXPECT_EQ(tick_label(1.25e-3, 2.5e-4), "1.25e-03");
  EXPECT_EQ(tick_label(5e-4, 2.5e-4), "5.0e-04");
  EXPECT_EQ(tick_label(2e-4, 1e-4), "2e-04");
  EXPECT_EQ(tick_label(2e6, 5e5), "2.0e+06");
  EXPECT_EQ(tick_label(23.25, 0.25), "23.25");
  EXPECT_EQ(tick_label(0.1, 0.1), "0.1");
  EXPECT_EQ(tick_label(0, 1e-4), "0");
}

TEST(Plots, AwkwardSeriesStillMakeAPicture) {
  const fs::path dir = fs::temp_directory_path() / "multihead_test_plots";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const double nan = std::nan("");
  const std::vector<std::vector<Series>> cases = {
      {},
      {{"one point", {3}, {0.5}}},
      {{"constant", {1, 2, 3}, {2, 2, 2}}},
      {{"gaps", {1, 2, 3, 4}, {1, nan, 3, nan}}, {"all NaN", {1, 2}, {nan, nan}}},
      {{"negative", {0, 1, 2}, {-5, -1e-3, -2}}, {"a rather long series name for the legend box", {0, 2}, {1, 7}}},
      // A value and its smoothed twin an ulp apart (a one-step run): a point, not a range of 1e-17.
      {{"per step", {1}, {0.7}}, {"smoothed", {1}, {std::nextafter(0.7, 1.0)}}},
      {{"x an ulp apart", {1e6, std::nextafter(1e6, 2e6)}, {1, 2}}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const fs::path p = dir / ("plot" + std::to_string(i) + ".png");
    line_plot_png(p.string(), "title", "x", "y", cases[i]);
    EXPECT_TRUE(is_png(p)) << "case " << i;
  }
  fs::remove_all(dir);
}

TEST(Plots, SmoothingIsTensorBoardsDebiasedMovingAverage) {
  const double nan = std::nan("");
  const std::vector<double> s = smoothed({1, 3, nan, 5}, 0.5);
  EXPECT_DOUBLE_EQ(s[0], 1);                    // debiased: the first point itself
  EXPECT_DOUBLE_EQ(s[1], (0.25 + 1.5) / 0.75);  // (0.5 * 0.5 * 1 + 0.5 * 3) / (1 - 0.5^2)
  EXPECT_TRUE(std::isnan(s[2]));                // a gap stays a gap
  EXPECT_DOUBLE_EQ(s[3], (0.5 * 1.75 + 2.5) / (0.5 * 0.75 + 0.5));
  EXPECT_DOUBLE_EQ(smoothing_weight(50), 0.6);   // short runs: TensorBoard's default
  EXPECT_DOUBLE_EQ(smoothing_weight(900), 0.9);  // a lag of 9 steps in 900
  EXPECT_DOUBLE_EQ(smoothing_weight(100000), 0.98);
}

// A PNG read back, for its pixels.
class Png {
 public:
  explicit Png(const fs::path& p) : s_(cairo_image_surface_create_from_png(p.string().c_str())) {
    EXPECT_EQ(cairo_surface_status(s_), CAIRO_STATUS_SUCCESS);
  }
  ~Png() { cairo_surface_destroy(s_); }
  Png(const Png&) = delete;
  Png& operator=(const Png&) = delete;
  // (r, g, b) at (x, y).
  std::array<int, 3> at(int x, int y) const {
    std::uint32_t v = 0;
    std::memcpy(&v, cairo_image_surface_get_data(s_) + y * cairo_image_surface_get_stride(s_) + 4 * x, 4);
    return {static_cast<int>(v >> 16 & 255), static_cast<int>(v >> 8 & 255), static_cast<int>(v & 255)};
  }

 private:
  cairo_surface_t* s_;
};

TEST(Plots, FixedAxesErrorBarsLogAxesAndTheLegendOutOfTheWay) {
  const fs::path dir = fs::temp_directory_path() / "multihead_test_plot_axes";
  fs::create_directories(dir);
  // An accuracy of 0.5 on a 0..1 axis sits half way down the plot area (top 50, height 370).
  PlotAxes unit;
  unit.y_min = 0, unit.y_max = 1;
  line_plot_png((dir / "a.png").string(), "t", "x", "y", {{"flat", {0, 10}, {0.5, 0.5}}}, unit);
  const auto mid = Png(dir / "a.png").at(400, 50 + 185);
  EXPECT_NEAR(mid[0], 0, 10);  // the first series' colour (0, 115, 178)
  EXPECT_NEAR(mid[2], 178, 10);
  // Data filling the top right: the legend goes to a corner with none (its frame's grey is not there).
  std::vector<double> x, y;
  for (int i = 0; i <= 100; ++i) x.push_back(i), y.push_back(i < 50 ? 0 : 9.5);
  PlotAxes to_ten;
  to_ten.y_max = 10;  // 9.5 lies 18 px below the plot's top, where a legend box would go
  line_plot_png((dir / "b.png").string(), "t", "x", "y", {{"a series name", x, y}}, to_ten);
  // The legend's text is black; nothing else in the plot is (ticks are left of x = 80 and below
  // it, grid lines light grey, the series coloured). None of it sits over the data's band near
  // the top (rows 56 to 82), and all of it is somewhere.
  int text_over_data = 0, text_elsewhere = 0;
  const Png b(dir / "b.png");
  for (int py = 52; py < 418; ++py)
    for (int px = 90; px < 778; ++px) {
      const auto p = b.at(px, py);
      if (std::max({p[0], p[1], p[2]}) < 100 && std::max({p[0], p[1], p[2]}) - std::min({p[0], p[1], p[2]}) < 10)
        (py < 82 && px > 420 ? text_over_data : text_elsewhere)++;
    }
  EXPECT_EQ(text_over_data, 0);
  EXPECT_GT(text_elsewhere, 20);
  // Error bars and log axes make pictures, values <= 0 left out of a log axis.
  Series bars("heads", {1, 2, 4, 8, 16}, {0.6, 0.62, 0.61, 0.64, 0.0});
  bars.err = {0.1, 0.12, 0.05, 0.02, 0.01};
  PlotAxes logs;
  logs.log_x = true;
  line_plot_png((dir / "c.png").string(), "t", "heads", "accuracy", {bars}, logs);
  logs.log_y = true;
  line_plot_png((dir / "d.png").string(), "t", "heads", "accuracy", {bars}, logs);
  for (const char* f : {"c.png", "d.png"}) EXPECT_TRUE(is_png(dir / f)) << f;
  count_matrix_png((dir / "m.png").string(), "t", {5, 1, 0, 4}, 2, 2, {"a", "b"}, {"a", "b"}, "true", "predicted");
  EXPECT_TRUE(is_png(dir / "m.png"));
  fs::remove_all(dir);
}

// Attention over T keys sits near 1/T: the colours run to the map's largest
// weight, so that it is drawn dark rather than nearly white.
TEST(Plots, HeatmapColoursRunToTheMapsLargestWeight) {
  const fs::path p = fs::temp_directory_path() / "multihead_test_heatmap.png";
  std::vector<float> w(16, 0.06f);
  w[5] = 0.1f;  // row 1, column 1
  const std::vector<std::string> labels = {"a", "b", "c", "d"};
  heatmap_png(p.string(), "t", w, 4, 4, labels, labels);
  cairo_surface_t* s = cairo_image_surface_create_from_png(p.string().c_str());
  ASSERT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  const unsigned char* px = cairo_image_surface_get_data(s);
  const int stride = cairo_image_surface_get_stride(s);
  // The layout of plots.cpp for 4 x 4 with labels: 28-pixel cells after 110
  // pixels of row labels and 140 of title and column labels.
  auto rgb = [&](int row, int col) {
    const int x = 110 + 28 * col + 14, y = 140 + 28 * row + 14;
    std::uint32_t v = 0;
    std::memcpy(&v, px + y * stride + 4 * x, 4);
    return std::array<int, 3>{static_cast<int>(v >> 16 & 255), static_cast<int>(v >> 8 & 255),
                              static_cast<int>(v & 255)};
  };
  const auto top = rgb(1, 1), other = rgb(0, 0);
  EXPECT_NEAR(top[0], 13, 2);  // the full colour: 255 x (0.05, 0.25, 0.65)
  EXPECT_NEAR(top[1], 64, 2);
  EXPECT_NEAR(top[2], 166, 2);
  EXPECT_GT(other[0], top[0] + 30) << "0.06 of 0.1 is lighter";
  cairo_surface_destroy(s);
  fs::remove(p);
}

// A figure that cannot be drawn leaves a line in the report where its link
// would be, and the report goes on: a run is never lost to one figure.
TEST(Plots, AFigureThatCannotBeDrawnIsNamedNotFatal) {
  EXPECT_EQ(figure_markdown("loss", "plots/loss.png", [] {}), "![loss](plots/loss.png)\n\n");
  EXPECT_EQ(figure_markdown("confusion matrix", "plots/confusion.png",
                            [] { throw IoError("cannot encode PNG 'x': out of memory"); }),
            "*The figure confusion matrix (plots/confusion.png) could not be drawn: cannot encode PNG 'x': out of "
            "memory.*\n\n");
  EXPECT_EQ(figure_markdown("memory", "plots/memory.png", [] { throw std::bad_alloc(); }),
            "*The figure memory (plots/memory.png) could not be drawn: out of memory.*\n\n");
  // Anything else is a defect of the program, not of a figure: it goes on up.
  EXPECT_THROW(figure_markdown("x", "x.png", [] { throw std::logic_error("bug"); }), std::logic_error);
}

}  // namespace
}  // namespace multihead
