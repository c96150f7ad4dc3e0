// SPDX-License-Identifier: Apache-2.0
#include "multihead/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "multihead/io/atomic_file.h"
#include "multihead/io/json_keys.h"

namespace multihead {
namespace {

using json = nlohmann::json;

// Element sizes of every dtype the format defines.
std::uint64_t st_dtype_size(const std::string& dt) {
  static const std::map<std::string, std::uint64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};
  auto it = kSizes.find(dt);
  return it == kSizes.end() ? 0 : it->second;
}

std::string_view st_dtype_of(DType dt) { return dtype_name(dt); }  // our names match the format's

std::uint64_t read_u64_le(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::uint64_t json_uint(const json& v, const std::string& what, const std::string& src) {
  check<IoError>(v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0),
                 "{}: {} must be a non-negative integer", src, what);
  return v.get<std::uint64_t>();
}

// The CRC-32 of a header's canonical text (without the checksum), continued over `size` data bytes.
std::uint32_t header_and_data_crc(const std::string& header, const Bytef* data, std::uint64_t size) {
  std::uint32_t crc = crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(header.data()), header.size());
  return size > 0 ? crc32_z(crc, data, size) : crc;
}

// The header length a safetensors file starts with, checked against the limit.
std::uint64_t header_length(std::string_view bytes, const std::string& source) {
  check<IoError>(bytes.size() >= 8, "{}: not a safetensors file (only {} bytes)", source, bytes.size());
  const std::uint64_t n = read_u64_le(bytes.data());
  check<IoError>(n <= kSafetensorsMaxHeader, "{}: header length {} exceeds the 100 MB limit", source, n);
  return n;
}

}  // namespace

SafetensorsFile SafetensorsFile::parse(std::string bytes, std::string source) {
  SafetensorsFile f;
  f.source_ = std::move(source);
  const std::string& src = f.source_;
  const std::uint64_t n = header_length(bytes, src);
  check<IoError>(n <= bytes.size() - 8, "{}: header length {} runs past the end of the file ({} bytes)", src, n,
                 bytes.size());
  std::string_view header(bytes.data() + 8, static_cast<std::size_t>(n));
  check<IoError>(!header.empty() && header.front() == '{', "{}: header is not a JSON object", src);

  // nlohmann keeps the last of duplicate keys silently: a first SAX pass
  // finds them (its callback parser rescans the object after every entry,
  // quadratic in the number of tensors).
  const std::optional<DuplicateKey> duplicate = first_duplicate_key(header);
  json h;
  try {
    h = json::parse(header.begin(), header.end());
  } catch (const json::exception& e) {
    throw IoError(fmt::format("{}: header is not valid JSON ({})", src, e.what()));
  }
  if (duplicate && duplicate->depth == 1)
    throw IoError(fmt::format("{}: duplicate tensor name '{}' in header", src, duplicate->key));
  check<IoError>(!duplicate, "{}: duplicate key '{}' in header", src, duplicate ? duplicate->path : "");
  check<IoError>(h.is_object(), "{}: header is not a JSON object", src);

  const std::uint64_t data_size = bytes.size() - 8 - n;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      check<IoError>(v.is_object(), "{}: __metadata__ must be an object of strings", src);
      for (auto m = v.begin(); m != v.end(); ++m) {
        check<IoError>(m.value().is_string(), "{}: __metadata__ value of '{}' is not a string", src, m.key());
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    check<IoError>(v.is_object(), "{}: entry '{}' is not an object", src, name);
    for (auto k = v.begin(); k != v.end(); ++k)
      check<IoError>(k.key() == "dtype" || k.key() == "shape" || k.key() == "data_offsets",
                     "{}: entry '{}' has unknown field '{}'", src, clip_text(name), clip_text(k.key()));
    check<IoError>(v.contains("dtype") && v["dtype"].is_string(), "{}: entry '{}' lacks a string dtype", src, name);
    check<IoError>(v.contains("shape") && v["shape"].is_array(), "{}: entry '{}' lacks a shape array", src, name);
    check<IoError>(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
                   "{}: entry '{}' needs data_offsets [begin, end]", src, name);
    SafetensorsEntry e;
    e.dtype = v["dtype"].get<std::string>();
    const std::uint64_t esize = st_dtype_size(e.dtype);
    check<IoError>(esize != 0, "{}: entry '{}' has unknown dtype '{}'", src, name, e.dtype);
    std::vector<std::uint64_t> dims;
    for (const json& d : v["shape"]) dims.push_back(json_uint(d, "shape of '" + name + "'", src));
    // A shape with a zero has no elements whatever its other sizes; any
    // other product must fit the data section (which also rules out overflow).
    const bool no_elements = std::find(dims.begin(), dims.end(), 0) != dims.end();
    std::uint64_t numel = no_elements ? 0 : 1;
    for (std::uint64_t dim : dims) {
      check<IoError>(dim <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) &&
                         (no_elements || numel <= data_size / dim),
                     "{}: shape of '{}' does not fit the file", src, name);
      if (!no_elements) numel *= dim;
      e.shape.push_back(static_cast<std::int64_t>(dim));
    }
    e.begin = json_uint(v["data_offsets"][0], "data_offsets of '" + name + "'", src);
    e.end = json_uint(v["data_offsets"][1], "data_offsets of '" + name + "'", src);
    check<IoError>(e.begin <= e.end && e.end <= data_size,
                   "{}: data_offsets [{}, {}] of '{}' are out of bounds (data section is {} bytes)", src, e.begin,
                   e.end, name, data_size);
    check<IoError>(e.end - e.begin == numel * esize, "{}: '{}' has {} bytes but shape {} of {} needs {}", src, name,
                   e.end - e.begin, shape_text(e.shape), e.dtype, numel * esize);
    f.entries_.emplace(name, std::move(e));
  }

  // The byte ranges must tile [0, data_size) exactly.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, e] : f.entries_) ranges.emplace_back(e.begin, e.end);
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t pos = 0;
  for (const auto& [b, e] : ranges) {
    check<IoError>(b >= pos, "{}: tensor byte ranges overlap at offset {}", src, b);
    check<IoError>(b == pos, "{}: hole in the data section at offset {}", src, pos);
    pos = e;
  }
  check<IoError>(pos == data_size, "{}: {} trailing bytes after the last tensor", src, data_size - pos);
  const auto* data = reinterpret_cast<const Bytef*>(bytes.data() + 8 + n);
  if (const auto it = f.metadata_.find(std::string(kChecksumKey)); it != f.metadata_.end()) {
    h["__metadata__"].erase(std::string(kChecksumKey));
    const std::string crc = fmt::format("{:08x}", header_and_data_crc(h.dump(), data, data_size));
    check<IoError>(crc == it->second,
                   "{}: the header and data do not match their checksum ({} recorded, {} computed): the file is "
                   "corrupt or was edited",
                   src, it->second, crc);
  } else if (const auto dit = f.metadata_.find(std::string(kDataChecksumKey)); dit != f.metadata_.end()) {
    const std::string crc = fmt::format("{:08x}", data_size > 0 ? crc32_z(crc32_z(0, nullptr, 0), data, data_size) : 0);
    check<IoError>(crc == dit->second,
                   "{}: the data does not match its checksum ({} recorded, {} computed): the file is corrupt", src,
                   dit->second, crc);
  }

  f.data_start_ = static_cast<std::size_t>(8 + n);
  f.bytes_ = std::move(bytes);
  return f;
}

std::map<std::string, std::string> parse_safetensors_metadata(std::string_view bytes, const std::string& source) {
  const std::uint64_t n = header_length(bytes, source);
  check<IoError>(bytes.size() >= 8 + n, "{}: the file ends inside its header", source);
  const json h = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), nullptr, false);
  check<IoError>(h.is_object(), "{}: header is not a JSON object", source);
  std::map<std::string, std::string> meta;
  if (const auto it = h.find("__metadata__"); it != h.end() && it->is_object())
    for (auto m = it->begin(); m != it->end(); ++m)
      if (m.value().is_string()) meta[m.key()] = m.value().get<std::string>();
  return meta;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  const std::uint64_t n = header_length(read_file_prefix(path, 8), path);
  return parse_safetensors_metadata(read_file_prefix(path, 8 + n), path);
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  return parse(read_file(path, kMaxWeightsBytes), path);
}

std::string_view SafetensorsFile::bytes(const std::string& name) const {
  auto it = entries_.find(name);
  check<IoError>(it != entries_.end(), "{}: no tensor named '{}'", source_, name);
  return std::string_view(bytes_).substr(data_start_ + it->second.begin, it->second.end - it->second.begin);
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  std::string_view raw = bytes(name);
  const SafetensorsEntry& e = entries_.at(name);
  DType dt;
  if (e.dtype == "F32") dt = DType::kF32;
  else if (e.dtype == "BOOL") dt = DType::kBool;
  else if (e.dtype == "I64") dt = DType::kI64;
  else throw IoError(fmt::format("{}: tensor '{}' has dtype {}; expected F32, BOOL or I64", source_, name, e.dtype));
  Tensor t(e.shape, dt);
  if (!raw.empty()) std::memcpy(t.raw(), raw.data(), raw.size());
  if (dt == DType::kBool) {
    auto* p = t.data<std::uint8_t>();
    for (std::int64_t i = 0; i < t.numel(); ++i)
      check<IoError>(p[i] <= 1, "{}: BOOL tensor '{}' holds byte value {}", source_, name, static_cast<int>(p[i]));
  }
  return t;
}

TensorMap SafetensorsFile::all_tensors() const {
  TensorMap m;
  for (const auto& [name, e] : entries_) m.emplace(name, tensor(name));
  return m;
}

std::string serialize_safetensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, const Tensor*>> sorted(tensors);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  json h = json::object();
  std::map<std::string, std::string> meta = metadata;
  meta.erase(std::string(kChecksumKey));
  meta.erase(std::string(kDataChecksumKey));
  h["__metadata__"] = meta;
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const auto& [name, t] = sorted[i];
    check(name != "__metadata__", "'__metadata__' cannot name a tensor");
    check(i == 0 || sorted[i - 1].first != name, "duplicate tensor name '{}'", name);
    h[name] = {{"dtype", st_dtype_of(t->dtype())}, {"shape", t->shape()}, {"data_offsets", {off, off + t->nbytes()}}};
    off += t->nbytes();
  }
  std::string header;
  try {
    // The checksum covers the header without itself, then the data.
    std::uint32_t crc = header_and_data_crc(h.dump(), nullptr, 0);
    // (zlib restarts the CRC on a null buffer: empty tensors are left out.)
    for (const auto& [name, t] : sorted)
      if (t->nbytes() > 0) crc = crc32_z(crc, static_cast<const Bytef*>(t->raw()), t->nbytes());
    h["__metadata__"][std::string(kChecksumKey)] = fmt::format("{:08x}", crc);
    header = h.dump();
  } catch (const json::exception&) {  // JSON holds UTF-8 text only
    throw ConfigError("cannot write safetensors: tensor names and metadata must be valid UTF-8");
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the
  // reference implementation does.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out.reserve(out.size() + off);
  for (const auto& [name, t] : sorted) out.append(static_cast<const char*>(t->raw()), t->nbytes());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, const Tensor*>> v;
  for (const auto& [name, t] : tensors) v.emplace_back(name, &t);
  write_safetensors(path, v, metadata);
}

}  // namespace multihead
