// Line plots: round tick steps, and valid PNG files for awkward series
// (empty, one point, constant, NaN gaps, negative values).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <cairo.h>

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
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const fs::path p = dir / ("plot" + std::to_string(i) + ".png");
    line_plot_png(p.string(), "title", "x", "y", cases[i]);
    EXPECT_TRUE(is_png(p)) << "case " << i;
  }
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
    return std::array<int, 3>{static_cast<int>(v >> 16 & 255), static_cast<int>(v >> 8 & 255), static_cast<int>(v & 255)};
  };
  const auto top = rgb(1, 1), other = rgb(0, 0);
  EXPECT_NEAR(top[0], 13, 2);  // the full colour: 255 x (0.05, 0.25, 0.65)
  EXPECT_NEAR(top[1], 64, 2);
  EXPECT_NEAR(top[2], 166, 2);
  EXPECT_GT(other[0], top[0] + 30) << "0.06 of 0.1 is lighter";
  cairo_surface_destroy(s);
  fs::remove(p);
}

}  // namespace
}  // namespace multihead
