// Line plots: round tick steps, and valid PNG files for awkward series
// (empty, one point, constant, NaN gaps, negative values).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "multihead/io/plots.h"

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

}  // namespace
}  // namespace multihead
