// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/process_memory.h"

#include <fstream>
#include <string>

namespace multihead {
namespace {

std::int64_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string name;
  while (f >> name) {
    if (name == key) {
      std::int64_t kb = -1;
      f >> kb;
      return kb < 0 ? -1 : kb * 1024;
    }
    f.ignore(1 << 20, '\n');
  }
  return -1;
}

}  // namespace

std::int64_t current_rss_bytes() { return status_kb("VmRSS:"); }
std::int64_t peak_rss_bytes() { return status_kb("VmHWM:"); }

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return f.good();
}

}  // namespace multihead
