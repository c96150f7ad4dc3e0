// SPDX-License-Identifier: Apache-2.0
// The attention kernels check their sizes and views at entry, before any
// parallel region: a view a GEMM cannot read (rows closer than their width,
// as an expanded tensor has) and sequences past the fp32 accumulators'
// exact range are ShapeErrors, never a terminated process or garbage.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "multihead/core/error.h"
#include "multihead/kernels/attention_bf16.h"
#include "multihead/kernels/attention_checks.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_ref.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::error_message;

TEST(AttentionChecks, AnExpandedViewIsRefusedByEveryKernel) {
  const AttentionDims d{1, 1, 4, 4, 8, 8};
  std::vector<float> q(32, 0.5f), out(32), lse(4), w(16), g(32);
  std::vector<double> q64(32, 0.5), out64(32), p64(16);
  const HeadsView<const float> good{q.data(), 32, 8, 8, 1}, expanded{q.data(), 32, 0, 8, 1};
  const HeadsView<float> o{out.data(), 32, 8, 8, 1}, gv{g.data(), 32, 8, 8, 1};
  const std::string want =
      "attention: query's rows are 0 elements apart, fewer than their 8 features (an expanded "
      "or overlapping view: copy it first)";
  EXPECT_EQ(
      error_message([&] { attention_fused_forward<float>(o, lse.data(), expanded, good, good, {}, d, 1.0f, {}); }),
      want);
  EXPECT_EQ(error_message([&] {
              attention_fused_backward<float>(gv, gv, gv, lse.data(), good, good, expanded, good, good, {}, d, 1.0f,
                                              {});
            }),
            want);
  EXPECT_EQ(error_message(
                [&] { attention_fused_weights<float>(w.data(), true, lse.data(), expanded, good, {}, d, 1.0f, {}); }),
            want);
  const HeadsView<const double> e64{q64.data(), 32, 0, 8, 1}, g64{q64.data(), 32, 8, 8, 1};
  EXPECT_EQ(error_message([&] {
              attention_ref_forward<double>({out64.data(), 32, 8, 8, 1}, p64.data(), e64, g64, g64, {}, d, 1.0, {});
            }),
            want);
  // The same views, as they should be: the kernel runs.
  attention_fused_forward<float>(o, lse.data(), good, good, good, {}, d, 1.0f, {});
  EXPECT_FLOAT_EQ(out[0], 0.5f);
}

TEST(AttentionChecks, SizesMustBeSensible) {
  EXPECT_EQ(error_message([] {
              check_attention_dims({1, 0, 4, 4, 8, 8}, true);
            }),
            "attention sizes must be B, L, S >= 0 and H, D, Dv >= 1, got B=1 H=0 L=4 S=4 D=8 Dv=8");
  EXPECT_EQ(error_message([] { check_heads_view("key", nullptr, 0, 8, 8, 3, 8); }), "attention: key has no data");
  EXPECT_EQ(error_message([] { check_heads_view("key", nullptr, 0, 8, 8, 0, 8); }),
            "no error");  // no rows: nothing to read
}

// 2^24 keys of equal score and value one: the fp32 sums are exact and the
// output is 1; one key more is refused (it gave 1/128 at 2^31 keys).
TEST(AttentionChecks, KeysUpToTheFp32LimitAreExactAndOneMoreIsRefused) {
  const std::int64_t n = kMaxFp32AttentionPositions;
  std::vector<float> ones(static_cast<std::size_t>(n + 1), 1.0f), q(1, 1.0f), out(1), lse(1);
  const HeadsView<const float> kv{ones.data(), n + 1, 1, 1, 1}, qv{q.data(), 1, 1, 1, 1};
  attention_fused_forward<float>({out.data(), 1, 1, 1, 1}, lse.data(), qv, kv, kv, {}, {1, 1, 1, n, 1, 1}, 1.0f, {});
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_EQ(error_message([&] {
              attention_fused_forward<float>({out.data(), 1, 1, 1, 1}, lse.data(), qv, kv, kv, {},
                                             {1, 1, 1, n + 1, 1, 1}, 1.0f, {});
            }),
            "attention takes at most 16777216 query and key positions in one call (fp32 sums stay exact up to "
            "there), got L=1 S=16777217");
}

// The bf16 kernels accumulate in fp32 too: the same limit, forward and backward.
TEST(AttentionChecks, TheBf16KernelsKeepTheFp32Limit) {
  const std::int64_t n = kMaxFp32AttentionPositions + 1;
  std::vector<BF16> ones(static_cast<std::size_t>(n), BF16{0x3f80}), q(1, BF16{0x3f80}), out(1);  // 1.0
  std::vector<float> lse(1), dq(1), dk(static_cast<std::size_t>(n)), dv(static_cast<std::size_t>(n)), dout(1, 1.0f);
  const HeadsView<const BF16> kv{ones.data(), n, 1, 1, 1}, qv{q.data(), 1, 1, 1, 1}, ov{out.data(), 1, 1, 1, 1};
  const std::string want =
      "attention takes at most 16777216 query and key positions in one call (fp32 sums stay "
      "exact up to there), got L=1 S=16777217";
  EXPECT_EQ(
      error_message([&] {
        attention_bf16_forward({out.data(), 1, 1, 1, 1}, lse.data(), qv, kv, kv, {}, {1, 1, 1, n, 1, 1}, 1.0f, {});
      }),
      want);
  EXPECT_EQ(error_message([&] {
              attention_bf16_backward({dq.data(), 1, 1, 1, 1}, {dk.data(), n, 1, 1, 1}, {dv.data(), n, 1, 1, 1},
                                      lse.data(), ov, {dout.data(), 1, 1, 1, 1}, qv, kv, kv, {}, {1, 1, 1, n, 1, 1},
                                      1.0f, {});
            }),
            want);
}

}  // namespace
}  // namespace multihead
