#include "multihead/kernels/dropout.h"

#include <algorithm>

#include "multihead/core/rng.h"

namespace multihead {

namespace {

// Elements [lo, hi) of x, whose element j has index base + j in the stream.
template <typename T>
void dropout_range(T* x, std::int64_t lo, std::int64_t hi, std::uint64_t base, const DropoutSpec& spec, T ks) {
  // Element i uses lane i % 4 of Philox block i / 4; blocks come 16 at a time.
  constexpr std::uint64_t kSpan = 4 * kPhiloxBatch;
  std::uint32_t bits[kSpan];
  std::uint64_t idx = base + static_cast<std::uint64_t>(lo);
  const std::uint64_t end = base + static_cast<std::uint64_t>(hi);
  while (idx < end) {
    const std::uint64_t first = idx / kSpan * kSpan;  // aligned to a batch of blocks
    philox4x32_batch(spec.seed, spec.stream, first / 4, bits);
    const std::uint64_t stop = std::min(end, first + kSpan);
    for (; idx < stop; ++idx) x[idx - base] *= u32_to_unit_float(bits[idx - first]) >= spec.p ? ks : T(0);
  }
}

}  // namespace

template <typename T>
void dropout_inplace(T* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec) {
  const T ks = spec.p < 1.0f ? T(1) / (T(1) - static_cast<T>(spec.p)) : T(0);
  // Short spans (attention dropout, a row at a time inside the kernels'
  // parallel regions) run here: even a parallel construct whose if clause
  // is false costs a team setup, and there are millions of rows per step.
  constexpr std::int64_t kChunk = std::int64_t{1} << 14;
  if (n < 4 * kChunk) return dropout_range(x, 0, n, base, spec, ks);
  // The mask is a function of each element's index alone, so any split of
  // the elements between threads gives the same result.
#pragma omp parallel for schedule(static)
  for (std::int64_t lo = 0; lo < n; lo += kChunk) dropout_range(x, lo, std::min(n, lo + kChunk), base, spec, ks);
}

template void dropout_inplace<float>(float*, std::int64_t, std::uint64_t, const DropoutSpec&);
template void dropout_inplace<double>(double*, std::int64_t, std::uint64_t, const DropoutSpec&);

}  // namespace multihead
