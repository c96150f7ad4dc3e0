// SPDX-License-Identifier: Apache-2.0
// The step profile behind `bench train`'s time split.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "multihead/bench/train_bench.h"
#include "multihead/core/context.h"
#include "multihead/core/step_profile.h"
#include "multihead/kernels/gemm.h"

namespace multihead {
namespace {

void product(std::vector<float>& c, const std::vector<float>& a, std::int64_t n) {
  gemm(Trans::kNo, Trans::kNo, n, n, n, 1.0f, a.data(), n, a.data(), n, 0.0f, c.data(), n);
}

RuntimeContext profiled(StepProfile& p) {
  RuntimeContext c = context();
  c.profile = &p;
  return c;
}

TEST(StepProfile, CountsOnlyTheOutermostPartAndOnlyWhereTheContextNamesIt) {
  const std::int64_t n = 128;
  std::vector<float> a(n * n, 0.5f), c(n * n);
  StepProfile p;
  product(c, a, n);  // not in the thread's context: nothing counted
  for (double s : p.seconds()) EXPECT_EQ(s, 0.0);
  const RuntimeContext ctx = profiled(p);
  const ContextBinding bound(ctx);
  product(c, a, n);
  auto s = p.seconds();
  EXPECT_GT(s[static_cast<int>(StepPart::kGemm)], 0.0);
  EXPECT_EQ(s[static_cast<int>(StepPart::kAttention)], 0.0);
  // A GEMM inside an attention scope is attention time.
  p.reset();
  {
    const StepProfileScope attention(StepPart::kAttention);
    product(c, a, n);
  }
  s = p.seconds();
  EXPECT_GT(s[static_cast<int>(StepPart::kAttention)], 0.0);
  EXPECT_EQ(s[static_cast<int>(StepPart::kGemm)], 0.0);
  // Inside a parallel region nothing is counted (the thread that entered it is timing the region).
  p.reset();
#pragma omp parallel num_threads(2)
  {
    const ContextBinding worker(ctx);
    std::vector<float> mine(16 * 16);
    product(mine, a, 16);
  }
  for (double t : p.seconds()) EXPECT_EQ(t, 0.0);
}

// Two profiles on two threads at once: each counts its own thread's work only.
TEST(StepProfile, EachThreadCountsIntoItsOwnContextsProfile) {
  const std::int64_t n = 96;
  std::vector<float> a(n * n, 0.5f);
  StepProfile mine, theirs, idle;
  std::thread other([&] {
    const RuntimeContext ctx = profiled(theirs);
    const ContextBinding bound(ctx);
    std::vector<float> c(n * n);
    for (int i = 0; i < 3; ++i) {
      const StepProfileScope attention(StepPart::kAttention);
      product(c, a, n);
    }
  });
  {
    const RuntimeContext ctx = profiled(mine);
    const ContextBinding bound(ctx);
    std::vector<float> c(n * n);
    for (int i = 0; i < 3; ++i) product(c, a, n);
  }
  other.join();
  EXPECT_GT(mine.seconds()[static_cast<int>(StepPart::kGemm)], 0.0);
  EXPECT_EQ(mine.seconds()[static_cast<int>(StepPart::kAttention)], 0.0);
  EXPECT_GT(theirs.seconds()[static_cast<int>(StepPart::kAttention)], 0.0);
  EXPECT_EQ(theirs.seconds()[static_cast<int>(StepPart::kGemm)], 0.0);
  for (double t : idle.seconds()) EXPECT_EQ(t, 0.0);
}

TEST(TrainBench, ModelFlopsCountEveryMatrixProductThreeTimes) {
  TrainBenchConfig c;
  c.batch = 2, c.seq_len = 3, c.d_model = 4, c.dim_feedforward = 5, c.num_layers = 2, c.num_classes = 2;
  // Per layer, 6 tokens: in-projection 2*6*4*12 = 576, out-projection 2*6*4*4 = 192, feed-forward
  // 2*2*6*4*5 = 480, Q K^T and P V 2*2*6*3*4 = 288; head 2*2*4*2 = 32.
  EXPECT_EQ(train_step_flops(c), 3.0 * (2 * (576 + 192 + 480 + 288) + 32));
}

}  // namespace
}  // namespace multihead
