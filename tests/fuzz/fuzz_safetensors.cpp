// SPDX-License-Identifier: Apache-2.0
// The safetensors reader on arbitrary bytes: header length, JSON header,
// dtypes, shapes and offsets all come from the input.
#include "fuzz_target.h"
#include "multihead/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  fuzz::expect_clean([&] {
    const SafetensorsFile f = SafetensorsFile::parse(fuzz::bytes_of(data, size), "fuzz.safetensors");
    for (const auto& [name, entry] : f.entries()) (void)f.tensor(name);
  });
  return 0;
}
