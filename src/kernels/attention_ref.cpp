// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/attention_ref.h"

#include <type_traits>
#include <vector>

#include "multihead/core/rng.h"
#include "multihead/core/step_profile.h"
#include "multihead/kernels/attention_checks.h"
#include "multihead/kernels/dropout.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/softmax.h"

namespace multihead {
namespace {

// In place: p (L, S) of head (b, h) becomes dropout(p).
template <typename T>
void apply_dropout(T* p, const AttentionDims& d, std::int64_t b, std::int64_t h, const AttentionDropout& drop) {
  dropout_inplace(p, d.L * d.S, static_cast<std::uint64_t>((b * d.H + h) * d.L * d.S),
                  DropoutSpec{drop.p, drop.seed, drop.stream});
}

// The weights that multiplied V for head (b, h): p itself, or dropout(p) in buf.
template <typename T>
const T* dropped_probs(const T* p, std::vector<T>& buf, const AttentionDims& d, std::int64_t b, std::int64_t h,
                       const AttentionDropout& drop) {
  if (!drop.active()) return p;
  buf.assign(p, p + d.L * d.S);
  apply_dropout(buf.data(), d, b, h, drop);
  return buf.data();
}

template <typename T>
T dot_n(const T* a, const T* b, std::int64_t n) {
  T s = T(0);
  for (std::int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

}  // namespace

template <typename T>
void attention_ref_forward(HeadsView<T> out, T* probs, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                           const ScoreTerms<std::type_identity_t<T>>& terms, const AttentionDims& d, T scale,
                           const AttentionDropout& dropout) {
  check_attention_dims(d, std::is_same_v<T, float>);
  check_attention_views(d, out, q, k, v);
  const StepProfileScope profile(StepPart::kAttention);
  std::vector<T> dropped;
  const RelativePositions<T>& rel = terms.positions.relative;
  const std::int64_t cols = terms.masks.masked_cols < 0 ? d.S : terms.masks.masked_cols;
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t h = 0; h < d.H; ++h) {
      T* p = probs + (b * d.H + h) * d.L * d.S;  // (L, S)
      // p = scale * q k^T
      gemm(Trans::kNo, Trans::kYes, d.L, d.S, d.D, scale, q.at(b, h), q.row_stride, k.at(b, h), k.row_stride, T(0), p,
           d.S);
      for (std::int64_t i = 0; i < d.L; ++i) {
        T* row = p + i * d.S;
        for (std::int64_t j = 0; j < d.S; ++j) row[j] += terms.bias(d, b, h, i, j);
        if (rel.active())
          for (std::int64_t j = 0; j < cols; ++j)
            row[j] += scale * dot_n(q.at(b, h) + i * q.row_stride,
                                    rel.rel_k + rel.bucket(terms.positions.query_offset + i, j) * d.D, d.D);
        softmax_row(row, d.S);
      }
      const T* pv = dropped_probs<T>(p, dropped, d, b, h, dropout);
      gemm(Trans::kNo, Trans::kNo, d.L, d.Dv, d.S, T(1), pv, d.S, v.at(b, h), v.row_stride, T(0), out.at(b, h),
           out.row_stride);
      if (rel.rel_v)
        for (std::int64_t i = 0; i < d.L; ++i) {
          T* o = out.at(b, h) + i * out.row_stride;
          for (std::int64_t j = 0; j < cols; ++j) {
            const T* rv = rel.rel_v + rel.bucket(terms.positions.query_offset + i, j) * d.Dv;
            for (std::int64_t e = 0; e < d.Dv; ++e) o[e] += pv[i * d.S + j] * rv[e];
          }
        }
    }
  }
}

template <typename T>
void attention_ref_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, const T* probs, HeadsView<const T> dout,
                            HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                            const ScoreTerms<std::type_identity_t<T>>& terms, const AttentionDims& d, T scale,
                            const AttentionDropout& dropout,
                            const RelativePositionGrads<std::type_identity_t<T>>& d_relative) {
  check_attention_dims(d, std::is_same_v<T, float>);
  check_heads_view("dout", dout, d.B * d.L, d.Dv);
  check_heads_view("query", q, d.B * d.L, d.D);
  check_heads_view("key", k, d.B * d.S, d.D);
  check_heads_view("value", v, d.B * d.S, d.Dv);
  check_heads_view("dq", dq, d.B * d.L, d.D);
  check_heads_view("dk", dk, d.B * d.S, d.D);
  check_heads_view("dv", dv, d.B * d.S, d.Dv);
  const StepProfileScope profile(StepPart::kAttention);
  std::vector<T> dp(static_cast<std::size_t>(d.L * d.S));
  std::vector<T> dropped;
  const RelativePositions<T>& rel = terms.positions.relative;
  const std::int64_t cols = terms.masks.masked_cols < 0 ? d.S : terms.masks.masked_cols;
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t h = 0; h < d.H; ++h) {
      const T* p = probs + (b * d.H + h) * d.L * d.S;             // (L, S)
      const T* pv = dropped_probs(p, dropped, d, b, h, dropout);  // what multiplied V
      // dV (S, Dv) = dropout(P)^T dO
      gemm(Trans::kYes, Trans::kNo, d.S, d.Dv, d.L, T(1), pv, d.S, dout.at(b, h), dout.row_stride, T(0), dv.at(b, h),
           dv.row_stride);
      // d dropout(P) (L, S) = dO V^T, then through the dropout mask: a dropped
      // weight (pv == 0 while p != 0) passes no gradient, a kept one gets * ks.
      gemm(Trans::kNo, Trans::kYes, d.L, d.S, d.Dv, T(1), dout.at(b, h), dout.row_stride, v.at(b, h), v.row_stride,
           T(0), dp.data(), d.S);
      if (rel.rel_v)  // out_i also held sum_j pv_ij rel_v[c]
        for (std::int64_t i = 0; i < d.L; ++i) {
          const T* go = dout.at(b, h) + i * dout.row_stride;
          for (std::int64_t j = 0; j < cols; ++j) {
            const std::int64_t c = rel.bucket(terms.positions.query_offset + i, j);
            dp[static_cast<std::size_t>(i * d.S + j)] += dot_n(go, rel.rel_v + c * d.Dv, d.Dv);
            if (d_relative.d_rel_v)
              for (std::int64_t e = 0; e < d.Dv; ++e) d_relative.d_rel_v[c * d.Dv + e] += pv[i * d.S + j] * go[e];
          }
        }
      if (dropout.active()) apply_dropout(dp.data(), d, b, h, dropout);
      // dS = P * (dP - rowsum(P * dP)), in place in dp.
      for (std::int64_t i = 0; i < d.L; ++i)
        softmax_row_backward(dp.data() + i * d.S, p + i * d.S, dp.data() + i * d.S, d.S);
      // dQ (L, D) = scale * dS K;  dK (S, D) = scale * dS^T Q
      gemm(Trans::kNo, Trans::kNo, d.L, d.D, d.S, scale, dp.data(), d.S, k.at(b, h), k.row_stride, T(0), dq.at(b, h),
           dq.row_stride);
      gemm(Trans::kYes, Trans::kNo, d.S, d.D, d.L, scale, dp.data(), d.S, q.at(b, h), q.row_stride, T(0), dk.at(b, h),
           dk.row_stride);
      if (rel.active())  // score_ij also held scale * q_i . rel_k[c]
        for (std::int64_t i = 0; i < d.L; ++i) {
          T* gq = dq.at(b, h) + i * dq.row_stride;
          const T* qi = q.at(b, h) + i * q.row_stride;
          for (std::int64_t j = 0; j < cols; ++j) {
            const std::int64_t c = rel.bucket(terms.positions.query_offset + i, j);
            const T g = scale * dp[static_cast<std::size_t>(i * d.S + j)];
            for (std::int64_t e = 0; e < d.D; ++e) gq[e] += g * rel.rel_k[c * d.D + e];
            if (d_relative.d_rel_k)
              for (std::int64_t e = 0; e < d.D; ++e) d_relative.d_rel_k[c * d.D + e] += g * qi[e];
          }
        }
    }
  }
}

template <typename T>
void attention_weights_from_probs(T* weights, const T* probs, const AttentionDims& d, bool average_heads,
                                  const AttentionDropout& dropout) {
  const std::int64_t ls = d.L * d.S;
  std::vector<T> dropped;
  if (average_heads)
    for (std::int64_t e = 0; e < d.B * ls; ++e) weights[e] = T(0);
  const T inv_h = T(1) / static_cast<T>(d.H);
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t h = 0; h < d.H; ++h) {
      const T* head = dropped_probs(probs + (b * d.H + h) * ls, dropped, d, b, h, dropout);
      if (average_heads) {
        T* w = weights + b * ls;
        for (std::int64_t e = 0; e < ls; ++e) w[e] += head[e] * inv_h;
      } else {
        std::copy(head, head + ls, weights + (b * d.H + h) * ls);
      }
    }
  }
}

// A type argument cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define MULTIHEAD_INSTANTIATE(T)                                                                                       \
  template void attention_ref_forward<T>(HeadsView<T>, T*, HeadsView<const T>, HeadsView<const T>, HeadsView<const T>, \
                                         const ScoreTerms<T>&, const AttentionDims&, T, const AttentionDropout&);      \
  template void attention_ref_backward<T>(HeadsView<T>, HeadsView<T>, HeadsView<T>, const T*, HeadsView<const T>,      \
                                          HeadsView<const T>, HeadsView<const T>, HeadsView<const T>,                  \
                                          const ScoreTerms<T>&, const AttentionDims&, T, const AttentionDropout&,      \
                                          const RelativePositionGrads<T>&);                                            \
  template void attention_weights_from_probs<T>(T*, const T*, const AttentionDims&, bool, const AttentionDropout&);
// NOLINTEND(bugprone-macro-parentheses)
MULTIHEAD_INSTANTIATE(float)
MULTIHEAD_INSTANTIATE(double)
#undef MULTIHEAD_INSTANTIATE

}  // namespace multihead
