// SPDX-License-Identifier: Apache-2.0
// Counting allocator. Every tensor buffer goes through it, so current and
// peak bytes are exact and the CLI and benchmarks can report them. Freed
// blocks of 64 KiB and more are cached for reuse; the counts are of live
// bytes, and the cache is reported apart. The counters are the process's,
// as the heap is; a stretch of work measures its own peak with a PeakMeter.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace multihead {

// 64 bytes: one cache line, and a whole AVX-512 register should a kernel use one.
inline constexpr std::size_t kTensorAlignment = 64;

struct MemoryStats {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;       // since the process started
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

// The most bytes live at once over its lifetime or since its last reset(),
// counting every thread's allocations: what a Trainer's step or a benchmark
// owns to measure its own stretch of work. Any number can run at once, and
// none moves another's peak.
class PeakMeter {
 public:
  PeakMeter();
  ~PeakMeter();
  PeakMeter(const PeakMeter&) = delete;
  PeakMeter& operator=(const PeakMeter&) = delete;
  // The peak starts again from the bytes live now.
  void reset() noexcept;
  std::int64_t peak_bytes() const noexcept { return peak_.load(std::memory_order_relaxed); }

 private:
  friend void raise_meters(std::int64_t now) noexcept;
  std::atomic<std::int64_t> peak_;
};
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
