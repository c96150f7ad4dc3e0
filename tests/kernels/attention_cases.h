// SPDX-License-Identifier: Apache-2.0
// The attention kernels' test cases: sizes, every mask kind, positions,
// sparse patterns and dropout, with random data; shared by the fused fp32
// and bf16 kernels' tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "multihead/core/rng.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/positions.h"

namespace multihead::test {

struct Spec {
  std::string name;
  AttentionDims d;
  bool kpm_bool = false, kpm_float = false, attn_bool = false, attn_float = false, per_head = false;
  CausalAlign causal = CausalAlign::kNone;
  std::int64_t extra_cols = 0;
  bool fully_masked = false;  // query 0 sees nothing; batch 0 has no keys at all when kpm_bool
  std::int64_t pad_tail = 0;  // the last pad_tail keys of batch element 1 are padding
  std::int64_t pad_head = 0;  // the first pad_head keys of batch element 0 are padding
  bool alibi = false;
  std::int64_t rel_clip = -1;  // >= 0: Shaw relative positions
  bool rel_values = false;
  std::int64_t query_offset = 0;
  std::int64_t window_left = -1, window_right = -1, sparse_block = 0, sparse_neighbours = 0, global_tokens = 0;
  float dropout = 0.0f;
  AttentionTiles tiles{};
};

inline void PrintTo(const Spec& s, std::ostream* os) { *os << s.name; }

struct Data {
  std::vector<float> q, k, v, g;
  std::vector<std::uint8_t> kpm_b, attn_b;
  std::vector<float> kpm_f, attn_f, slopes, rel_k, rel_v;
  ScoreTerms<float> terms;  // the masks, and the positions acting on the scores
  AttentionDropout drop;
};

inline Data make(const Spec& s) {
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
  x.terms.masks.masked_cols = cols;
  x.terms.masks.causal = s.causal;
  x.terms.masks.attn_per_head = s.per_head;
  if (s.kpm_bool) {
    x.kpm_b.resize(static_cast<std::size_t>(d.B * cols));
    for (auto& m : x.kpm_b) m = rng.uniform() < 0.3f;
    if (s.fully_masked) std::fill_n(x.kpm_b.begin(), cols, 1);  // batch 0: every key padded
    if (s.pad_tail > 0) std::fill_n(x.kpm_b.begin() + 2 * cols - s.pad_tail, s.pad_tail, 1);
    std::fill_n(x.kpm_b.begin(), s.pad_head, 1);
    x.terms.masks.key_padding_bool = x.kpm_b.data();
  }
  if (s.kpm_float) {
    x.kpm_f = vec(d.B * cols);
    x.terms.masks.key_padding_add = x.kpm_f.data();
  }
  const std::int64_t rows = (s.per_head ? d.B * d.H : 1) * d.L;
  if (s.attn_bool || s.fully_masked) {
    x.attn_b.assign(static_cast<std::size_t>(rows * cols), 0);
    if (s.attn_bool)
      for (auto& m : x.attn_b) m = rng.uniform() < 0.3f;
    if (s.fully_masked)
      for (std::int64_t r = 0; r < rows; r += d.L) std::fill_n(x.attn_b.begin() + r * cols, cols, 1);
    x.terms.masks.attn_bool = x.attn_b.data();
  }
  if (s.attn_float) {
    x.attn_f = vec(rows * cols);
    if (s.fully_masked)  // a float -inf row masks too
      std::fill_n(x.attn_f.begin() + (d.L - 1) * cols, cols, -std::numeric_limits<float>::infinity());
    x.terms.masks.attn_add = x.attn_f.data();
  }
  x.drop = AttentionDropout{s.dropout, 99, 3};
  x.terms.positions.query_offset = s.query_offset;
  x.terms.masks.window_left = s.window_left;
  x.terms.masks.window_right = s.window_right;
  x.terms.masks.sparse_block = s.sparse_block;
  x.terms.masks.sparse_neighbours = s.sparse_neighbours;
  x.terms.masks.global_tokens = s.global_tokens;
  if (s.alibi) {
    x.slopes = alibi_slopes(d.H);
    x.terms.positions.alibi_slopes = x.slopes.data();
  }
  if (s.rel_clip >= 0) {
    x.rel_k = vec((2 * s.rel_clip + 1) * d.D);
    x.terms.positions.relative.rel_k = x.rel_k.data();
    x.terms.positions.relative.clip = s.rel_clip;
    if (s.rel_values) {
      x.rel_v = vec((2 * s.rel_clip + 1) * d.Dv);
      x.terms.positions.relative.rel_v = x.rel_v.data();
    }
  }
  return x;
}

template <typename T>
HeadsView<T> view(T* p, const AttentionDims& d, std::int64_t len, std::int64_t dim) {
  return {p, len * d.H * dim, d.H * dim, dim};
}

inline std::vector<Spec> specs() {
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
  add("fully_masked_rows", {2, 2, 20, 45, 8, 8}, [](Spec& s) { s.fully_masked = s.kpm_bool = s.attn_float = true; });
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
  // Few queries over many keys, as in cached decoding (the forward kernel's dot-product scores).
  add("few_queries_decoding", {2, 2, 1, 70, 16, 16}, [](Spec& s) {
    s.causal = CausalAlign::kBottomRight;
    s.kpm_bool = true;
    s.query_offset = 69;
    s.alibi = true;
  });
  add("few_queries_relative", {3, 2, 3, 45, 16, 12}, [](Spec& s) {
    s.rel_clip = 4;
    s.rel_values = true;
    s.kpm_float = true;
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
  // Over a thousand keys, off the 32-key grid: the bf16 kernel's products
  // against K and V themselves then run on AMX tiles too.
  add("long_keys", {1, 2, 40, 1100, 64, 32}, [](Spec&) {});
  add("long_keys_float_mask", {1, 2, 40, 1100, 32, 32}, [](Spec& s) { s.kpm_float = true; });
  add("long_keys_causal_dropout", {1, 2, 40, 1100, 32, 64}, [](Spec& s) {
    s.causal = CausalAlign::kBottomRight;
    s.dropout = 0.2f;
  });
  // The bf16 backward takes long key ranges in runs: relative positions'
  // bucket sums and elementwise masks across runs, and key tiles that do
  // not divide a run. Relative distances unclipped: a clipped bucket would
  // sum dS over a thousand keys, where the sum nearly cancels and bf16's
  // rounding, not the kernel, sets the error.
  add("long_keys_relative_masks_dropout", {1, 2, 24, 1100, 16, 16}, [](Spec& s) {
    s.rel_clip = 1100;
    s.rel_values = true;
    s.kpm_bool = true;
    s.dropout = 0.1f;
  });
  // Every query's first 700 keys padded: the kernels' running softmax
  // starts at a later key tile or run, and dropout's masks with it.
  add("long_keys_late_start", {1, 2, 40, 1100, 32, 32}, [](Spec& s) {
    s.kpm_bool = true;
    s.pad_head = 700;
    s.attn_float = true;
    s.dropout = 0.1f;
  });
  add("long_keys_odd_tiles", {1, 1, 20, 1100, 8, 8}, [](Spec& s) {
    s.tiles = AttentionTiles{16, 96, TileGemm::kMicroKernel};
    s.attn_float = true;
  });
  return v;
}

// The reference kernel's results on a case: output, weights (B, H, L, S)
// and every gradient, relative-position ones included.
struct Reference {
  std::vector<float> out, probs, dq, dk, dv, drk, drv;
};

inline Reference reference(const Spec& s, const Data& x, float scale) {
  const AttentionDims& d = s.d;
  auto cv = [&](const std::vector<float>& v, std::int64_t len, std::int64_t dim) {
    return view<const float>(v.data(), d, len, dim);
  };
  Reference r;
  r.out.resize(x.g.size());
  r.probs.resize(static_cast<std::size_t>(d.B * d.H * d.L * d.S));
  attention_ref_forward<float>(view(r.out.data(), d, d.L, d.Dv), r.probs.data(), cv(x.q, d.L, d.D), cv(x.k, d.S, d.D),
                               cv(x.v, d.S, d.Dv), x.terms, d, scale, x.drop);
  r.drk.resize(x.rel_k.size()), r.drv.resize(x.rel_v.size());
  r.dq.resize(x.q.size()), r.dk.resize(x.k.size()), r.dv.resize(x.v.size());
  attention_ref_backward<float>(view(r.dq.data(), d, d.L, d.D), view(r.dk.data(), d, d.S, d.D),
                                view(r.dv.data(), d, d.S, d.Dv), r.probs.data(), cv(x.g, d.L, d.Dv), cv(x.q, d.L, d.D),
                                cv(x.k, d.S, d.D), cv(x.v, d.S, d.Dv), x.terms, d, scale, x.drop,
                                {r.drk.data(), r.drv.data()});
  return r;
}

// Room for a case's dropout keep bits (AttentionDropout::keep_bits), filled
// with a pattern: a bit the backward reads but the forward did not write
// then shows in the gradients.
inline std::vector<std::uint64_t> keep_bits(const AttentionDims& d) {
  return std::vector<std::uint64_t>(static_cast<std::size_t>(d.B * d.H * d.L * AttentionDropout::keep_words(d.S)),
                                    0xA5A5A5A5A5A5A5A5ull);
}

// The same values bit for bit (NaN included).
template <typename T>
::testing::AssertionResult same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size();
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << "element " << i << " differs";
  return ::testing::AssertionSuccess();
}

// Named results of two runs, each the same bit for bit.
struct SameResult {
  const char* what;
  const std::vector<float>& got;
  const std::vector<float>& want;
};
inline void expect_same_bits(std::initializer_list<SameResult> results) {
  for (const SameResult& r : results) EXPECT_TRUE(same_bits(r.got, r.want)) << r.what;
}

}  // namespace multihead::test
