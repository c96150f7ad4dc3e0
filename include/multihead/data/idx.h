// SPDX-License-Identifier: Apache-2.0
// IDX files (the MNIST format), plain or gzip-compressed: a 4-byte magic
// (0, 0, type, dims), dims big-endian 32-bit sizes, then the data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace multihead {

struct IdxArray {
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;  // unsigned bytes (type 0x08), row-major
};

// Throws IoError naming the file for a bad magic, an unsupported type,
// truncation or trailing bytes.
IdxArray read_idx(const std::string& path);
IdxArray parse_idx(const std::string& bytes, const std::string& source);

}  // namespace multihead
