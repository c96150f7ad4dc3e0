// SPDX-License-Identifier: Apache-2.0
// The one writer of files replaces regular files only: a symbolic link,
// device, FIFO or directory at the target is refused and left as it was.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "test_util.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public test::ScratchFolder {
 protected:
  AtomicFile() : ScratchFolder("atomic", true) {}
  std::string error_of(const fs::path& p) {
    try {
      write_file_atomic(p.string(), "new");
    } catch (const IoError& e) {
      return e.what();
    }
    return "no error";
  }
  int entries() const {
    int n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
    return n;
  }
};

TEST_F(AtomicFile, ReplacesARegularFileAndLeavesNoTemporary) {
  write_file_atomic((dir / "a").string(), "old");
  write_file_atomic((dir / "a").string(), "new");
  EXPECT_EQ(read_file((dir / "a").string()), "new");
  EXPECT_EQ(entries(), 1);
}

TEST_F(AtomicFile, RefusesASymbolicLinkAndLeavesItsTargetAlone) {
  write_file_atomic((dir / "target").string(), "keep");
  fs::create_symlink(dir / "target", dir / "link");
  EXPECT_EQ(error_of(dir / "link"), "refusing to write '" + (dir / "link").string() +
                                        "': it is a symbolic link, and only a regular file is replaced");
  EXPECT_TRUE(fs::is_symlink(dir / "link"));
  EXPECT_EQ(read_file((dir / "target").string()), "keep");
  EXPECT_THROW(open_for_append((dir / "link").string(), false), IoError);
  EXPECT_EQ(read_file((dir / "target").string()), "keep");
  EXPECT_EQ(entries(), 2);  // no temporary left
}

TEST_F(AtomicFile, RefusesAFifoADeviceAndADirectory) {
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(error_of(dir / "fifo"),
            "refusing to write '" + (dir / "fifo").string() + "': it is a FIFO, and only a regular file is replaced");
  EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
  EXPECT_EQ(error_of("/dev/null"),
            "refusing to write '/dev/null': it is a device, and only a regular file is replaced");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  fs::create_directories(dir / "sub");
  EXPECT_EQ(error_of(dir / "sub"), "refusing to write '" + (dir / "sub").string() +
                                       "': it is a directory, and only a regular file is replaced");
  EXPECT_THROW(open_for_append("/dev/null", true), IoError);
  EXPECT_EQ(entries(), 2);
}

TEST_F(AtomicFile, SaysWhyAFileCannotBeWritten) {
  EXPECT_EQ(error_of(dir / "missing" / "a"), "cannot create a temporary file beside '" +
                                                 (dir / "missing" / "a").string() + "': No such file or directory");
  EXPECT_EQ(
      [&] {
        try {
          open_for_append((dir / "missing" / "log").string(), true);
        } catch (const IoError& e) {
          return std::string(e.what());
        }
        return std::string("no error");
      }(),
      "cannot open '" + (dir / "missing" / "log").string() + "' for writing: No such file or directory");
}

}  // namespace
}  // namespace multihead
