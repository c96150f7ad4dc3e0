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

// Sets the thread count for OpenMP regions and for BLAS; 0 means all cores.
// Checks n (check_threads). The entry points call it, once, before they call
// the library (each CLI command, the Python module). OpenMP's count is the
// calling thread's own (a thread started later begins with all cores): the
// library calls this only to carry the count to a thread it starts (the
// server's model thread).
void set_num_threads(int n);
int num_threads();

// For its lifetime the calling thread's OpenMP regions and BLAS calls run on
// n threads (0: all cores); the thread's OpenMP count and OpenBLAS's are
// restored after. What an entry point inside a host process uses (the
// Python module), so that the host's own settings survive the call.
class ThreadCountScope {
 public:
  explicit ThreadCountScope(int n);
  ~ThreadCountScope();
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;

 private:
  int saved_omp_, saved_blas_;
};

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
