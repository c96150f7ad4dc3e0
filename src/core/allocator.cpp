// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/allocator.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "multihead/core/error.h"

namespace multihead {
namespace {

// The heap's counters: process-wide, as the heap is. Allocation is rare
// relative to compute (buffers are sized once per shape), so relaxed atomics
// cost nothing measurable.
std::atomic<std::int64_t> g_current{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<std::int64_t> g_count{0};
// The meters measuring now; an allocation raises each one's peak.
std::mutex g_meters_mutex;
std::vector<PeakMeter*>* g_meters = new std::vector<PeakMeter*>();  // never destroyed, as g_cache
std::atomic<int> g_meter_count{0};

// Freed large blocks are kept for reuse. Without this, every training step or
// benchmark iteration would return its activation buffers to the kernel and
// take page faults (about 12 000 per step of an 8 x 512 x 512 layer) to get
// them back. A request takes the smallest cached block that holds it and is
// at most twice its size (sizes rounded to whole pages): training and
// evaluation batches of other lengths then share blocks instead of each
// keeping their own.
constexpr std::size_t kCacheMinBytes = 1 << 16;
constexpr std::size_t kPage = 4096;
std::mutex g_cache_mutex;
std::multimap<std::size_t, void*>* g_cache = new std::multimap<std::size_t, void*>();  // never destroyed: frees may
                                                                                       // run during static teardown
std::int64_t g_cached_bytes = 0;
// Capacity of each large block in use, which can exceed what was asked for:
// a freed block goes back to the cache under its capacity.
std::unordered_map<void*, std::size_t>* g_capacity = new std::unordered_map<void*, std::size_t>();

std::size_t rounded_size(std::size_t bytes) {
  if (bytes >= kCacheMinBytes) return (bytes + kPage - 1) / kPage * kPage;
  return (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

void raise_to(std::atomic<std::int64_t>& peak, std::int64_t now) noexcept {
  std::int64_t was = peak.load(std::memory_order_relaxed);
  while (now > was && !peak.compare_exchange_weak(was, now, std::memory_order_relaxed)) {
  }
}

[[noreturn]] void throw_out_of_memory(std::size_t bytes) {
  throw MemoryError(fmt::format("cannot allocate {} bytes ({:.1f} GiB): out of memory", bytes,
                                static_cast<double>(bytes) / (1ull << 30)));
}

}  // namespace

void raise_meters(std::int64_t now) noexcept {
  std::lock_guard<std::mutex> lock(g_meters_mutex);
  for (PeakMeter* m : *g_meters) raise_to(m->peak_, now);
}

void* tracked_alloc(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes > kMaxAllocationBytes) throw_out_of_memory(bytes);
  // aligned_alloc needs a size that is a multiple of the alignment.
  const std::size_t rounded = rounded_size(bytes);
  void* p = nullptr;
  if (rounded >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    std::size_t capacity = rounded;
    auto it = g_cache->lower_bound(rounded);
    if (it != g_cache->end() && it->first / 2 <= rounded) {
      p = it->second;
      capacity = it->first;
      g_cache->erase(it);
      g_cached_bytes -= static_cast<std::int64_t>(capacity);
    } else {
      p = std::aligned_alloc(kTensorAlignment, rounded);
      if (p == nullptr) throw_out_of_memory(rounded);
    }
    try {
      (*g_capacity)[p] = capacity;
    } catch (...) {
      std::free(p);
      throw;
    }
  } else {
    p = std::aligned_alloc(kTensorAlignment, rounded);
    if (p == nullptr) throw_out_of_memory(rounded);
  }
  std::int64_t now = g_current.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed) +
                     static_cast<std::int64_t>(bytes);
  g_count.fetch_add(1, std::memory_order_relaxed);
  raise_to(g_peak, now);
  if (g_meter_count.load(std::memory_order_relaxed) > 0) raise_meters(now);
  return p;
}

void tracked_free(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  const std::size_t rounded = rounded_size(bytes);
  if (rounded >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    std::size_t capacity = rounded;
    if (auto it = g_capacity->find(ptr); it != g_capacity->end()) {
      capacity = it->second;
      g_capacity->erase(it);
    }
    g_cache->emplace(capacity, ptr);
    g_cached_bytes += static_cast<std::int64_t>(capacity);
  } else {
    std::free(ptr);
  }
  g_current.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
}

MemoryStats memory_stats() noexcept {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  return {g_current.load(std::memory_order_relaxed), g_peak.load(std::memory_order_relaxed),
          g_count.load(std::memory_order_relaxed), g_cached_bytes};
}

void release_cached_memory() noexcept {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  for (auto& [size, ptr] : *g_cache) std::free(ptr);
  g_cache->clear();
  g_cached_bytes = 0;
}

bool keep_freed_heap_memory() noexcept {
  // 32 MiB is the largest threshold glibc accepts (half its per-thread heap
  // size); a fixed threshold also stops it from moving with each free.
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1;
  return mmap_set && trim_set;
}

PeakMeter::PeakMeter() : peak_(g_current.load(std::memory_order_relaxed)) {
  std::lock_guard<std::mutex> lock(g_meters_mutex);
  g_meters->push_back(this);
  g_meter_count.fetch_add(1, std::memory_order_relaxed);
}

PeakMeter::~PeakMeter() {
  std::lock_guard<std::mutex> lock(g_meters_mutex);
  std::erase(*g_meters, this);
  g_meter_count.fetch_sub(1, std::memory_order_relaxed);
}

void PeakMeter::reset() noexcept { peak_.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace multihead
