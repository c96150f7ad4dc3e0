// SPDX-License-Identifier: Apache-2.0
// Fused attention in fp32 tiles, forward: one task per (batch, head, query
// block), an online softmax over its key tiles (attention_fused.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "multihead/core/step_profile.h"
#include "multihead/core/tensor.h"
#include "multihead/kernels/attention_bf16.h"
#include "multihead/kernels/attention_checks.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_fused.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"
#include "attention_tiles.h"
#include "simd_rows.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {

using namespace attention_tiles;

template <typename T>
void attention_fused_forward(HeadsView<T> out, float* lse, HeadsView<const T> q, HeadsView<const T> k,
                             HeadsView<const T> v, const ScoreTerms<float>& terms, const AttentionDims& d, float scale,
                             const AttentionDropout& dropout, const AttentionTiles& tiles) {
  const StepProfileScope profile(StepPart::kAttention);
  check_tiles(tiles);
  const MaskGeometry geo(terms, d);
  const std::int64_t Br = tiles.q_block, Bc = tiles.k_block;
  const std::int64_t nqb = ceil_div(d.L, Br);
  const std::int64_t tasks = d.B * d.H * nqb;
  const bool threaded = worth_threads(d);
  const TileMath tm{tiles_use_blas(tiles, d)};
  const RelativePositions<float>& rel = terms.positions.relative;
  const std::int64_t nb = rel.active() ? rel.buckets() : 0;
  // Per thread: scores (Br, Bc), output accumulator (Br, Dv), m and l (Br);
  // relative positions: key scores qa (Br, nb) and value-bucket weights wv (Br, nb).
  // The query block (Br, D), dense; 16-bit storage: also a key tile (Bc, D),
  // a value tile (Bc, Dv) and an output row (Dv), widened.
  const std::int64_t conv = Br * d.D + (kHalfStorage<T> ? Bc * (d.D + d.Dv) + d.Dv : 0);
  const std::int64_t per_thread = Br * Bc + Br * d.Dv + 2 * Br + 2 * Br * nb + conv;
  Tensor workspace = Tensor::empty({static_cast<std::int64_t>(omp_get_max_threads()) * per_thread});
  auto conv_buffers = [&](int thread) { return workspace.f32() + (thread + 1) * per_thread - conv; };
  // For the micro-kernel, packed once and shared by every query block of a
  // head: K^T key tile by key tile in panels, and V (S, Dv) dense. With few
  // queries, dot products read K in place.
  const bool few_queries = !tm.blas && d.L <= kFewQueryRows;
  const bool packs = !tm.blas && !few_queries;
  const std::int64_t kt_tile = simd::panels_size(d.D, Bc), nkt = ceil_div(d.S, Bc);
  Tensor kt_all = packs ? Tensor::empty({d.B * d.H, nkt * kt_tile}) : Tensor();
  Tensor v_all = packs ? Tensor::empty({d.B * d.H, d.S * d.Dv}) : Tensor();
  std::vector<simd::GemmB> kts(static_cast<std::size_t>(packs ? d.B * d.H * nkt : 0));  // (B*H, key tiles)
  if (packs) {
#pragma omp parallel for schedule(static) if (threaded)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
      const std::int64_t b = bh / d.H, h = bh % d.H;
      float* kbuf = conv_buffers(omp_get_thread_num()) + Br * d.D;  // (Bc, D)
      for (std::int64_t j0 = 0; j0 < d.S; j0 += Bc) {
        const std::int64_t nc = std::min(Bc, d.S - j0);
        std::int64_t ldk = 0;
        const float* kj = rows_as_f32(k.at(b, h) + j0 * k.row_stride, k.row_stride, nc, d.D, kbuf, ldk);
        const std::int64_t t = bh * nkt + j0 / Bc;
        kts[static_cast<std::size_t>(t)] = tm.pack_t(kt_all.f32() + t * kt_tile, kj, ldk, nc, d.D);
      }
      dense_rows_f32(v_all.f32() + bh * d.S * d.Dv, v.at(b, h), v.row_stride, d.S, d.Dv);
    }
  }

#pragma omp parallel if (threaded)
  {
    float* s = workspace.f32() + omp_get_thread_num() * per_thread;  // (Br, Bc)
    float* acc = s + Br * Bc;                                        // (Br, Dv)
    float* m = acc + Br * d.Dv;                                      // (Br)
    float* l = m + Br;                                               // (Br)
    float* qa = l + Br;                                              // (Br, nb)
    float* wv = qa + Br * nb;                                        // (Br, nb)
    float* qbuf = conv_buffers(omp_get_thread_num());                // (Br, D)
    float* kbuf = qbuf + Br * d.D;                                   // 16-bit storage: (Bc, D)
    float* vbuf = kbuf + Bc * d.D;                                   // (Bc, Dv)
    float* orow = vbuf + Bc * d.Dv;                                  // (Dv)
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      const std::int64_t bh = t / nqb, b = bh / d.H, h = bh % d.H;
      const std::int64_t i0 = (t % nqb) * Br, nr = std::min(Br, d.L - i0);
      // The micro-kernel reads the query block dense: Q's rows inside the
      // (B, L, 3E) projection are kilobytes apart, fall on a few L1 sets and
      // evict each other, and Q K^T ran about a quarter slower at head
      // dimension 32.
      std::int64_t ldq = d.D;
      const float* qi = qbuf;
      if (packs) dense_rows_f32(qbuf, q.at(b, h) + i0 * q.row_stride, q.row_stride, nr, d.D);
      else qi = rows_as_f32(q.at(b, h) + i0 * q.row_stride, q.row_stride, nr, d.D, qbuf, ldq);
      std::fill(m, m + nr, -kInf);
      std::fill(l, l + nr, 0.0f);
      std::fill(acc, acc + nr * d.Dv, 0.0f);
      if (rel.active()) {
        relative_scores(qa, qi, ldq, nr, d.D, rel, scale);
        std::fill(wv, wv + nr * nb, 0.0f);
      }
      for (std::int64_t j0 = 0; j0 < d.S; j0 += Bc) {
        const std::int64_t nc_block = std::min(Bc, d.S - j0);
        const TilePlan plan = geo.plan(b, i0, nr, j0, nc_block);
        if (plan.skip) continue;
        // Only the causally visible rows and columns of the tile: the rest is -inf.
        const auto [r0, nc] = geo.causal_span(i0, nr, j0, nc_block);
        const simd::GemmB kt = packs ? kts[static_cast<std::size_t>(bh * nkt + j0 / Bc)] : simd::GemmB{};
        std::int64_t ldk = 0, ldv = 0;  // the micro-kernel reads K^T from kt instead of K's rows
        const float* kj =
            packs ? nullptr : rows_as_f32(k.at(b, h) + j0 * k.row_stride, k.row_stride, nc, d.D, kbuf, ldk);
        if (few_queries) dot_scores(s + r0 * Bc, Bc, qi + r0 * ldq, ldq, kj, ldk, nr - r0, nc, d.D, scale);
        else tm.q_kt(s + r0 * Bc, Bc, qi + r0 * ldq, ldq, kj, ldk, kt, nr - r0, nc, d.D, scale);
        if (plan.elementwise) geo.apply(s + r0 * Bc, Bc, b, h, i0 + r0, nr - r0, j0, nc, qa + r0 * nb);
        for (std::int64_t r = r0; r < nr; ++r) {
          float* row = s + r * Bc;
          if (!online_softmax_run(row, nc, 1.0f, m[r], l[r], acc + r * d.Dv, d.Dv, wv + r * nb, rel.rel_v ? nb : 0,
                                  false))
            continue;  // nothing visible yet in this row
          if (dropout.active()) apply_dropout_row(row, row, nc, d, b, h, i0 + r, j0, dropout, KeepBits::kRecord);
          if (rel.rel_v)
            bucket_sums(wv + r * nb, row, std::min(j0 + nc, geo.cols) - j0, j0, terms.positions.query_offset + i0 + r,
                        rel);
        }
        const float* vj = packs ? v_all.f32() + (bh * d.S + j0) * d.Dv
                                : rows_as_f32(v.at(b, h) + j0 * v.row_stride, v.row_stride, nc, d.Dv, vbuf, ldv);
        if (packs) ldv = d.Dv;
        tm.ab(acc + r0 * d.Dv, d.Dv, s + r0 * Bc, Bc, vj, ldv, nr - r0, d.Dv, nc, 1.0f, true);
      }
      float* lse_bh = lse + bh * d.L + i0;
      for (std::int64_t r = 0; r < nr; ++r) {
        T* dst = out.at(b, h) + (i0 + r) * out.row_stride;
        float* o = orow;
        if constexpr (!kHalfStorage<T>) o = dst;
        lse_bh[r] = finish_row(o, acc + r * d.Dv, wv + r * nb, m[r], l[r], rel, nb, d.Dv);
        if constexpr (kHalfStorage<T>) narrow(dst, o, d.Dv);
      }
    }
  }
}

// One function for each element type: HWY_EXPORT takes no templates.
void attention_fused_forward_f32(HeadsView<float> out, float* lse, HeadsView<const float> q, HeadsView<const float> k,
                                 HeadsView<const float> v, const ScoreTerms<float>& terms, const AttentionDims& d,
                                 float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  HWY_NAMESPACE::attention_fused_forward<float>(out, lse, q, k, v, terms, d, scale, dropout, tiles);
}
void attention_fused_forward_bf16(HeadsView<BF16> out, float* lse, HeadsView<const BF16> q, HeadsView<const BF16> k,
                                  HeadsView<const BF16> v, const ScoreTerms<float>& terms, const AttentionDims& d,
                                  float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  HWY_NAMESPACE::attention_fused_forward<BF16>(out, lse, q, k, v, terms, d, scale, dropout, tiles);
}
void attention_fused_forward_f16(HeadsView<F16> out, float* lse, HeadsView<const F16> q, HeadsView<const F16> k,
                                 HeadsView<const F16> v, const ScoreTerms<float>& terms, const AttentionDims& d,
                                 float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  HWY_NAMESPACE::attention_fused_forward<F16>(out, lse, q, k, v, terms, d, scale, dropout, tiles);
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(attention_fused_forward_f32);
HWY_EXPORT(attention_fused_forward_bf16);
HWY_EXPORT(attention_fused_forward_f16);

template <typename T>
void attention_fused_forward(HeadsView<T> out, float* lse, HeadsView<const T> q, HeadsView<const T> k,
                             HeadsView<const T> v, const ScoreTerms<float>& terms, const AttentionDims& d, float scale,
                             const AttentionDropout& dropout, const AttentionTiles& tiles) {
  check_attention_dims(d, true);
  check_attention_views(d, out, q, k, v);
  for_element_type<T>(MULTIHEAD_DISPATCH(attention_fused_forward_f32), MULTIHEAD_DISPATCH(attention_fused_forward_bf16),
                      MULTIHEAD_DISPATCH(attention_fused_forward_f16))(out, lse, q, k, v, terms, d, scale, dropout,
                                                                       tiles);
}

template void attention_fused_forward<float>(HeadsView<float>, float*, HeadsView<const float>, HeadsView<const float>,
                                             HeadsView<const float>, const ScoreTerms<float>&, const AttentionDims&,
                                             float, const AttentionDropout&, const AttentionTiles&);
template void attention_fused_forward<BF16>(HeadsView<BF16>, float*, HeadsView<const BF16>, HeadsView<const BF16>,
                                            HeadsView<const BF16>, const ScoreTerms<float>&, const AttentionDims&,
                                            float, const AttentionDropout&, const AttentionTiles&);
template void attention_fused_forward<F16>(HeadsView<F16>, float*, HeadsView<const F16>, HeadsView<const F16>,
                                           HeadsView<const F16>, const ScoreTerms<float>&, const AttentionDims&, float,
                                           const AttentionDropout&, const AttentionTiles&);

}  // namespace multihead
#endif  // HWY_ONCE
