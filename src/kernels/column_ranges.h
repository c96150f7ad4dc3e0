// SPDX-License-Identifier: Apache-2.0
// Passes that sum the columns of a row-major matrix (bias and LayerNorm
// parameter gradients) while they go over it. Internal header.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace multihead {

// Calls f(c0, w) once per thread with its own contiguous range of the
// columns [0, cols) (whole groups of 16 but the last), in parallel when the
// (rows, cols) matrix is large. f walks all rows in order over its range, so
// each column's sum runs in row order: the same bits on any thread count.
// Each thread reads long stretches of every row, which the hardware
// prefetchers follow; narrow column blocks walked down the rows start a new
// page in nearly every row and wait on memory.
template <typename F>
void for_column_ranges(std::int64_t rows, std::int64_t cols, F&& f) {
  constexpr std::int64_t kGroup = 16;
  const std::int64_t groups = (cols + kGroup - 1) / kGroup;
#pragma omp parallel if (rows * cols >= (std::int64_t{1} << 16) && groups > 1)
  {
    const std::int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t c0 = std::min(cols, groups * t / nt * kGroup);
    const std::int64_t c1 = std::min(cols, groups * (t + 1) / nt * kGroup);
    if (c1 > c0) f(c0, c1 - c0);
  }
}

}  // namespace multihead
