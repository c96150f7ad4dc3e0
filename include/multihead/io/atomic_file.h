// Whole-file writes that never leave a partial file: write a temporary file
// beside the target, fsync it, rename it over the target, fsync the folder.
#pragma once

#include <string>
#include <string_view>

namespace multihead {

// Throws IoError naming the path on failure; the target is then untouched.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Reads a whole file; throws IoError naming the path.
std::string read_file(const std::string& path);

}  // namespace multihead
