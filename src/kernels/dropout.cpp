#include "multihead/kernels/dropout.h"

#include <algorithm>

#include "multihead/core/rng.h"

namespace multihead {

template <typename T>
void dropout_inplace(T* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec) {
  const T ks = spec.p < 1.0f ? T(1) / (T(1) - static_cast<T>(spec.p)) : T(0);
  // Element i uses lane i % 4 of Philox block i / 4; blocks come 16 at a time.
  constexpr std::uint64_t kSpan = 4 * kPhiloxBatch;
  std::uint32_t bits[kSpan];
  std::uint64_t idx = base;
  const std::uint64_t end = base + static_cast<std::uint64_t>(n);
  while (idx < end) {
    const std::uint64_t first = idx / kSpan * kSpan;  // aligned to a batch of blocks
    philox4x32_batch(spec.seed, spec.stream, first / 4, bits);
    const std::uint64_t stop = std::min(end, first + kSpan);
    for (; idx < stop; ++idx) x[idx - base] *= u32_to_unit_float(bits[idx - first]) >= spec.p ? ks : T(0);
  }
}

template void dropout_inplace<float>(float*, std::int64_t, std::uint64_t, const DropoutSpec&);
template void dropout_inplace<double>(double*, std::int64_t, std::uint64_t, const DropoutSpec&);

}  // namespace multihead
