// Run directories: writes are atomic, and the debris of a killed run (the
// temporaries of interrupted atomic writes) is removed when a run starts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "multihead/io/run_dir.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("multihead_rundir_" + std::to_string(::getpid()));
    fs::remove_all(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  static void touch(const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "partial";
  }
  static int temporaries(const fs::path& root) {
    int n = 0;
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.path().filename().string().find(".tmp.") != std::string::npos) ++n;
    return n;
  }
  fs::path dir;
};

TEST_F(RunDirTest, RemovesStaleTemporariesAtStart) {
  touch(dir / "checkpoints" / ".last.safetensors.tmp.12345");
  touch(dir / ".config.json.tmp.7");
  touch(dir / "checkpoints" / "last.safetensors");  // a finished checkpoint stays
  RunDir run(dir.string());
  EXPECT_EQ(temporaries(dir), 0);
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "last.safetensors"));
}

TEST_F(RunDirTest, WritesAreWholeAndLeaveNoTemporary) {
  RunDir run(dir.string());
  run.write_text("report.md", "first");
  run.write_text("report.md", "second version");
  std::ifstream in(dir / "report.md");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "second version");
  EXPECT_EQ(temporaries(dir), 0);
}

}  // namespace
}  // namespace multihead
