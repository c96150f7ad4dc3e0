// SPDX-License-Identifier: Apache-2.0
// The attention weights nn.MultiheadAttention returns, recomputed tile by
// tile from the fused forward's lse (attention_fused.h).
#include <omp.h>

#include <algorithm>

#include "multihead/kernels/attention_checks.h"
#include "multihead/core/tensor.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/half.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_fused_weights.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"
#include "attention_tiles.h"
#include "simd_rows.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {

using namespace attention_tiles;

template <typename T>
void attention_fused_weights(float* weights, bool average_heads, const float* lse, HeadsView<const T> q,
                             HeadsView<const T> k, const ScoreTerms<float>& terms, const AttentionDims& d, float scale,
                             const AttentionDropout& dropout, const AttentionTiles& tiles) {
  check_tiles(tiles);
  const MaskGeometry geo(terms, d);
  const std::int64_t Br = tiles.q_block, Bc = tiles.k_block;
  const std::int64_t nqb = ceil_div(d.L, Br);
  const TileMath tm{tiles_use_blas(tiles, d)};
  const RelativePositions<float>& rel = terms.positions.relative;
  const std::int64_t nb = rel.active() ? rel.buckets() : 0;
  // P (Br, Bc), K^T (D, Bc) in panels, qa (Br, nb); 16-bit storage: a query
  // block (Br, D) and a key tile (Bc, D), widened.
  const std::int64_t per_thread =
      Br * Bc + simd::panels_size(d.D, Bc) + Br * nb + (kHalfStorage<T> ? (Br + Bc) * d.D : 0);
  Tensor workspace = Tensor::empty({static_cast<std::int64_t>(omp_get_max_threads()) * per_thread});
  const float inv_h = 1.0f / static_cast<float>(d.H);

  // Tasks own (batch, query block) so head averaging writes disjoint rows.
#pragma omp parallel
  {
    float* p = workspace.f32() + omp_get_thread_num() * per_thread;  // (Br, Bc)
    float* kt = p + Br * Bc;                                         // K^T (D, Bc) in panels
    float* qa = kt + simd::panels_size(d.D, Bc);                     // (Br, nb)
    float* qbuf = qa + Br * nb;                                      // (Br, D)
    float* kbuf = qbuf + Br * d.D;                                   // (Bc, D)
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < d.B * nqb; ++t) {
      const std::int64_t b = t / nqb, i0 = (t % nqb) * Br, nr = std::min(Br, d.L - i0);
      if (average_heads)
        for (std::int64_t r = 0; r < nr; ++r) std::fill_n(weights + (b * d.L + i0 + r) * d.S, d.S, 0.0f);
      for (std::int64_t h = 0; h < d.H; ++h) {
        const float* lse_bh = lse + (b * d.H + h) * d.L;
        std::int64_t ldq = 0, ldk = 0;
        const float* qi = rows_as_f32(q.at(b, h) + i0 * q.row_stride, q.row_stride, nr, d.D, qbuf, ldq);
        // Relative-position terms depend only on the query rows, so one pass serves every key tile.
        if (rel.active()) relative_scores(qa, qi, ldq, nr, d.D, rel, scale);
        for (std::int64_t j0 = 0; j0 < d.S; j0 += Bc) {
          const std::int64_t nc = std::min(Bc, d.S - j0);
          const TilePlan plan = geo.plan(b, i0, nr, j0, nc);
          for (std::int64_t r = 0; r < nr; ++r) {
            float* w = average_heads ? weights + (b * d.L + i0 + r) * d.S + j0
                                     : weights + ((b * d.H + h) * d.L + i0 + r) * d.S + j0;
            if (plan.skip && !average_heads) std::fill_n(w, nc, 0.0f);
          }
          if (plan.skip) continue;
          const float* kj = rows_as_f32(k.at(b, h) + j0 * k.row_stride, k.row_stride, nc, d.D, kbuf, ldk);
          tm.q_kt(p, Bc, qi, ldq, kj, ldk, tm.pack_t(kt, kj, ldk, nc, d.D), nr, nc, d.D, scale);
          if (plan.elementwise) geo.apply(p, Bc, b, h, i0, nr, j0, nc, qa);
          for (std::int64_t r = 0; r < nr; ++r) {
            float* row = p + r * Bc;
            simd::exp_shift_sum(row, nc, lse_bh[i0 + r]);
            if (dropout.active()) apply_dropout_row(row, row, nc, d, b, h, i0 + r, j0, dropout, KeepBits::kIgnore);
            if (average_heads) {
              float* w = weights + (b * d.L + i0 + r) * d.S + j0;
              for (std::int64_t c = 0; c < nc; ++c) w[c] += row[c] * inv_h;
            } else {
              std::copy_n(row, nc, weights + ((b * d.H + h) * d.L + i0 + r) * d.S + j0);
            }
          }
        }
      }
    }
  }
}

// One function for each element type: HWY_EXPORT takes no templates.
void attention_fused_weights_f32(float* weights, bool average_heads, const float* lse, HeadsView<const float> q,
                                 HeadsView<const float> k, const ScoreTerms<float>& terms, const AttentionDims& d,
                                 float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  HWY_NAMESPACE::attention_fused_weights<float>(weights, average_heads, lse, q, k, terms, d, scale, dropout, tiles);
}
void attention_fused_weights_bf16(float* weights, bool average_heads, const float* lse, HeadsView<const BF16> q,
                                  HeadsView<const BF16> k, const ScoreTerms<float>& terms, const AttentionDims& d,
                                  float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  HWY_NAMESPACE::attention_fused_weights<BF16>(weights, average_heads, lse, q, k, terms, d, scale, dropout, tiles);
}
void attention_fused_weights_f16(float* weights, bool average_heads, const float* lse, HeadsView<const F16> q,
                                 HeadsView<const F16> k, const ScoreTerms<float>& terms, const AttentionDims& d,
                                 float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  HWY_NAMESPACE::attention_fused_weights<F16>(weights, average_heads, lse, q, k, terms, d, scale, dropout, tiles);
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(attention_fused_weights_f32);
HWY_EXPORT(attention_fused_weights_bf16);
HWY_EXPORT(attention_fused_weights_f16);

template <typename T>
void attention_fused_weights(float* weights, bool average_heads, const float* lse, HeadsView<const T> q,
                             HeadsView<const T> k, const ScoreTerms<float>& terms, const AttentionDims& d, float scale,
                             const AttentionDropout& dropout, const AttentionTiles& tiles) {
  check_attention_dims(d, true);
  check_heads_view("query", q, d.B * d.L, d.D);
  check_heads_view("key", k, d.B * d.S, d.D);
  for_element_type<T>(MULTIHEAD_DISPATCH(attention_fused_weights_f32), MULTIHEAD_DISPATCH(attention_fused_weights_bf16),
                      MULTIHEAD_DISPATCH(attention_fused_weights_f16))(weights, average_heads, lse, q, k, terms, d,
                                                                       scale, dropout, tiles);
}

template void attention_fused_weights<float>(float*, bool, const float*, HeadsView<const float>, HeadsView<const float>,
                                             const ScoreTerms<float>&, const AttentionDims&, float,
                                             const AttentionDropout&, const AttentionTiles&);
template void attention_fused_weights<BF16>(float*, bool, const float*, HeadsView<const BF16>, HeadsView<const BF16>,
                                            const ScoreTerms<float>&, const AttentionDims&, float,
                                            const AttentionDropout&, const AttentionTiles&);
template void attention_fused_weights<F16>(float*, bool, const float*, HeadsView<const F16>, HeadsView<const F16>,
                                           const ScoreTerms<float>&, const AttentionDims&, float,
                                           const AttentionDropout&, const AttentionTiles&);

}  // namespace multihead
#endif  // HWY_ONCE
