// SPDX-License-Identifier: Apache-2.0
// safetensors reader and writer (the format of Hugging Face's safetensors
// library, which PyTorch users save state_dicts in):
//   8-byte little-endian header length N, N bytes of JSON header, raw data.
//
// Reading validates everything the format promises: a header of at most
// 100 MB that is a JSON object, known dtypes, shape x dtype size equal to
// each byte range, offsets in bounds, ranges that neither overlap nor leave
// holes and cover the data exactly, and no duplicate names.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "multihead/core/tensor.h"

namespace multihead {

inline constexpr std::uint64_t kSafetensorsMaxHeader = 100'000'000;
// Every file written carries a CRC-32 in its metadata under kChecksumKey (8
// hex digits): of its header, as nlohmann::json dumps it without that key,
// followed by its data section, so that an edited name, shape or metadata
// value is caught as surely as an edited weight. A file that has one is
// checked when read and refused when it does not match. Files written before
// it carry kDataChecksumKey, the CRC-32 of the data section alone, checked
// the same way; files from elsewhere have neither.
inline constexpr std::string_view kChecksumKey = "crc32";
inline constexpr std::string_view kDataChecksumKey = "data_crc32";

struct SafetensorsEntry {
  std::string dtype;  // as in the file: "F32", "BOOL", "BF16", ...
  Shape shape;
  std::uint64_t begin = 0;  // byte offsets into the data section
  std::uint64_t end = 0;
};

using TensorMap = std::map<std::string, Tensor>;

class SafetensorsFile {
 public:
  // Parses and validates; `source` names the file in error messages.
  static SafetensorsFile parse(std::string bytes, std::string source);
  static SafetensorsFile read(const std::string& path);

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // Raw bytes of one tensor.
  std::string_view bytes(const std::string& name) const;
  // As a Tensor; F32, BOOL and I64 are supported, other dtypes are a clear error.
  Tensor tensor(const std::string& name) const;
  TensorMap all_tensors() const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string bytes_;
  std::size_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsEntry> entries_;
};

// The metadata of the safetensors file at `path`, from its header alone
// (nothing checked but that it parses): a look at a large file's tags
// before reading it whole through SafetensorsFile::read, which checks all.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);
// The same from a file's first bytes (at least its header); `source` names it in errors.
std::map<std::string, std::string> parse_safetensors_metadata(std::string_view bytes, const std::string& source);

// Bytes of a safetensors file holding `tensors` (written in name order).
std::string serialize_safetensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});
// Writes atomically: the file appears whole or not at all.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace multihead
