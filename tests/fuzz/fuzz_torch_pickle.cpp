// SPDX-License-Identifier: Apache-2.0
// The torch.save reader (pytorch_model.bin) on arbitrary bytes: the zip, its
// pickle's opcodes, the globals it names, the storages and views it builds.
#include "fuzz_target.h"
#include "multihead/train/torch_pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  fuzz::expect_clean([&] { (void)parse_torch_state_dict(fuzz::bytes_of(data, size), "fuzz.bin"); });
  return 0;
}
