// SPDX-License-Identifier: Apache-2.0
// Run directories: writes are atomic, the debris of a killed run (the
// temporaries of interrupted atomic writes) is removed when a run starts, one
// process at a time holds a directory, and a run is never replaced unasked.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/train/run_dir.h"
#include "test_util.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;

// The run directory itself is made by the tests.
class RunDirTest : public test::ScratchFolder {
 protected:
  RunDirTest() : ScratchFolder("rundir", false) {}
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
};

TEST_F(RunDirTest, RemovesStaleTemporariesAtStart) {
  touch(dir / "checkpoints" / ".last.safetensors.tmp.12345");
  touch(dir / ".config.json.tmp.7");
  touch(dir / "checkpoints" / "last.safetensors");  // a finished checkpoint stays
  touch(dir / "config.json");
  RunDir run(dir.string(), RunMode::kResume);
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

std::string error_of(const fs::path& dir, RunMode mode) {
  try {
    RunDir run(dir.string(), mode);
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

TEST_F(RunDirTest, OneProcessAtATimeHoldsADirectory) {
  {
    RunDir first(dir.string());
    EXPECT_EQ(error_of(dir, RunMode::kResume),
              fmt::format("'{}' is in use by another process (pid {}); wait for it or choose another directory",
                          dir.string(), ::getpid()));
  }
  EXPECT_EQ(error_of(dir, RunMode::kResume), "no error");  // released with the first
  // A process killed while it holds the lock leaves none behind.
  const pid_t child = ::fork();
  if (child == 0) {
    RunDir held(dir.string(), RunMode::kResume);
    ::_exit(0);  // no destructor runs
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(error_of(dir, RunMode::kResume), "no error");
}

TEST_F(RunDirTest, ARunIsNeverReplacedUnasked) {
  {
    RunDir run(dir.string());
    run.write_json("config.json", {{"task", "x"}});
    run.write_text("checkpoints/last.safetensors", "weights");
  }
  EXPECT_EQ(error_of(dir, RunMode::kNew),
            fmt::format("'{}' already holds a run; --resume continues it, --overwrite replaces it", dir.string()));
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "last.safetensors"));
  EXPECT_EQ(error_of(dir, RunMode::kResume), "no error");
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "last.safetensors"));
  EXPECT_EQ(error_of(dir, RunMode::kOverwrite), "no error");
  EXPECT_FALSE(fs::exists(dir / "config.json"));
  EXPECT_FALSE(fs::exists(dir / "checkpoints" / "last.safetensors"));
  EXPECT_EQ(error_of(dir, RunMode::kNew), "no error");  // only empty folders and the lock are left
  // A run killed before it wrote its config.json (its tokenizer written, its
  // lock left) is still a run: resumed or overwritten, never taken as new.
  touch(dir / "tokenizer" / "tokenizer.json");
  touch(dir / "run.lock");  // what a killed process leaves: a RunDir that ends removes it
  EXPECT_EQ(error_of(dir, RunMode::kNew),
            fmt::format("'{}' already holds a run; --resume continues it, --overwrite replaces it", dir.string()));
  EXPECT_EQ(error_of(dir, RunMode::kResume), "no error");
}

TEST_F(RunDirTest, ADirectoryWithOtherFilesIsRefusedWhateverTheMode) {
  touch(dir / "notes.txt");
  for (RunMode mode : {RunMode::kNew, RunMode::kOverwrite, RunMode::kResume})
    EXPECT_EQ(
        error_of(dir, mode),
        fmt::format("'{}' is not empty and holds no run; a run goes into a new or empty directory", dir.string()));
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_FALSE(fs::exists(dir / "run.lock"));  // a refusal leaves no trace that would pass for a run
  fs::remove_all(dir);
  touch(dir);  // a file, not a directory
  EXPECT_EQ(error_of(dir, RunMode::kNew).substr(0, 28), "cannot create run directory ");
}

}  // namespace
}  // namespace multihead
