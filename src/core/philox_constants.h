// SPDX-License-Identifier: Apache-2.0
// The Philox4x32-10 constants (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", as in Random123), shared by the scalar generator and the
// vector batch of rng.cpp, which is compiled once per Highway target.
// Internal header of src/core.
#pragma once

#include <cstdint>

namespace multihead::philox {

inline constexpr std::uint32_t kMul0 = 0xD2511F53u;
inline constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;
inline constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;
inline constexpr int kRounds = 10;

}  // namespace multihead::philox
