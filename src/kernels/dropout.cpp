#include "multihead/kernels/dropout.h"

#include "multihead/core/rng.h"

namespace multihead {

template <typename T>
void dropout_inplace(T* x, std::int64_t n, std::uint64_t base, const DropoutSpec& spec) {
  const T ks = spec.p < 1.0f ? T(1) / (T(1) - static_cast<T>(spec.p)) : T(0);
  // One Philox block serves four consecutive elements.
  std::uint64_t idx = base;
  std::int64_t j = 0;
  while (j < n) {
    auto block = philox4x32(spec.seed, spec.stream, idx >> 2);
    for (std::uint64_t lane = idx & 3; lane < 4 && j < n; ++lane, ++j, ++idx)
      x[j] *= u32_to_unit_float(block[lane]) >= spec.p ? ks : T(0);
  }
}

template void dropout_inplace<float>(float*, std::int64_t, std::uint64_t, const DropoutSpec&);
template void dropout_inplace<double>(double*, std::int64_t, std::uint64_t, const DropoutSpec&);

}  // namespace multihead
