// SPDX-License-Identifier: Apache-2.0
// What every fuzz target shares. A target defines LLVMFuzzerTestOneInput;
// libFuzzer drives it (-DMULTIHEAD_FUZZ=ON, clang), and replay_main.cpp
// replays the committed corpus through it in the ordinary test suite.
// multihead's own errors are the expected answer to bad input; anything
// else escaping (another exception, a crash, a sanitizer report) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "multihead/core/error.h"

namespace multihead::fuzz {

inline std::string bytes_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// An invariant of the target: a finding (as a crash is) when it does not hold.
inline void require(bool held) {
  if (!held) __builtin_trap();
}

// Runs f, accepting the library's typed errors.
template <typename F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

}  // namespace multihead::fuzz
