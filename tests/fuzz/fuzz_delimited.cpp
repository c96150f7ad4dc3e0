// SPDX-License-Identifier: Apache-2.0
// The CSV and TSV loaders: RFC 4180 quoting, header columns, labels, UTF-8.
#include "fuzz_target.h"
#include "multihead/data/text_datasets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  const std::string bytes = fuzz::bytes_of(data, size);
  for (char delimiter : {',', '\t'})
    fuzz::expect_clean([&] { (void)parse_delimited_dataset(bytes, delimiter, "text", "label", "fuzz"); });
  return 0;
}
