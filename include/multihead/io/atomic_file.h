// Whole-file writes that never leave a partial file: write a temporary file
// beside the target, fsync it, rename it over the target, fsync the folder.
// The one place the library opens files for writing.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

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

// Reads a whole file; throws IoError naming the path.
std::string read_file(const std::string& path);

}  // namespace multihead
