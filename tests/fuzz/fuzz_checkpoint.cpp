// SPDX-License-Identifier: Apache-2.0
// Checkpoint headers with format tags: a safetensors file read whole
// (checksums checked) and by its header alone, then its format checked. The
// two readers must agree on the metadata, and a format taken must carry what
// that format carries and nothing a later one writes, so that no edit of the
// tag sheds a check.
#include <string>

#include "fuzz_target.h"
#include "multihead/io/safetensors.h"
#include "multihead/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  const std::string bytes = fuzz::bytes_of(data, size);
  fuzz::expect_clean([&] {
    const SafetensorsFile f = SafetensorsFile::parse(bytes, "fuzz.safetensors");
    fuzz::require(parse_safetensors_metadata(bytes, "fuzz.safetensors") == f.metadata());
    const int version = check_checkpoint_format(f);
    const auto& m = f.metadata();
    auto has = [&](std::string_view key) { return m.contains(std::string(key)); };
    fuzz::require(version >= 1 && version <= 3);
    fuzz::require(version == 3 || (!has(kChecksumKey) && !has(kCheckpointConfigKey)));
    fuzz::require(version != 1 || (!has(kDataChecksumKey) && !has("distributed.ranks")));
    fuzz::require(version != 2 || has(kDataChecksumKey));
    fuzz::require(version != 3 || (has(kChecksumKey) && !has(kDataChecksumKey)));
    fuzz::require(checkpoint_format_warning(m, f.source()).empty() == (version == 3));
  });
  // The header reader alone, on anything.
  fuzz::expect_clean([&] { (void)parse_safetensors_metadata(bytes, "fuzz.safetensors"); });
  return 0;
}
