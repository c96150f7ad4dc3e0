// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>

#include "multihead/core/allocator.h"
#include "multihead/core/tensor.h"

namespace multihead {
namespace {

TEST(Allocator, CountsCurrentAndPeakBytesExactly) {
  const MemoryStats before = memory_stats();
  PeakMeter meter;
  EXPECT_EQ(meter.peak_bytes(), before.current_bytes);
  {
    Tensor a({1000});                  // 4000 bytes
    Tensor b({10, 10}, DType::kBool);  // 100 bytes
    EXPECT_EQ(memory_stats().current_bytes - before.current_bytes, 4100);
    {
      Tensor c({250});  // 1000 bytes
      EXPECT_EQ(meter.peak_bytes() - before.current_bytes, 5100);
    }
    EXPECT_EQ(memory_stats().current_bytes - before.current_bytes, 4100);
    EXPECT_EQ(meter.peak_bytes() - before.current_bytes, 5100);
    EXPECT_GE(memory_stats().peak_bytes, meter.peak_bytes());  // the process's peak, since it started
  }
  EXPECT_EQ(memory_stats().current_bytes, before.current_bytes);
  meter.reset();
  EXPECT_EQ(meter.peak_bytes(), before.current_bytes);
}

// Meters measure side by side: one started later, or reset, leaves the other's peak alone.
TEST(Allocator, MetersDoNotMoveEachOthersPeak) {
  const std::int64_t base = memory_stats().current_bytes;
  PeakMeter outer;
  {
    Tensor big({2000});  // 8000 bytes
  }
  PeakMeter inner;
  {
    Tensor small({100});  // 400 bytes
  }
  EXPECT_EQ(outer.peak_bytes() - base, 8000);
  EXPECT_EQ(inner.peak_bytes() - base, 400);
  outer.reset();
  {
    Tensor mid({500});  // 2000 bytes
  }
  EXPECT_EQ(outer.peak_bytes() - base, 2000);
  EXPECT_EQ(inner.peak_bytes() - base, 2000);
}

TEST(Allocator, MovesDoNotDoubleCountOrFree) {
  const std::int64_t base = memory_stats().current_bytes;
  Tensor a({64});
  Tensor b = std::move(a);
  EXPECT_FALSE(a.defined());
  EXPECT_EQ(memory_stats().current_bytes - base, 256);
  Tensor c({8});
  c = std::move(b);  // frees c's old 32 bytes
  EXPECT_EQ(memory_stats().current_bytes - base, 256);
}

TEST(Allocator, CachedBlocksServeRequestsDownToHalfTheirSize) {
  release_cached_memory();
  const std::size_t mib = 1 << 20;
  void* big = tracked_alloc(mib);
  tracked_free(big, mib);
  EXPECT_EQ(memory_stats().cached_bytes, static_cast<std::int64_t>(mib));
  void* half = tracked_alloc(mib / 2 + 100);  // at least half: the cached block serves it
  EXPECT_EQ(half, big);
  EXPECT_EQ(memory_stats().cached_bytes, 0);
  tracked_free(half, mib / 2 + 100);
  // Back in the cache under its whole capacity: a full-size request gets it.
  EXPECT_EQ(memory_stats().cached_bytes, static_cast<std::int64_t>(mib));
  void* again = tracked_alloc(mib);
  EXPECT_EQ(again, big);
  void* small = tracked_alloc(mib / 4);  // the cache is empty: a new block
  EXPECT_NE(small, big);
  tracked_free(again, mib);
  tracked_free(small, mib / 4);
  void* quarter = tracked_alloc(mib / 4);  // the quarter block, not the one four times its size
  EXPECT_EQ(quarter, small);
  void* third = tracked_alloc(mib / 3);  // less than half of the only cached block: a new one
  EXPECT_NE(third, big);
  tracked_free(quarter, mib / 4);
  tracked_free(third, mib / 3);
  release_cached_memory();
  EXPECT_EQ(memory_stats().cached_bytes, 0);
}

TEST(Allocator, BuffersAreAligned) {
  Tensor a({3});
  Tensor b({5});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.raw()) % kTensorAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.raw()) % kTensorAlignment, 0u);
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// After keep_freed_heap_memory, a block malloc'd, written and freed comes
// back without page faults (glibc would otherwise map each large block fresh
// and unmap it when freed, or trim the heap it came from): what oneDNN's
// sgemm does with its packing buffers on every call. 8 MiB: 2048 pages.
TEST(Allocator, KeepingFreedHeapMemoryAvoidsPageFaultsOnReuse) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator stands in for glibc's malloc";
#endif
  ASSERT_TRUE(keep_freed_heap_memory());
  constexpr std::size_t kBytes = std::size_t{8} << 20;
  auto touch = [] {
    void* p = std::malloc(kBytes);
    ASSERT_NE(p, nullptr);
    // A write to every page, through volatile: the compiler may not drop the
    // malloc, the writes and the free as having no effect.
    volatile char* bytes = static_cast<volatile char*>(p);
    for (std::size_t i = 0; i < kBytes; i += 4096) bytes[i] = 1;
    std::free(p);
  };
  touch();
  const long before = minor_faults();
  touch();
  EXPECT_LT(minor_faults() - before, 64);
}

}  // namespace
}  // namespace multihead
