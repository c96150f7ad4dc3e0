// The fused attention kernel against the reference kernel: forward, saved
// log-sum-exp, recomputed weights and every gradient, for every mask kind
// and for sizes that are not multiples of the tiles.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/positions.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close_v;

struct Spec {
  std::string name;
  AttentionDims d;
  bool kpm_bool = false, kpm_float = false, attn_bool = false, attn_float = false, per_head = false;
  CausalAlign causal = CausalAlign::kNone;
  std::int64_t extra_cols = 0;
  bool fully_masked = false;  // query 0 sees nothing; batch 0 has no keys at all when kpm_bool
  std::int64_t pad_tail = 0;  // the last pad_tail keys of batch element 1 are padding
  bool alibi = false;
  std::int64_t rel_clip = -1;  // >= 0: Shaw relative positions
  bool rel_values = false;
  std::int64_t query_offset = 0;
  std::int64_t window_left = -1, window_right = -1, sparse_block = 0, sparse_neighbours = 0, global_tokens = 0;
  float dropout = 0.0f;
  AttentionTiles tiles{};
};

void PrintTo(const Spec& s, std::ostream* os) { *os << s.name; }

struct Data {
  std::vector<float> q, k, v, g;
  std::vector<std::uint8_t> kpm_b, attn_b;
  std::vector<float> kpm_f, attn_f, slopes, rel_k, rel_v;
  AttentionMasks<float> masks;
  AttentionDropout drop;
};

Data make(const Spec& s) {
  const AttentionDims& d = s.d;
  Rng rng(1234);
  auto vec = [&](std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = rng.normal();
    return v;
  };
  Data x;
  x.q = vec(d.B * d.L * d.H * d.D);
  x.k = vec(d.B * d.S * d.H * d.D);
  x.v = vec(d.B * d.S * d.H * d.Dv);
  x.g = vec(d.B * d.L * d.H * d.Dv);
  const std::int64_t cols = d.S - s.extra_cols;
  x.masks.masked_cols = cols;
  x.masks.causal = s.causal;
  x.masks.attn_per_head = s.per_head;
  if (s.kpm_bool) {
    x.kpm_b.resize(static_cast<std::size_t>(d.B * cols));
    for (auto& m : x.kpm_b) m = rng.uniform() < 0.3f;
    if (s.fully_masked) std::fill_n(x.kpm_b.begin(), cols, 1);  // batch 0: every key padded
    if (s.pad_tail > 0) std::fill_n(x.kpm_b.begin() + 2 * cols - s.pad_tail, s.pad_tail, 1);
    x.masks.key_padding_bool = x.kpm_b.data();
  }
  if (s.kpm_float) {
    x.kpm_f = vec(d.B * cols);
    x.masks.key_padding_add = x.kpm_f.data();
  }
  const std::int64_t rows = (s.per_head ? d.B * d.H : 1) * d.L;
  if (s.attn_bool || s.fully_masked) {
    x.attn_b.assign(static_cast<std::size_t>(rows * cols), 0);
    if (s.attn_bool)
      for (auto& m : x.attn_b) m = rng.uniform() < 0.3f;
    if (s.fully_masked)
      for (std::int64_t r = 0; r < rows; r += d.L) std::fill_n(x.attn_b.begin() + r * cols, cols, 1);
    x.masks.attn_bool = x.attn_b.data();
  }
  if (s.attn_float) {
    x.attn_f = vec(rows * cols);
    if (s.fully_masked)  // a float -inf row masks too
      std::fill_n(x.attn_f.begin() + (d.L - 1) * cols, cols, -std::numeric_limits<float>::infinity());
    x.masks.attn_add = x.attn_f.data();
  }
  x.drop = AttentionDropout{s.dropout, 99, 3};
  x.masks.query_offset = s.query_offset;
  x.masks.window_left = s.window_left;
  x.masks.window_right = s.window_right;
  x.masks.sparse_block = s.sparse_block;
  x.masks.sparse_neighbours = s.sparse_neighbours;
  x.masks.global_tokens = s.global_tokens;
  if (s.alibi) {
    x.slopes = alibi_slopes(d.H);
    x.masks.alibi_slopes = x.slopes.data();
  }
  if (s.rel_clip >= 0) {
    x.rel_k = vec((2 * s.rel_clip + 1) * d.D);
    x.masks.relative.rel_k = x.rel_k.data();
    x.masks.relative.clip = s.rel_clip;
    if (s.rel_values) {
      x.rel_v = vec((2 * s.rel_clip + 1) * d.Dv);
      x.masks.relative.rel_v = x.rel_v.data();
    }
  }
  return x;
}

template <typename T>
HeadsView<T> view(T* p, const AttentionDims& d, std::int64_t len, std::int64_t dim) {
  return {p, len * d.H * dim, d.H * dim, dim};
}

class FusedVsReference : public ::testing::TestWithParam<Spec> {};

TEST_P(FusedVsReference, ForwardWeightsAndGradientsAgree) {
  const Spec& s = GetParam();
  const AttentionDims& d = s.d;
  Data x = make(s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  auto cv = [&](const std::vector<float>& v, std::int64_t len, std::int64_t dim) {
    return view<const float>(v.data(), d, len, dim);
  };

  std::vector<float> out_r(x.g.size()), probs(static_cast<std::size_t>(d.B * d.H * d.L * d.S));
  attention_ref_forward<float>(view(out_r.data(), d, d.L, d.Dv), probs.data(), cv(x.q, d.L, d.D), cv(x.k, d.S, d.D),
                               cv(x.v, d.S, d.Dv), x.masks, d, scale, x.drop);
  std::vector<float> out_f(x.g.size(), 7.0f), lse(static_cast<std::size_t>(d.B * d.H * d.L));
  attention_fused_forward(view(out_f.data(), d, d.L, d.Dv), lse.data(), cv(x.q, d.L, d.D), cv(x.k, d.S, d.D),
                          cv(x.v, d.S, d.Dv), x.masks, d, scale, x.drop, s.tiles);
  EXPECT_TRUE(all_close_v(out_f, out_r, 1e-5, 1e-4)) << "output";

  for (bool avg : {false, true}) {
    std::size_t n = static_cast<std::size_t>(d.B * (avg ? 1 : d.H) * d.L * d.S);
    std::vector<float> w_r(n), w_f(n, 7.0f);
    attention_weights_from_probs(w_r.data(), probs.data(), d, avg, x.drop);
    attention_fused_weights(w_f.data(), avg, lse.data(), cv(x.q, d.L, d.D), cv(x.k, d.S, d.D), x.masks, d, scale,
                            x.drop, s.tiles);
    EXPECT_TRUE(all_close_v(w_f, w_r, 1e-5, 1e-4)) << (avg ? "averaged weights" : "weights");
  }

  std::vector<float> drk_r(x.rel_k.size()), drv_r(x.rel_v.size()), drk_f(x.rel_k.size()), drv_f(x.rel_v.size());
  AttentionMasks<float> masks_r = x.masks, masks_f = x.masks;
  masks_r.relative.d_rel_k = drk_r.data(), masks_r.relative.d_rel_v = drv_r.data();
  masks_f.relative.d_rel_k = drk_f.data(), masks_f.relative.d_rel_v = drv_f.data();
  std::vector<float> dq_r(x.q.size()), dk_r(x.k.size()), dv_r(x.v.size());
  attention_ref_backward<float>(view(dq_r.data(), d, d.L, d.D), view(dk_r.data(), d, d.S, d.D),
                                view(dv_r.data(), d, d.S, d.Dv), probs.data(), cv(x.g, d.L, d.Dv), cv(x.q, d.L, d.D),
                                cv(x.k, d.S, d.D), cv(x.v, d.S, d.Dv), masks_r, d, scale, x.drop);
  std::vector<float> dq_f(x.q.size(), 7.0f), dk_f(x.k.size(), 7.0f), dv_f(x.v.size(), 7.0f);
  attention_fused_backward(view(dq_f.data(), d, d.L, d.D), view(dk_f.data(), d, d.S, d.D),
                           view(dv_f.data(), d, d.S, d.Dv), lse.data(), cv(out_f, d.L, d.Dv), cv(x.g, d.L, d.Dv),
                           cv(x.q, d.L, d.D), cv(x.k, d.S, d.D), cv(x.v, d.S, d.Dv), masks_f, d, scale, x.drop,
                           s.tiles);
  EXPECT_TRUE(all_close_v(dq_f, dq_r, 1e-5, 1e-4)) << "dq";
  EXPECT_TRUE(all_close_v(dk_f, dk_r, 1e-5, 1e-4)) << "dk";
  EXPECT_TRUE(all_close_v(dv_f, dv_r, 1e-5, 1e-4)) << "dv";
  EXPECT_TRUE(all_close_v(drk_f, drk_r, 1e-5, 1e-4)) << "d_rel_k";
  EXPECT_TRUE(all_close_v(drv_f, drv_r, 1e-5, 1e-4)) << "d_rel_v";
  for (float v : dq_f) ASSERT_TRUE(std::isfinite(v));
}

std::vector<Spec> specs() {
  std::vector<Spec> v;
  // Default tiles take BLAS for heads of at most 8 dimensions (kAuto); the
  // small tiles pin the micro-kernel, so both paths meet every size and mask.
  const AttentionTiles small{16, 32, TileGemm::kMicroKernel};
  // Sizes that are not multiples of the tile, with default and small tiles.
  for (std::int64_t L : {1, 7, 65, 257})
    for (std::int64_t D : {1, 3, 64, 128}) {
      if (L == 257 && D != 64 && D != 3) continue;  // keep the suite fast; 257 is covered twice
      for (int variant = 0; variant < 3; ++variant) {
        static const char* kNames[] = {"default_tiles", "small_tiles", "blas_tiles"};
        Spec s{fmt::format("L{}_D{}_{}", L, D, kNames[variant]), {2, 2, L, L, D, D}};
        if (variant == 1) s.tiles = small;
        if (variant == 2) s.tiles.gemm = TileGemm::kBlas;
        v.push_back(s);
      }
    }
  auto add = [&](std::string name, AttentionDims d, auto f) {
    for (bool tiny : {false, true}) {
      Spec s{name + (tiny ? "_small_tiles" : ""), d};
      if (tiny) s.tiles = small;
      f(s);
      v.push_back(s);
    }
    Spec s{name + "_blas_tiles", d};  // the BLAS-on-tiles path, same checks
    s.tiles.gemm = TileGemm::kBlas;
    f(s);
    v.push_back(s);
  };
  const AttentionDims ne{2, 3, 37, 70, 8, 8};  // L != S
  add("kpm_bool", ne, [](Spec& s) { s.kpm_bool = true; });
  add("kpm_float", ne, [](Spec& s) { s.kpm_float = true; });
  add("attn_bool_2d", ne, [](Spec& s) { s.attn_bool = true; });
  add("attn_float_2d", ne, [](Spec& s) { s.attn_float = true; });
  add("attn_bool_3d", ne, [](Spec& s) { s.attn_bool = s.per_head = true; });
  add("attn_float_3d", ne, [](Spec& s) { s.attn_float = s.per_head = true; });
  add("all_masks", ne, [](Spec& s) { s.kpm_bool = s.kpm_float = s.attn_bool = s.attn_float = s.per_head = true; });
  add("causal_top_left", {2, 2, 65, 65, 16, 16}, [](Spec& s) { s.causal = CausalAlign::kTopLeft; });
  add("causal_top_left_L_lt_S", {1, 2, 33, 100, 16, 16}, [](Spec& s) { s.causal = CausalAlign::kTopLeft; });
  add("causal_bottom_right_L_lt_S", {1, 2, 33, 100, 16, 16}, [](Spec& s) { s.causal = CausalAlign::kBottomRight; });
  add("causal_bottom_right_L_gt_S", {1, 2, 100, 33, 16, 16}, [](Spec& s) { s.causal = CausalAlign::kBottomRight; });
  add("causal_extra_columns", {2, 2, 40, 42, 8, 8}, [](Spec& s) {
    s.causal = CausalAlign::kTopLeft;
    s.kpm_bool = true;
    s.extra_cols = 2;
  });
  add("fully_masked_rows", {2, 2, 20, 45, 8, 8}, [](Spec& s) {
    s.fully_masked = s.kpm_bool = s.attn_float = true;
  });
  add("dropout", {2, 2, 50, 70, 8, 8}, [](Spec& s) { s.dropout = 0.2f; });
  add("dropout_causal_masks", {1, 3, 40, 40, 8, 5}, [](Spec& s) {
    s.dropout = 0.5f;
    s.causal = CausalAlign::kTopLeft;
    s.attn_float = true;
  });
  add("padded_key_blocks", {2, 2, 20, 100, 8, 8}, [](Spec& s) {
    s.kpm_bool = true;
    s.pad_tail = 60;
    s.tiles.k_block = 16;  // whole blocks of padding get skipped
  });
  add("alibi", {2, 4, 50, 70, 8, 8}, [](Spec& s) { s.alibi = true; });
  add("alibi_causal_three_heads", {1, 3, 40, 40, 8, 8}, [](Spec& s) {
    s.alibi = true;
    s.causal = CausalAlign::kTopLeft;
  });
  add("relative_keys", {2, 2, 37, 37, 8, 8}, [](Spec& s) { s.rel_clip = 4; });
  add("relative_keys_values", {2, 2, 45, 60, 8, 6}, [](Spec& s) {
    s.rel_clip = 3;
    s.rel_values = true;
    s.query_offset = 15;
  });
  add("relative_values_dropout_masks", {2, 2, 30, 50, 8, 8}, [](Spec& s) {
    s.rel_clip = 5;
    s.rel_values = true;
    s.dropout = 0.3f;
    s.kpm_bool = true;
    s.causal = CausalAlign::kBottomRight;
    s.extra_cols = 1;
  });
  add("sliding_window", {2, 2, 70, 70, 8, 8}, [](Spec& s) {
    s.window_left = 9;
    s.window_right = 3;
  });
  add("sliding_window_left_only_L_lt_S", {1, 2, 30, 90, 8, 8}, [](Spec& s) { s.window_left = 20; });
  add("sliding_window_causal_L_gt_S", {1, 2, 60, 40, 8, 8}, [](Spec& s) {
    s.window_left = 5;
    s.window_right = 0;
    s.causal = CausalAlign::kBottomRight;
  });
  add("block_sparse", {2, 2, 100, 100, 8, 8}, [](Spec& s) {
    s.sparse_block = 16;
    s.sparse_neighbours = 1;
  });
  add("block_sparse_globals_padding", {2, 2, 77, 77, 8, 8}, [](Spec& s) {
    s.sparse_block = 10;
    s.global_tokens = 3;
    s.kpm_bool = true;
  });
  add("value_dim_differs", {2, 2, 30, 50, 12, 5}, [](Spec& s) { s.kpm_bool = true; });
  return v;
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
                          x.masks, d, 0.5f, x.drop);
  for (std::int64_t i = 0; i < d.L * d.Dv; ++i) EXPECT_EQ(out[static_cast<std::size_t>(i)], 0.0f);  // batch 0
  for (std::int64_t i = 0; i < d.L; ++i) EXPECT_EQ(lse[static_cast<std::size_t>(i)], std::numeric_limits<float>::infinity());
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
    for (AttentionTiles tiles : {AttentionTiles{}, AttentionTiles{8, 8, TileGemm::kMicroKernel},
                                 AttentionTiles{8, 8, TileGemm::kBlas}}) {
      Spec s{"nan", d};
      s.causal = causal;
      Data x = make(s);
      x.k[static_cast<std::size_t>(5 * d.H * d.D + 2)] = std::nanf("");  // key 5, head 0, dimension 2
      std::vector<float> ref(x.g.size()), probs(static_cast<std::size_t>(d.B * d.H * d.L * d.S));
      std::vector<float> out(x.g.size(), 7.0f), lse(static_cast<std::size_t>(d.B * d.H * d.L));
      const auto q = view<const float>(x.q.data(), d, d.L, d.D), k = view<const float>(x.k.data(), d, d.S, d.D),
                 v = view<const float>(x.v.data(), d, d.S, d.Dv);
      attention_ref_forward<float>(view(ref.data(), d, d.L, d.Dv), probs.data(), q, k, v, x.masks, d, 0.5f, x.drop);
      attention_fused_forward(view(out.data(), d, d.L, d.Dv), lse.data(), q, k, v, x.masks, d, 0.5f, x.drop, tiles);
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
