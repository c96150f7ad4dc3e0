// SPDX-License-Identifier: Apache-2.0
// Whole-file writes that never leave a partial file: write a temporary file
// beside the target, fsync it, rename it over the target, fsync the folder.
// The one place the library opens files for writing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace multihead {

// Throws IoError naming the path on failure; the target is then untouched.
// Only a regular file is replaced: a symbolic link, device, FIFO, socket or
// directory at `path` is refused (check_replaceable), never followed.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Throws IoError unless `path` is absent or a regular file.
void check_replaceable(const std::string& path);

// A log file opened for writing (truncated, or appended to), refused as
// write_file_atomic refuses, and never through a symbolic link.
std::FILE* open_for_append(const std::string& path, bool truncate);

// The most a whole-file read takes: every reader holds what it reads in
// memory, and a pipe or FIFO has no size to check beforehand.
inline constexpr std::uint64_t kMaxReadBytes = std::uint64_t{4} << 30;
// Weights files: as large as their model (a checkpoint with its optimizer is
// three times the weights), which they are checked against as they are read.
inline constexpr std::uint64_t kMaxWeightsBytes = ~std::uint64_t{0};
// The longest line a line reader takes (predict's inputs, metrics.jsonl):
// far past any text or record, short of an endless line's memory.
inline constexpr std::uint64_t kMaxLineBytes = std::uint64_t{16} << 20;

// Reads a whole file: a regular file, a pipe or a FIFO (given 10 s for a
// writer to appear); a directory or device (/dev/zero never ends) is
// refused at once, and so is a file past max_bytes (a pipe as it passes it).
// Throws IoError naming the path.
std::string read_file(const std::string& path, std::uint64_t max_bytes = kMaxReadBytes);

// The first `bytes` bytes of a file (fewer when it is shorter), opened as
// read_file opens it.
std::string read_file_prefix(const std::string& path, std::uint64_t bytes);

// The lines of a file ("-": standard input, which may be a terminal but no
// other device), read as read_file reads, without their "\n" or "\r\n":
// line numbers from 1, empty lines included. A line past max_line_bytes, or
// more than max_bytes in all, is an IoError naming the line.
struct NumberedLine {
  std::int64_t number;
  std::string text;
};
std::vector<NumberedLine> read_lines(const std::string& path, std::uint64_t max_line_bytes = kMaxLineBytes,
                                     std::uint64_t max_bytes = kMaxReadBytes);

}  // namespace multihead
