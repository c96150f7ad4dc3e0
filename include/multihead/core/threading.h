// SPDX-License-Identifier: Apache-2.0
// One owner for the cores. Our kernels parallelise with OpenMP, and BLAS calls
// made inside those regions run single-threaded (OpenBLAS's OpenMP build and
// oneDNN both check omp_in_parallel); BLAS calls outside them use the same
// count (oneDNN reads it from OpenMP at each call).
#pragma once

#include <cstdint>

namespace multihead {

// The most threads a setting may ask for.
inline constexpr int kMaxThreads = 1024;

// ConfigError unless 0 <= n <= kMaxThreads (0: all cores): the one check of
// every thread setting, from flags or JSON.
void check_threads(std::int64_t n);

// Sets the calling thread's OpenMP count and OpenBLAS's to n (0: all
// cores), after checking n (check_threads). What a ContextScope applies
// (core/context.h): the library calls it nowhere else, and an entry point
// binds a context rather than calling it. Exported to Python for the host's
// own choice (as torch.set_num_threads).
void set_num_threads(int n);
int num_threads();

// For its lifetime the calling thread's OpenMP regions, and the oneDNN calls
// it makes, run on that thread alone; its count is restored after (a product
// too small to share, where handing it out costs more than it saves).
class OnThisThreadOnly {
 public:
  OnThisThreadOnly();
  ~OnThisThreadOnly();
  OnThisThreadOnly(const OnThisThreadOnly&) = delete;
  OnThisThreadOnly& operator=(const OnThisThreadOnly&) = delete;

 private:
  int saved_;
};

}  // namespace multihead
