#include "multihead/core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace multihead {
namespace {

// Process-wide counters. Allocation is rare relative to compute (buffers are
// sized once per shape), so relaxed atomics cost nothing measurable.
std::atomic<std::int64_t> g_current{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<std::int64_t> g_count{0};

void raise_peak(std::int64_t now) noexcept {
  std::int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

}  // namespace

void* tracked_alloc(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  // aligned_alloc needs a size that is a multiple of the alignment.
  std::size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  void* p = std::aligned_alloc(kTensorAlignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::int64_t now = g_current.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed) +
                     static_cast<std::int64_t>(bytes);
  g_count.fetch_add(1, std::memory_order_relaxed);
  raise_peak(now);
  return p;
}

void tracked_free(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  std::free(ptr);
  g_current.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
}

MemoryStats memory_stats() noexcept {
  return {g_current.load(std::memory_order_relaxed), g_peak.load(std::memory_order_relaxed),
          g_count.load(std::memory_order_relaxed)};
}

void reset_peak_memory() noexcept { g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace multihead
