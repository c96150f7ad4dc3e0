// SPDX-License-Identifier: Apache-2.0
// The fused attention kernel against the reference kernel: forward, saved
// log-sum-exp, recomputed weights and every gradient, for every mask kind
// and for sizes that are not multiples of the tiles.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/positions.h"
#include "attention_cases.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close_v;

using test::Data;
using test::make;
using test::Spec;
using test::specs;
using test::view;

class FusedVsReference : public ::testing::TestWithParam<Spec> {};

TEST_P(FusedVsReference, ForwardWeightsAndGradientsAgree) {
  const Spec& s = GetParam();
  const AttentionDims& d = s.d;
  Data x = make(s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  auto cv = [&](const std::vector<float>& v, std::int64_t len, std::int64_t dim) {
    return view<const float>(v.data(), d, len, dim);
  };

  const test::Reference ref = test::reference(s, x, scale);
  std::vector<float> out_f(x.g.size(), 7.0f), lse(static_cast<std::size_t>(d.B * d.H * d.L));
  attention_fused_forward(view(out_f.data(), d, d.L, d.Dv), lse.data(), cv(x.q, d.L, d.D), cv(x.k, d.S, d.D),
                          cv(x.v, d.S, d.Dv), x.terms, d, scale, x.drop, s.tiles);
  EXPECT_TRUE(all_close_v(out_f, ref.out, 1e-5, 1e-4)) << "output";

  for (bool avg : {false, true}) {
    std::size_t n = static_cast<std::size_t>(d.B * (avg ? 1 : d.H) * d.L * d.S);
    std::vector<float> w_r(n), w_f(n, 7.0f);
    attention_weights_from_probs(w_r.data(), ref.probs.data(), d, avg, x.drop);
    attention_fused_weights(w_f.data(), avg, lse.data(), cv(x.q, d.L, d.D), cv(x.k, d.S, d.D), x.terms, d, scale,
                            x.drop, s.tiles);
    EXPECT_TRUE(all_close_v(w_f, w_r, 1e-5, 1e-4)) << (avg ? "averaged weights" : "weights");
  }

  std::vector<float> drk_f(x.rel_k.size()), drv_f(x.rel_v.size());
  std::vector<float> dq_f(x.q.size(), 7.0f), dk_f(x.k.size(), 7.0f), dv_f(x.v.size(), 7.0f);
  attention_fused_backward(view(dq_f.data(), d, d.L, d.D), view(dk_f.data(), d, d.S, d.D),
                           view(dv_f.data(), d, d.S, d.Dv), lse.data(), cv(out_f, d.L, d.Dv), cv(x.g, d.L, d.Dv),
                           cv(x.q, d.L, d.D), cv(x.k, d.S, d.D), cv(x.v, d.S, d.Dv), x.terms, d, scale, x.drop, s.tiles,
                           {drk_f.data(), drv_f.data()});
  EXPECT_TRUE(all_close_v(dq_f, ref.dq, 1e-5, 1e-4)) << "dq";
  EXPECT_TRUE(all_close_v(dk_f, ref.dk, 1e-5, 1e-4)) << "dk";
  EXPECT_TRUE(all_close_v(dv_f, ref.dv, 1e-5, 1e-4)) << "dv";
  EXPECT_TRUE(all_close_v(drk_f, ref.drk, 1e-5, 1e-4)) << "d_rel_k";
  EXPECT_TRUE(all_close_v(drv_f, ref.drv, 1e-5, 1e-4)) << "d_rel_v";
  for (float v : dq_f) ASSERT_TRUE(std::isfinite(v));

  // The dropout mask recorded by the forward as keep bits and read back by
  // the backward instead of drawn again: the same results, bit for bit.
  if (!x.drop.active()) return;
  std::vector<std::uint64_t> bits = test::keep_bits(d);
  AttentionDropout drop = x.drop;
  drop.keep_bits = bits.data();
  std::vector<float> out_b(out_f.size()), lse_b(lse.size());
  attention_fused_forward(view(out_b.data(), d, d.L, d.Dv), lse_b.data(), cv(x.q, d.L, d.D), cv(x.k, d.S, d.D),
                          cv(x.v, d.S, d.Dv), x.terms, d, scale, drop, s.tiles);
  EXPECT_TRUE(test::same_bits(out_b, out_f)) << "output";
  EXPECT_TRUE(test::same_bits(lse_b, lse)) << "lse";
  std::vector<float> drk_b(x.rel_k.size()), drv_b(x.rel_v.size());
  std::vector<float> dq_b(x.q.size()), dk_b(x.k.size()), dv_b(x.v.size());
  attention_fused_backward(view(dq_b.data(), d, d.L, d.D), view(dk_b.data(), d, d.S, d.D),
                           view(dv_b.data(), d, d.S, d.Dv), lse.data(), cv(out_f, d.L, d.Dv), cv(x.g, d.L, d.Dv),
                           cv(x.q, d.L, d.D), cv(x.k, d.S, d.D), cv(x.v, d.S, d.Dv), x.terms, d, scale, drop, s.tiles,
                           {drk_b.data(), drv_b.data()});
  test::expect_same_bits({{"dq", dq_b, dq_f},
                          {"dk", dk_b, dk_f},
                          {"dv", dv_b, dv_f},
                          {"d_rel_k", drk_b, drk_f},
                          {"d_rel_v", drv_b, drv_f}});
}

INSTANTIATE_TEST_SUITE_P(Cases, FusedVsReference, ::testing::ValuesIn(specs()),
                         [](const ::testing::TestParamInfo<Spec>& p) { return p.param.name; });

// Sliding windows and block-sparse patterns equal full attention under the
// equivalent explicit mask, written out here from the definitions.
TEST(FusedAttention, SparsePatternsEqualFullAttentionWithTheEquivalentMask) {
  struct Pattern {
    std::int64_t L, S, left, right, block, neighbours, globals;
  };
  for (const Pattern& pt : {Pattern{50, 50, 7, 2, 0, 0, 0}, Pattern{20, 60, -1, 0, 0, 0, 0},
                            Pattern{64, 64, -1, -1, 16, 1, 0}, Pattern{45, 45, -1, -1, 8, 0, 4}}) {
    Spec plain{"p", {1, 2, pt.L, pt.S, 8, 8}};
    Data x = make(plain);
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(pt.L * pt.S));
    for (std::int64_t i = 0; i < pt.L; ++i)
      for (std::int64_t j = 0; j < pt.S; ++j) {
        const std::int64_t p = i + pt.S - pt.L;  // bottom-right aligned position of query i
        bool blocked = (pt.left >= 0 && j < p - pt.left) || (pt.right >= 0 && j > p + pt.right);
        if (pt.block > 0 && j >= pt.globals && p >= pt.globals)
          blocked = blocked || std::abs(j / pt.block - p / pt.block) > pt.neighbours;
        mask[static_cast<std::size_t>(i * pt.S + j)] = blocked;
      }
    const AttentionDims& d = plain.d;
    auto cv = [&](const std::vector<float>& v, std::int64_t len) { return view<const float>(v.data(), d, len, 8); };
    AttentionMasks<float> explicit_mask;
    explicit_mask.attn_bool = mask.data();
    AttentionMasks<float> pattern;
    pattern.window_left = pt.left, pattern.window_right = pt.right;
    pattern.sparse_block = pt.block, pattern.sparse_neighbours = pt.neighbours, pattern.global_tokens = pt.globals;
    std::vector<float> o1(x.g.size()), o2(x.g.size()), l1(static_cast<std::size_t>(2 * pt.L)), l2 = l1;
    attention_fused_forward(view(o1.data(), d, pt.L, 8), l1.data(), cv(x.q, pt.L), cv(x.k, pt.S), cv(x.v, pt.S),
                            explicit_mask, d, 0.35f, {}, AttentionTiles{16, 16});
    attention_fused_forward(view(o2.data(), d, pt.L, 8), l2.data(), cv(x.q, pt.L), cv(x.k, pt.S), cv(x.v, pt.S),
                            pattern, d, 0.35f, {}, AttentionTiles{16, 16});
    EXPECT_TRUE(all_close_v(o2, o1, 1e-6, 1e-5)) << pt.L << " " << pt.S << " " << pt.block;
  }
}

TEST(FusedAttention, FullyMaskedRowsGiveZerosAndInfiniteLse) {
  Spec s{"x", {2, 1, 5, 6, 4, 4}};
  s.fully_masked = s.kpm_bool = true;
  Data x = make(s);
  const AttentionDims& d = s.d;
  std::vector<float> out(x.g.size(), 7.0f), lse(static_cast<std::size_t>(d.B * d.H * d.L));
  attention_fused_forward(view(out.data(), d, d.L, d.Dv), lse.data(), view<const float>(x.q.data(), d, d.L, d.D),
                          view<const float>(x.k.data(), d, d.S, d.D), view<const float>(x.v.data(), d, d.S, d.Dv),
                          x.terms, d, 0.5f, x.drop);
  for (std::int64_t i = 0; i < d.L * d.Dv; ++i) EXPECT_EQ(out[static_cast<std::size_t>(i)], 0.0f);  // batch 0
  for (std::int64_t i = 0; i < d.L; ++i)
    EXPECT_EQ(lse[static_cast<std::size_t>(i)], std::numeric_limits<float>::infinity());
}

// A NaN in one key reaches every query of its head that sees the key, as in
// PyTorch's softmax; it must not be dropped as a zero weight. Where a mask
// hides the key, the fused kernel skips the score or sets it to -inf, so
// those queries stay finite; the reference
// path adds the mask as PyTorch 1.13 does (NaN + -inf = NaN), so the NaN
// spreads over the whole head there.
TEST(FusedAttention, ANaNKeyReachesTheQueriesThatSeeIt) {
  const AttentionDims d{1, 2, 20, 20, 8, 8};
  for (CausalAlign causal : {CausalAlign::kNone, CausalAlign::kTopLeft})
    for (AttentionTiles tiles :
         {AttentionTiles{}, AttentionTiles{8, 8, TileGemm::kMicroKernel}, AttentionTiles{8, 8, TileGemm::kBlas}}) {
      Spec s{"nan", d};
      s.causal = causal;
      Data x = make(s);
      x.k[static_cast<std::size_t>(5 * d.H * d.D + 2)] = std::nanf("");  // key 5, head 0, dimension 2
      std::vector<float> ref(x.g.size()), probs(static_cast<std::size_t>(d.B * d.H * d.L * d.S));
      std::vector<float> out(x.g.size(), 7.0f), lse(static_cast<std::size_t>(d.B * d.H * d.L));
      const auto q = view<const float>(x.q.data(), d, d.L, d.D), k = view<const float>(x.k.data(), d, d.S, d.D),
                 v = view<const float>(x.v.data(), d, d.S, d.Dv);
      attention_ref_forward<float>(view(ref.data(), d, d.L, d.Dv), probs.data(), q, k, v, x.terms, d, 0.5f, x.drop);
      attention_fused_forward(view(out.data(), d, d.L, d.Dv), lse.data(), q, k, v, x.terms, d, 0.5f, x.drop, tiles);
      for (std::int64_t i = 0; i < d.L; ++i)
        for (std::int64_t h = 0; h < d.H; ++h)
          for (std::int64_t e = 0; e < d.Dv; ++e) {
            const std::size_t at = static_cast<std::size_t>((i * d.H + h) * d.Dv + e);
            const bool sees = h == 0 && (causal == CausalAlign::kNone || i >= 5);
            ASSERT_EQ(std::isnan(out[at]), sees) << "fused, query " << i << " head " << h << " tiles " << tiles.q_block;
            ASSERT_EQ(std::isnan(ref[at]), h == 0) << "reference, query " << i << " head " << h;
            if (h == 1) {
              EXPECT_NEAR(out[at], ref[at], 1e-5);
            }
          }
    }
}

// A query of NaNs scores NaN against every key: its row is NaN (PyTorch
// propagates it), never the zeros of a fully masked row.
TEST(FusedAttention, AQueryOfNaNsGivesANaNRow) {
  const AttentionDims d{1, 1, 20, 20, 8, 8};
  for (AttentionTiles tiles :
       {AttentionTiles{}, AttentionTiles{8, 8, TileGemm::kMicroKernel}, AttentionTiles{8, 8, TileGemm::kBlas}}) {
    Spec s{"nanq", d};
    Data x = make(s);
    for (std::int64_t e = 0; e < d.D; ++e) x.q[static_cast<std::size_t>(3 * d.D + e)] = std::nanf("");
    std::vector<float> out(x.g.size(), 7.0f), lse(static_cast<std::size_t>(d.B * d.H * d.L));
    attention_fused_forward(view(out.data(), d, d.L, d.Dv), lse.data(), view<const float>(x.q.data(), d, d.L, d.D),
                            view<const float>(x.k.data(), d, d.S, d.D), view<const float>(x.v.data(), d, d.S, d.Dv),
                            x.terms, d, 0.5f, x.drop, tiles);
    for (std::int64_t i = 0; i < d.L; ++i)
      for (std::int64_t e = 0; e < d.Dv; ++e)
        ASSERT_EQ(std::isnan(out[static_cast<std::size_t>(i * d.Dv + e)]), i == 3) << "query " << i;
    EXPECT_TRUE(std::isnan(lse[3]));
  }
}

TEST(FusedAttention, BadTilesAreAnError) {
  AttentionDims d{1, 1, 2, 2, 1, 1};
  std::vector<float> a(4), lse(2);
  EXPECT_THROW(attention_fused_forward(view(a.data(), d, 2, 1), lse.data(), view<const float>(a.data(), d, 2, 1),
                                       view<const float>(a.data(), d, 2, 1), view<const float>(a.data(), d, 2, 1), {},
                                       d, 1.0f, {}, AttentionTiles{0, 16}),
               ConfigError);
}

}  // namespace
}  // namespace multihead
