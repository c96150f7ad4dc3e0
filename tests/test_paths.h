// SPDX-License-Identifier: Apache-2.0
// Where this build keeps what the tests read: the golden fixtures in the
// source tree and the multihead binary in the build tree. The paths are
// compiled into test_paths.cpp alone, so the other test files' objects do not
// depend on where the checkout lies (and ccache serves them to any checkout).
#pragma once

#include <filesystem>
#include <string>

namespace multihead::test {

std::filesystem::path golden_dir();  // tests/golden
std::string cli_path();              // the multihead binary under test

}  // namespace multihead::test
