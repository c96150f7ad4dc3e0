#include <gtest/gtest.h>

#include "multihead/core/allocator.h"
#include "multihead/core/tensor.h"

namespace multihead {
namespace {

TEST(Allocator, CountsCurrentAndPeakBytesExactly) {
  const MemoryStats before = memory_stats();
  reset_peak_memory();
  {
    Tensor a({1000});                      // 4000 bytes
    Tensor b({10, 10}, DType::kBool);      // 100 bytes
    EXPECT_EQ(memory_stats().current_bytes - before.current_bytes, 4100);
    {
      Tensor c({250});  // 1000 bytes
      EXPECT_EQ(memory_stats().peak_bytes - before.current_bytes, 5100);
    }
    EXPECT_EQ(memory_stats().current_bytes - before.current_bytes, 4100);
    EXPECT_EQ(memory_stats().peak_bytes - before.current_bytes, 5100);
  }
  EXPECT_EQ(memory_stats().current_bytes, before.current_bytes);
  reset_peak_memory();
  EXPECT_EQ(memory_stats().peak_bytes, before.current_bytes);
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

TEST(Allocator, BuffersAreAligned) {
  Tensor a({3});
  Tensor b({5});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.raw()) % kTensorAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.raw()) % kTensorAlignment, 0u);
}

}  // namespace
}  // namespace multihead
