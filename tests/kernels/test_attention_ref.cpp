// SPDX-License-Identifier: Apache-2.0
// The reference attention kernel against a loop-by-loop transcription of the
// definition, and its gradients against finite differences in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "multihead/core/rng.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/dropout.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close;
using test::all_close_v;
using test::numeric_grad;
using test::random_vector;

struct MaskSpec {
  bool kpm_bool = false, kpm_float = false, attn_bool = false, attn_float = false, per_head = false;
  CausalAlign causal = CausalAlign::kNone;
  std::int64_t extra_cols = 0;    // unmasked keys appended after the masked ones
  bool fully_masked_row = false;  // query 1 of every head sees nothing
  float dropout = 0.0f;
  bool alibi = false;
  std::int64_t rel_clip = -1;  // >= 0: Shaw relative positions with this clip
  bool rel_values = false;
  std::int64_t query_offset = 0;
};

// One attention problem in (B, L, H, D) layout, held in double.
struct Problem {
  AttentionDims d;
  MaskSpec spec;
  std::vector<double> q, k, v;
  std::vector<std::uint8_t> kpm_b, attn_b;
  std::vector<double> kpm_f, attn_f;
  std::vector<double> slopes, rel_k, rel_v, d_rel_k, d_rel_v;
  ScoreTerms<double> terms;  // the masks, and the positions acting on the scores
  RelativePositionGrads<double> d_relative;
  AttentionDropout drop;

  Problem(AttentionDims dims, MaskSpec s, std::uint64_t seed) : d(dims), spec(s) {
    Rng rng(seed);
    q = random_vector(d.B * d.L * d.H * d.D, rng);
    k = random_vector(d.B * d.S * d.H * d.D, rng);
    v = random_vector(d.B * d.S * d.H * d.Dv, rng);
    const std::int64_t cols = d.S - s.extra_cols;
    terms.masks.masked_cols = cols;
    terms.masks.causal = s.causal;
    if (s.kpm_bool) {
      kpm_b.resize(d.B * cols);
      for (auto& m : kpm_b) m = rng.uniform() < 0.3f;
      for (std::int64_t b = 0; b < d.B; ++b) kpm_b[b * cols] = 0;
      terms.masks.key_padding_bool = kpm_b.data();
    }
    if (s.kpm_float) {
      kpm_f = random_vector(d.B * cols, rng);
      terms.masks.key_padding_add = kpm_f.data();
    }
    const std::int64_t attn_n = (s.per_head ? d.B * d.H : 1) * d.L * cols;
    terms.masks.attn_per_head = s.per_head;
    if (s.attn_bool || s.fully_masked_row) {
      attn_b.assign(attn_n, 0);
      if (s.attn_bool)
        for (auto& m : attn_b) m = rng.uniform() < 0.3f;
      for (std::int64_t r = 0; r < attn_n / cols; ++r) attn_b[r * cols] = 0;  // keep rows alive...
      if (s.fully_masked_row)
        for (std::int64_t r = 0; r < attn_n / cols; ++r)
          if (r % d.L == 1)
            for (std::int64_t j = 0; j < cols; ++j) attn_b[r * cols + j] = 1;  // ...except query 1
      terms.masks.attn_bool = attn_b.data();
    }
    if (s.attn_float) {
      attn_f = random_vector(attn_n, rng);
      terms.masks.attn_add = attn_f.data();
    }
    drop = AttentionDropout{s.dropout, seed, 11};
    terms.positions.query_offset = s.query_offset;
    if (s.alibi) {
      for (std::int64_t h = 0; h < d.H; ++h) slopes.push_back(0.5 / static_cast<double>(h + 1));
      terms.positions.alibi_slopes = slopes.data();
    }
    if (s.rel_clip >= 0) {
      const std::int64_t nb = 2 * s.rel_clip + 1;
      rel_k = random_vector(nb * d.D, rng);
      d_rel_k.assign(rel_k.size(), 0.0);
      terms.positions.relative.rel_k = rel_k.data();
      d_relative.d_rel_k = d_rel_k.data();
      terms.positions.relative.clip = s.rel_clip;
      if (s.rel_values) {
        rel_v = random_vector(nb * d.Dv, rng);
        d_rel_v.assign(rel_v.size(), 0.0);
        terms.positions.relative.rel_v = rel_v.data();
        d_relative.d_rel_v = d_rel_v.data();
      }
    }
  }

  HeadsView<const double> view(const std::vector<double>& x, std::int64_t len, std::int64_t dim) const {
    return {x.data(), len * d.H * dim, d.H * dim, dim};
  }
  HeadsView<double> mview(std::vector<double>& x, std::int64_t len, std::int64_t dim) const {
    return {x.data(), len * d.H * dim, d.H * dim, dim};
  }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(d.D)); }

  std::vector<double> forward(std::vector<double>* probs_out = nullptr) const {
    std::vector<double> out(d.B * d.L * d.H * d.Dv), probs(d.B * d.H * d.L * d.S);
    attention_ref_forward<double>(mview(out, d.L, d.Dv), probs.data(), view(q, d.L, d.D), view(k, d.S, d.D),
                                  view(v, d.S, d.Dv), terms, d, scale(), drop);
    if (probs_out) *probs_out = probs;
    return out;
  }

  // The definition, one score at a time, with the mask rules written out.
  std::vector<double> naive_forward() const {
    std::vector<double> out(d.B * d.L * d.H * d.Dv, 0.0);
    const std::int64_t cols = d.S - spec.extra_cols;
    const double ninf = -std::numeric_limits<double>::infinity();
    for (std::int64_t b = 0; b < d.B; ++b)
      for (std::int64_t h = 0; h < d.H; ++h)
        for (std::int64_t i = 0; i < d.L; ++i) {
          std::vector<double> s(d.S);
          double mx = ninf;
          for (std::int64_t j = 0; j < d.S; ++j) {
            double dot = 0;
            for (std::int64_t e = 0; e < d.D; ++e)
              dot += q[((b * d.L + i) * d.H + h) * d.D + e] * k[((b * d.S + j) * d.H + h) * d.D + e];
            s[j] = dot * scale();
            if (j < cols) {
              std::int64_t a = ((spec.per_head ? (b * d.H + h) * d.L : 0) + i) * cols + j;
              bool masked = (spec.causal == CausalAlign::kTopLeft && j > i) ||
                            (spec.causal == CausalAlign::kBottomRight && j > i + cols - d.L) ||
                            (!kpm_b.empty() && kpm_b[b * cols + j]) || (!attn_b.empty() && attn_b[a]);
              if (!kpm_f.empty()) s[j] += kpm_f[b * cols + j];
              if (!attn_f.empty()) s[j] += attn_f[a];
              const std::int64_t rel = j - (spec.query_offset + i);  // key position relative to the query
              if (spec.alibi) s[j] -= slopes[h] * std::abs(static_cast<double>(rel));
              if (spec.rel_clip >= 0) {
                const std::int64_t c = std::clamp(rel, -spec.rel_clip, spec.rel_clip) + spec.rel_clip;
                for (std::int64_t e = 0; e < d.D; ++e)
                  s[j] += scale() * q[((b * d.L + i) * d.H + h) * d.D + e] * rel_k[c * d.D + e];
              }
              if (masked) s[j] = ninf;
            }
            mx = std::max(mx, s[j]);
          }
          if (mx == ninf) continue;  // nothing to attend to: zero row
          double sum = 0;
          for (double& x : s) sum += (x = std::exp(x - mx));
          for (std::int64_t j = 0; j < d.S; ++j) {
            double p = s[j] / sum;
            if (spec.dropout > 0) {
              std::uint64_t idx = static_cast<std::uint64_t>(((b * d.H + h) * d.L + i) * d.S + j);
              p = dropout_keep_at({drop.p, drop.seed, drop.stream}, idx) ? p / (1.0 - spec.dropout) : 0.0;
            }
            for (std::int64_t e = 0; e < d.Dv; ++e)
              out[((b * d.L + i) * d.H + h) * d.Dv + e] += p * v[((b * d.S + j) * d.H + h) * d.Dv + e];
            if (spec.rel_values && j < cols) {
              const std::int64_t c =
                  std::clamp(j - (spec.query_offset + i), -spec.rel_clip, spec.rel_clip) + spec.rel_clip;
              for (std::int64_t e = 0; e < d.Dv; ++e)
                out[((b * d.L + i) * d.H + h) * d.Dv + e] += p * rel_v[c * d.Dv + e];
            }
          }
        }
    return out;
  }
};

struct Case {
  const char* name;
  AttentionDims dims;
  MaskSpec spec;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class AttentionRef : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionRef, ForwardMatchesDefinition) {
  const Case& c = GetParam();
  Problem p(c.dims, c.spec, 17);
  EXPECT_TRUE(all_close_v(p.forward(), p.naive_forward(), 1e-12, 1e-12));
}

TEST_P(AttentionRef, GradientsMatchFiniteDifferences) {
  const Case& c = GetParam();
  Problem p(c.dims, c.spec, 23);
  const AttentionDims& d = p.d;
  Rng rng(99);
  auto G = random_vector(d.B * d.L * d.H * d.Dv, rng);
  auto loss = [&] {
    auto out = p.forward();
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * G[i];
    return s;
  };
  std::vector<double> probs;
  p.forward(&probs);
  std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  attention_ref_backward<double>(p.mview(dq, d.L, d.D), p.mview(dk, d.S, d.D), p.mview(dv, d.S, d.Dv), probs.data(),
                                 p.view(G, d.L, d.Dv), p.view(p.q, d.L, d.D), p.view(p.k, d.S, d.D),
                                 p.view(p.v, d.S, d.Dv), p.terms, d, p.scale(), p.drop, p.d_relative);
  EXPECT_TRUE(all_close_v(dq, numeric_grad(loss, p.q), test::kFdAtol, test::kFdRtol)) << "dq";
  EXPECT_TRUE(all_close_v(dk, numeric_grad(loss, p.k), test::kFdAtol, test::kFdRtol)) << "dk";
  EXPECT_TRUE(all_close_v(dv, numeric_grad(loss, p.v), test::kFdAtol, test::kFdRtol)) << "dv";
  if (!p.rel_k.empty()) {
    const std::vector<double> analytic = p.d_rel_k;
    EXPECT_TRUE(all_close_v(analytic, numeric_grad(loss, p.rel_k), test::kFdAtol, test::kFdRtol)) << "d_rel_k";
  }
  if (!p.rel_v.empty()) {
    const std::vector<double> analytic = p.d_rel_v;
    EXPECT_TRUE(all_close_v(analytic, numeric_grad(loss, p.rel_v), test::kFdAtol, test::kFdRtol)) << "d_rel_v";
  }
}

MaskSpec with(auto f) {
  MaskSpec s;
  f(s);
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Masks, AttentionRef,
    ::testing::Values(
        Case{"plain", {2, 2, 3, 4, 3, 2}, {}}, Case{"one_of_everything", {1, 1, 1, 1, 1, 1}, {}},
        Case{"kpm_bool", {2, 2, 3, 5, 2, 3}, with([](MaskSpec& s) { s.kpm_bool = true; })},
        Case{"kpm_float", {2, 2, 3, 5, 2, 2}, with([](MaskSpec& s) { s.kpm_float = true; })},
        Case{"attn_bool_2d", {2, 2, 4, 4, 2, 2}, with([](MaskSpec& s) { s.attn_bool = true; })},
        Case{"attn_float_3d", {2, 3, 3, 4, 2, 2}, with([](MaskSpec& s) { s.attn_float = s.per_head = true; })},
        Case{"all_masks", {2, 2, 3, 5, 2, 2}, with([](MaskSpec& s) {
               s.kpm_bool = s.kpm_float = s.attn_bool = s.attn_float = s.per_head = true;
             })},
        Case{"causal_top_left", {2, 2, 4, 4, 2, 2}, with([](MaskSpec& s) { s.causal = CausalAlign::kTopLeft; })},
        Case{"causal_top_left_L_lt_S", {1, 2, 3, 6, 2, 2}, with([](MaskSpec& s) { s.causal = CausalAlign::kTopLeft; })},
        Case{"causal_bottom_right_L_lt_S", {1, 2, 3, 6, 2, 2}, with([](MaskSpec& s) {
               s.causal = CausalAlign::kBottomRight;
             })},
        Case{"causal_bottom_right_L_gt_S", {1, 2, 6, 3, 2, 2}, with([](MaskSpec& s) {
               s.causal = CausalAlign::kBottomRight;
             })},
        Case{"extra_columns_unmasked", {2, 2, 3, 6, 2, 2}, with([](MaskSpec& s) {
               s.kpm_bool = s.attn_bool = true;
               s.causal = CausalAlign::kTopLeft;
               s.extra_cols = 2;
             })},
        Case{"fully_masked_row", {2, 2, 3, 4, 2, 2}, with([](MaskSpec& s) { s.fully_masked_row = true; })},
        Case{"dropout", {2, 2, 4, 5, 3, 2}, with([](MaskSpec& s) { s.dropout = 0.3f; })},
        Case{"dropout_masks_causal", {1, 2, 4, 4, 2, 3}, with([](MaskSpec& s) {
               s.dropout = 0.5f;
               s.kpm_float = true;
               s.causal = CausalAlign::kTopLeft;
             })},
        Case{"alibi", {2, 3, 4, 6, 2, 2}, with([](MaskSpec& s) {
               s.alibi = true;
               s.query_offset = 2;
             })},
        Case{"relative_keys", {2, 2, 5, 5, 3, 2}, with([](MaskSpec& s) { s.rel_clip = 2; })},
        Case{"relative_keys_values_masks", {2, 2, 4, 7, 3, 2}, with([](MaskSpec& s) {
               s.rel_clip = 1;
               s.rel_values = true;
               s.kpm_bool = true;
               s.causal = CausalAlign::kBottomRight;
               s.query_offset = 3;
               s.dropout = 0.25f;
             })},
        Case{"relative_clip_zero_extra_cols", {1, 2, 3, 5, 2, 2}, with([](MaskSpec& s) {
               s.rel_clip = 0;
               s.rel_values = true;
               s.extra_cols = 1;
             })}),
    [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

TEST(AttentionRefSemantics, FullyMaskedRowGivesZerosAndZeroGradients) {
  MaskSpec s;
  s.fully_masked_row = true;
  Problem p({1, 2, 3, 4, 2, 2}, s, 5);
  const AttentionDims& d = p.d;
  std::vector<double> probs;
  auto out = p.forward(&probs);
  for (std::int64_t h = 0; h < d.H; ++h) {
    for (std::int64_t e = 0; e < d.Dv; ++e) EXPECT_EQ(out[((0 * d.L + 1) * d.H + h) * d.Dv + e], 0.0);
    for (std::int64_t j = 0; j < d.S; ++j) EXPECT_EQ(probs[((0 * d.H + h) * d.L + 1) * d.S + j], 0.0);
  }
  std::vector<double> G(out.size(), 1.0), dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  attention_ref_backward<double>(p.mview(dq, d.L, d.D), p.mview(dk, d.S, d.D), p.mview(dv, d.S, d.Dv), probs.data(),
                                 p.view(G, d.L, d.Dv), p.view(p.q, d.L, d.D), p.view(p.k, d.S, d.D),
                                 p.view(p.v, d.S, d.Dv), p.terms, d, p.scale(), p.drop, p.d_relative);
  for (double g : dq) EXPECT_TRUE(std::isfinite(g));
  for (std::int64_t h = 0; h < d.H; ++h)
    for (std::int64_t e = 0; e < d.D; ++e) EXPECT_EQ(dq[((0 * d.L + 1) * d.H + h) * d.D + e], 0.0);
}

TEST(AttentionRefSemantics, BottomRightCausalLetsTheLastQuerySeeEveryKey) {
  AttentionDims d{1, 1, 2, 5, 1, 1};
  AttentionMasks<float> m;
  m.causal = CausalAlign::kBottomRight;
  const float ninf = -std::numeric_limits<float>::infinity();
  // Query 0 sees keys 0..3, query 1 sees 0..4.
  for (int j = 0; j < 5; ++j) EXPECT_EQ(m.bias(d, 0, 0, 0, j), j <= 3 ? 0.0f : ninf) << j;
  for (int j = 0; j < 5; ++j) EXPECT_EQ(m.bias(d, 0, 0, 1, j), 0.0f) << j;
  m.causal = CausalAlign::kTopLeft;
  for (int j = 0; j < 5; ++j) EXPECT_EQ(m.bias(d, 0, 0, 1, j), j <= 1 ? 0.0f : ninf) << j;
}

TEST(AttentionRefSemantics, WeightsAverageOverHeadsAndFollowDropout) {
  MaskSpec s;
  s.dropout = 0.25f;
  Problem p({2, 3, 4, 5, 2, 2}, s, 8);
  const AttentionDims& d = p.d;
  std::vector<double> probs;
  p.forward(&probs);
  std::vector<double> per_head(d.B * d.H * d.L * d.S), avg(d.B * d.L * d.S);
  attention_weights_from_probs(per_head.data(), probs.data(), d, false, p.drop);
  attention_weights_from_probs(avg.data(), probs.data(), d, true, p.drop);
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t e = 0; e < d.L * d.S; ++e) {
      double m = 0;
      for (std::int64_t h = 0; h < d.H; ++h) {
        std::int64_t idx = (b * d.H + h) * d.L * d.S + e;
        double want = dropout_keep_at({p.drop.p, p.drop.seed, p.drop.stream}, static_cast<std::uint64_t>(idx))
                          ? probs[idx] / (1 - s.dropout)
                          : 0.0;
        EXPECT_DOUBLE_EQ(per_head[idx], want);
        m += want / d.H;
      }
      EXPECT_NEAR(avg[b * d.L * d.S + e], m, 1e-15);
    }
}

TEST(AttentionRefSemantics, DropoutDropsTheRightFractionAndOneDropsAll) {
  AttentionDims d{4, 4, 32, 32, 2, 2};
  std::vector<double> probs(d.B * d.H * d.L * d.S, 1.0), w(probs.size());
  AttentionDropout drop{0.2f, 1, 0};
  attention_weights_from_probs(w.data(), probs.data(), d, false, drop);
  double zeros = 0;
  for (double x : w) {
    if (x == 0.0) ++zeros;
    else EXPECT_DOUBLE_EQ(x, 1.0 / (1.0 - static_cast<double>(0.2f)));
  }
  EXPECT_NEAR(zeros / w.size(), 0.2, 0.02);  // 16384 draws: standard error 0.003
  drop.p = 1.0f;
  attention_weights_from_probs(w.data(), probs.data(), d, false, drop);
  for (double x : w) EXPECT_EQ(x, 0.0);
}

}  // namespace
}  // namespace multihead
