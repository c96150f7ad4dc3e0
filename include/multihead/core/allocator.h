// SPDX-License-Identifier: Apache-2.0
// Counting allocator. Every tensor buffer goes through it, so current and
// peak bytes are exact and the CLI and benchmarks can report them. Freed
// blocks of 64 KiB and more are cached for reuse; the counts are of live
// bytes, and the cache is reported apart.
#pragma once

#include <cstddef>
#include <cstdint>

namespace multihead {

// 64 bytes: one cache line, and a whole AVX-512 register should a kernel use one.
inline constexpr std::size_t kTensorAlignment = 64;

struct MemoryStats {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t num_allocations = 0;  // lifetime count
  std::int64_t cached_bytes = 0;     // freed, held for reuse, not counted in current
};

// Aligned allocation of `bytes` (0 is allowed and returns nullptr). Throws
// MemoryError when the system refuses.
void* tracked_alloc(std::size_t bytes);
// Larger requests are refused without asking the system (and their sizes
// cannot overflow in rounding).
inline constexpr std::size_t kMaxAllocationBytes = std::size_t{1} << 48;
void tracked_free(void* ptr, std::size_t bytes) noexcept;

MemoryStats memory_stats() noexcept;
// Sets the peak to the current value, so the next peak measures one region.
void reset_peak_memory() noexcept;
// Returns the cached blocks to the system.
void release_cached_memory() noexcept;

// Has glibc's malloc keep freed memory for reuse, for the whole process: no
// unmapping of blocks below 32 MiB, no trimming of the heaps. Libraries that
// allocate their own buffers on every call (oneDNN's sgemm packs its
// operands into malloc'd buffers) then stop taking page faults to get the
// same memory back each time. For programs (the CLI calls it first thing),
// not for a library embedded in someone else's process. Returns whether
// malloc accepted both settings.
bool keep_freed_heap_memory() noexcept;

}  // namespace multihead
