// SPDX-License-Identifier: Apache-2.0
#include "multihead/data/idx.h"

#include <zlib.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"

namespace multihead {
namespace {

// The whole of a gzip stream.
std::string gunzip(const std::string& bytes, const std::string& source) {
  z_stream zs{};
  check<IoError>(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "{}: cannot start gzip decoding", source);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
    // Output larger than any IDX file we read means a hostile stream.
    if (out.size() > (std::size_t{1} << 31)) rc = Z_MEM_ERROR;
  }
  inflateEnd(&zs);
  check<IoError>(rc == Z_STREAM_END, "{}: corrupt or truncated gzip data", source);
  return out;
}

}  // namespace

IdxArray parse_idx(const std::string& raw, const std::string& source) {
  const bool gz =
      raw.size() >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f && static_cast<unsigned char>(raw[1]) == 0x8b;
  const std::string bytes = gz ? gunzip(raw, source) : raw;
  check<IoError>(bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0, "{}: not an IDX file (bad magic)", source);
  const unsigned char type = static_cast<unsigned char>(bytes[2]);
  const int dims = static_cast<unsigned char>(bytes[3]);
  check<IoError>(type == 0x08, "{}: IDX element type 0x{:02x} is not supported (only unsigned bytes, 0x08)", source,
                 type);
  check<IoError>(dims >= 1 && dims <= 4, "{}: IDX with {} dimensions is not supported", source, dims);
  check<IoError>(bytes.size() >= 4 + 4 * static_cast<std::size_t>(dims), "{}: truncated IDX header", source);
  IdxArray a;
  std::uint64_t n = 1;
  for (int i = 0; i < dims; ++i) {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v = (v << 8) | static_cast<unsigned char>(bytes[4 + 4 * i + k]);
    a.shape.push_back(v);
    n *= v;
    check<IoError>(n <= bytes.size(), "{}: IDX dimensions exceed the file", source);
  }
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(dims);
  check<IoError>(bytes.size() - header == n, "{}: IDX data is {} bytes, the header says {}", source,
                 bytes.size() - header, n);
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

IdxArray read_idx(const std::string& path) { return parse_idx(read_file(path), path); }

}  // namespace multihead
