// SPDX-License-Identifier: Apache-2.0
// Sizes are checked before anything is allocated: settings beyond the
// limits are ConfigErrors, shapes whose bytes overflow and allocations
// beyond reach are MemoryErrors, and a model larger than the machine's
// memory is refused before its buffers exist. Never a bare std::bad_alloc.
#include <gtest/gtest.h>

#include "multihead/core/allocator.h"
#include "multihead/core/error.h"
#include "multihead/core/tensor.h"
#include "multihead/core/threading.h"
#include "multihead/nn/models.h"
#include "multihead/nn/multi_head_attention.h"
#include "multihead/nn/param_store.h"

namespace multihead {
namespace {

TEST(Hardening, SizesAreCheckedBeforeAllocation) {
  MultiheadAttentionConfig mha;
  mha.embed_dim = 1'000'000'000;
  mha.num_heads = 8;
  EXPECT_THROW(mha.validate(), ConfigError);
  ModelConfig m;
  m.num_layers = 1'000'000'000;
  EXPECT_THROW(m.validate(), ConfigError);
  m.num_layers = 1;
  m.layer.d_model = 4'000'000'000'000'000'000;
  EXPECT_THROW(m.validate(), ConfigError);

  // A shape whose element count fits int64 but whose bytes do not fit the
  // allocator's limit; one whose element count overflows.
  EXPECT_THROW(Tensor({std::int64_t{1} << 47}), MemoryError);
  EXPECT_THROW(Tensor({std::int64_t{1} << 40, std::int64_t{1} << 40}), ShapeError);
  EXPECT_THROW(tracked_alloc(kMaxAllocationBytes + 1), MemoryError);
  try {
    tracked_alloc(kMaxAllocationBytes + 1);
  } catch (const MemoryError& e) {
    EXPECT_STREQ(e.what(), "cannot allocate 281474976710657 bytes (262144.0 GiB): out of memory");
  }

  // 2^40 parameters need 8 TiB for weights and gradients: refused before
  // the buffers are allocated.
  ParamStore store;
  store.add("huge", {std::int64_t{1} << 40});
  try {
    store.finalize();
    FAIL() << "finalized a model larger than the machine";
  } catch (const MemoryError& e) {
    EXPECT_EQ(
        std::string(e.what()).rfind("the model's 1099511627776 parameters need 8192.0 GiB for weights and gradients; "
                                    "this machine has ",
                                    0),
        0u)
        << e.what();
  }

  EXPECT_THROW(check_threads(-3), ConfigError);
  EXPECT_THROW(check_threads(kMaxThreads + 1), ConfigError);
  EXPECT_NO_THROW(check_threads(0));
}

}  // namespace
}  // namespace multihead
