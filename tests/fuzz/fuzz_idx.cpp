// SPDX-License-Identifier: Apache-2.0
// The IDX reader (MNIST format), plain or gzip-compressed, on arbitrary bytes.
#include "fuzz_target.h"
#include "multihead/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  multihead::fuzz::expect_clean([&] { (void)multihead::parse_idx(multihead::fuzz::bytes_of(data, size), "fuzz.idx"); });
  return 0;
}
