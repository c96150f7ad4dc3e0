// SPDX-License-Identifier: Apache-2.0
#include "test_paths.h"

namespace multihead::test {

std::filesystem::path golden_dir() { return MULTIHEAD_GOLDEN_DIR; }
std::string cli_path() { return MULTIHEAD_CLI; }

}  // namespace multihead::test
