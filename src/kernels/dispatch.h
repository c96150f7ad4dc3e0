// SPDX-License-Identifier: Apache-2.0
// Run-time dispatch of the Highway kernels. Each kernel file is compiled once
// per target (hwy/foreach_target.h; AVX2 and AVX-512 in the default build,
// only the build machine's in a -DMULTIHEAD_NATIVE=ON build) and exports its
// entry points with HWY_EXPORT; callers go through MULTIHEAD_DISPATCH, which
// is HWY_DYNAMIC_DISPATCH after the targets were capped once at oneDNN's ISA
// ceiling, so that ONEDNN_MAX_CPU_ISA=AVX2 runs every kernel of the library,
// ours and oneDNN's, at AVX2 (the tests pin lower targets that way).
// Internal header of src/kernels.
#pragma once

#include <hwy/highway.h>

#include <type_traits>

#include "multihead/kernels/half.h"

namespace multihead {

// Disables the Highway targets above oneDNN's effective ISA (machine.cpp).
void cap_kernel_targets();

inline bool kernel_targets_capped() {
  static const bool done = (cap_kernel_targets(), true);
  return done;
}

// Of a kernel's three exports, one for each storage type (HWY_EXPORT takes
// no templates), the one for T: float, BF16 or F16.
template <typename T, typename F32, typename B16, typename H16>
auto for_element_type(F32 f32, B16 bf16, H16 f16) {
  if constexpr (std::is_same_v<T, float>) return f32;
  else if constexpr (std::is_same_v<T, BF16>) return bf16;
  else return f16;
}

}  // namespace multihead

#define MULTIHEAD_DISPATCH(FUNC_NAME) (::multihead::kernel_targets_capped(), HWY_DYNAMIC_DISPATCH(FUNC_NAME))
