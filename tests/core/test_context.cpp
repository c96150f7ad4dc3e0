// SPDX-License-Identifier: Apache-2.0
// The runtime context: bound per thread, nested, restored, carried into
// OpenMP workers only where a kernel binds it.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <thread>
#include <vector>

#include "multihead/core/context.h"
#include "multihead/core/error.h"
#include "multihead/core/threading.h"
#include "multihead/core/step_profile.h"
#include "multihead/train/distributed.h"

namespace multihead {
namespace {

RuntimeContext with_backend(GemmBackend b) {
  RuntimeContext c = context();
  c.gemm = b;
  return c;
}

TEST(RuntimeContext, AThreadThatBindsNoneRunsUnderTheDefaults) {
  RuntimeContext seen;
  seen.threads = -1, seen.gemm = GemmBackend::kOpenBlas, seen.poison_uninitialized = true;
  std::thread([&] { seen = context(); }).join();
  EXPECT_EQ(seen.threads, 0);
  EXPECT_EQ(seen.gemm, GemmBackend::kOneDnn);
  EXPECT_EQ(seen.profile, nullptr);
  EXPECT_EQ(seen.group, nullptr);
  EXPECT_FALSE(seen.poison_uninitialized);
}

TEST(RuntimeContext, BindingsNestAndTheOuterComesBack) {
  const RuntimeContext* before = &context();
  const RuntimeContext openblas = with_backend(GemmBackend::kOpenBlas);
  {
    const ContextBinding outer(openblas);
    EXPECT_EQ(&context(), &openblas);
    const RuntimeContext onednn = with_backend(GemmBackend::kOneDnn);
    {
      const ContextBinding inner(onednn);
      EXPECT_EQ(context().gemm, GemmBackend::kOneDnn);
    }
    EXPECT_EQ(context().gemm, GemmBackend::kOpenBlas);
  }
  EXPECT_EQ(&context(), before);
}

TEST(RuntimeContext, AScopeAppliesItsThreadCountAndRestoresTheHosts) {
  const int omp = omp_get_max_threads(), blas = openblas_get_num_threads();
  {
    RuntimeContext one = context();
    one.threads = 1;
    const ContextScope scope(one);
    EXPECT_EQ(omp_get_max_threads(), 1);
    EXPECT_EQ(openblas_get_num_threads(), 1);
    EXPECT_EQ(context().threads, 1);
    EXPECT_EQ(&context(), &scope.get());  // a copy: the argument may go
    RuntimeContext all = context();
    all.threads = 0;
    const ContextScope inner(all);
    EXPECT_EQ(omp_get_max_threads(), omp_get_num_procs());
  }
  EXPECT_EQ(omp_get_max_threads(), omp);
  EXPECT_EQ(openblas_get_num_threads(), blas);
}

TEST(RuntimeContext, ABadThreadCountIsRefusedAndChangesNothing) {
  const int omp = omp_get_max_threads();
  const RuntimeContext* before = &context();
  RuntimeContext bad = context();
  bad.threads = -2;
  EXPECT_THROW(ContextScope{bad}, ConfigError);
  bad.threads = kMaxThreads + 1;
  EXPECT_THROW(ContextScope{bad}, ConfigError);
  EXPECT_EQ(&context(), before);
  EXPECT_EQ(omp_get_max_threads(), omp);
}

// An OpenMP region's workers run under the defaults unless the region binds
// its starter's context (as the kernels whose workers call GEMMs do).
TEST(RuntimeContext, OpenMpWorkersSeeTheCallersContextOnlyWhereBound) {
  const RuntimeContext openblas = with_backend(GemmBackend::kOpenBlas);
  const ContextBinding bound(openblas);
  std::vector<int> unbound(2, -1), carried(2, -1);
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    if (t < 2) unbound[static_cast<std::size_t>(t)] = static_cast<int>(context().gemm);
  }
#pragma omp parallel num_threads(2)
  {
    const ContextBinding worker(openblas);
    const int t = omp_get_thread_num();
    if (t < 2) carried[static_cast<std::size_t>(t)] = static_cast<int>(context().gemm);
  }
  EXPECT_EQ(unbound[0], static_cast<int>(GemmBackend::kOpenBlas));  // the starter is a member of its team
  EXPECT_EQ(carried, std::vector<int>(2, static_cast<int>(GemmBackend::kOpenBlas)));
  if (omp_get_max_threads() > 1 && unbound[1] >= 0) {
    EXPECT_EQ(unbound[1], static_cast<int>(GemmBackend::kOneDnn));  // a worker: the defaults
  }
}

// The ranks come from the context: the CLI's MPI session, or else this thread alone.
TEST(RuntimeContext, TheProcessGroupIsTheContextsOrTheThreadsOwn) {
  ProcessGroup& alone = process_group();
  EXPECT_EQ(alone.size(), 1);
  EXPECT_TRUE(alone.primary());
  ProcessGroup* other = nullptr;
  std::thread([&] { other = &process_group(); }).join();
  EXPECT_NE(other, &alone);
  ProcessGroup session;
  RuntimeContext c = context();
  c.group = &session;
  {
    const ContextBinding bound(c);
    EXPECT_EQ(&process_group(), &session);
  }
  EXPECT_EQ(&process_group(), &alone);
}

}  // namespace
}  // namespace multihead
