// SPDX-License-Identifier: Apache-2.0
// Resident memory of this process, from /proc (Linux). Benchmarks use it to
// measure any program's peak the same way, ours and PyTorch's alike.
#pragma once

#include <cstdint>

namespace multihead {

std::int64_t current_rss_bytes();  // VmRSS; -1 if unavailable
std::int64_t peak_rss_bytes();     // VmHWM; -1 if unavailable
// Resets VmHWM to the current RSS (writes 5 to /proc/self/clear_refs).
// Returns false where the kernel does not allow it.
bool reset_peak_rss();

}  // namespace multihead
