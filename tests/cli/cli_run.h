// SPDX-License-Identifier: Apache-2.0
// Runs the multihead binary as a user would, for the CLI tests: exit code,
// stdout and stderr; and a fixture with a scratch folder.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_paths.h"
#include "test_util.h"

namespace multihead::test {

namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline CliRun run(const std::string& args) {
  fs::path err_file = fs::temp_directory_path() / ("multihead_cli_err_" + std::to_string(::getpid()));
  std::string cmd = cli_path() + " " + args + " 2>" + err_file.string();
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = ::pclose(p);
  std::ifstream ef(err_file);
  std::string err((std::istreambuf_iterator<char>(ef)), std::istreambuf_iterator<char>());
  fs::remove(err_file);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, err};
}

// IDX bytes: unsigned bytes of the given shape, all `value`.
inline std::string idx(const std::vector<std::uint32_t>& shape, std::uint8_t value) {
  std::string b = {0, 0, 0x08, static_cast<char>(shape.size())};
  std::size_t n = 1;
  for (std::uint32_t d : shape) {
    for (int s = 24; s >= 0; s -= 8) b += static_cast<char>((d >> s) & 0xff);
    n *= d;
  }
  return b + std::string(n, static_cast<char>(value));
}

// A tiny two-class CSV (text,label: pos and neg), `rows` examples of each.
inline void write_sentiment_csv(const fs::path& path, int rows) {
  std::ofstream f(path);
  f << "text,label\n";
  const char* pos[] = {"good great fine", "great good day", "fine good nice", "nice great good"};
  const char* neg[] = {"bad awful poor", "poor bad day", "awful poor bad", "bad poor nasty"};
  for (int r = 0; r < rows; ++r) f << pos[r % 4] << ",pos\n" << neg[r % 4] << ",neg\n";
}

inline int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

class Cli : public ScratchFolder {
 protected:
  Cli() : ScratchFolder("cli", true) {}
};

}  // namespace multihead::test
