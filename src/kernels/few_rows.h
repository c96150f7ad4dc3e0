// Products of few rows by many columns (a decoding step: one row per
// sequence) shared out by columns between the threads. Internal header of the
// GEMM backends.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

namespace multihead {

// Rows at most, and columns at least per thread, of a product shared out so.
inline constexpr std::int64_t kFewRows = 128;
inline constexpr std::int64_t kMinColumnsPerThread = 64;

// oneDNN runs a product of few rows on one thread. Where (M, N) is such a
// product and threads are free, calls part(c0, n) on each thread for its
// share of the columns [0, N) (whole groups of 16 but the last), each call
// inside the parallel region, where oneDNN stays on its thread; else
// part(0, N) once. Returns false without calling part where it does not
// share (the caller makes the one call); an exception in a share is
// rethrown after the region.
template <typename Part>
bool for_column_shares(std::int64_t M, std::int64_t N, Part&& part) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads < 2 || M > kFewRows || N < kMinColumnsPerThread * threads) return false;
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    const std::int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    const std::int64_t share = (N / n + 15) / 16 * 16;
    const std::int64_t c0 = std::min(N, t * share), c1 = t + 1 == n ? N : std::min(N, c0 + share);
    try {
      if (c1 > c0) part(c0, c1 - c0);
    } catch (...) {
#pragma omp critical(multihead_column_shares)
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return true;
}

}  // namespace multihead
