// SPDX-License-Identifier: Apache-2.0
// Headers of many entries, names drawn from the input two bytes each (so
// repeats are common): the parse takes linear time, and refuses exactly the
// headers that repeat a name, naming the first repeat in file order.
#include <set>

#include <fmt/format.h>

#include "fuzz_target.h"
#include "multihead/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  std::string header = "{";
  std::set<std::string> names;
  std::string first_repeat;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i + 1 < size; i += 2) {
    const std::string name = fmt::format("t{}", data[i] * 256 + data[i + 1]);
    if (!names.insert(name).second && first_repeat.empty()) first_repeat = name;
    // Every eighth entry holds a byte, so the offsets are checked too.
    const std::uint64_t n = data[i + 1] % 8 == 0 ? 1 : 0;
    header += fmt::format(R"({}"{}":{{"dtype":"U8","shape":[{}],"data_offsets":[{},{}]}})", i ? "," : "", name, n,
                          offset, offset + n);
    offset += n;
  }
  header += "}";
  std::string bytes(8, '\0');
  for (int b = 0; b < 8; ++b) bytes[static_cast<std::size_t>(b)] = static_cast<char>((header.size() >> (8 * b)) & 0xff);
  bytes += header + std::string(offset, 'x');
  std::string error;
  try {
    const SafetensorsFile f = SafetensorsFile::parse(bytes, "many");
    if (!first_repeat.empty() || f.entries().size() != names.size()) __builtin_trap();
  } catch (const IoError& e) {
    error = e.what();
  }
  // A repeated name may also make the byte ranges overlap; only the name
  // check runs first.
  if (!first_repeat.empty() && error != fmt::format("many: duplicate tensor name '{}' in header", first_repeat))
    __builtin_trap();
  if (first_repeat.empty() && !error.empty()) __builtin_trap();
  return 0;
}
