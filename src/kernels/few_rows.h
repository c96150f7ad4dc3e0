// SPDX-License-Identifier: Apache-2.0
// Products shared out between the threads: by rows (tall ones, OpenBLAS) or
// by columns (few rows by many columns, oneDNN: a decoding step, one row per
// sequence). Internal header of the GEMM backends.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

namespace multihead {

// Thread t's share [begin, end) of `total` rows or columns split between n
// threads: whole groups of 16, the last share taking the rest (possibly empty
// where total is small).
struct Share {
  std::int64_t begin, end;
};
inline Share share_of(std::int64_t total, std::int64_t t, std::int64_t n) {
  const std::int64_t share = (total / n + 15) / 16 * 16;
  const std::int64_t begin = std::min(total, t * share);
  return {begin, t + 1 == n ? total : std::min(total, begin + share)};
}

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
    const Share s = share_of(N, omp_get_thread_num(), omp_get_num_threads());
    try {
      if (s.end > s.begin) part(s.begin, s.end - s.begin);
    } catch (...) {
#pragma omp critical(multihead_column_shares)
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return true;
}

}  // namespace multihead
