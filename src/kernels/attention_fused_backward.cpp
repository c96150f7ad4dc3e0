// SPDX-License-Identifier: Apache-2.0
// Fused attention in fp32 tiles, backward: one task per (batch, head), the
// weights of each tile recomputed from the saved lse (attention_fused.h).
#include <omp.h>

#include <algorithm>

#include "multihead/core/step_profile.h"
#include "multihead/core/tensor.h"
#include "multihead/kernels/attention_bf16.h"
#include "multihead/kernels/attention_checks.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_fused_backward.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"
#include "attention_tiles.h"
#include "simd_rows.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {

using namespace attention_tiles;

template <typename T>
void attention_fused_backward(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                              HeadsView<const T> out, HeadsView<const float> dout, HeadsView<const T> q,
                              HeadsView<const T> k, HeadsView<const T> v, const ScoreTerms<float>& terms,
                              const AttentionDims& d, float scale, const AttentionDropout& dropout,
                              const AttentionTiles& tiles, const RelativePositionGrads<float>& d_relative) {
  const StepProfileScope profile(StepPart::kAttention);
  check_tiles(tiles);
  const MaskGeometry geo(terms, d);
  const std::int64_t Br = tiles.q_block, Bc = tiles.k_block;
  const TileMath tm{tiles_use_blas(tiles, d)};
  const RelativePositions<float>& rel = terms.positions.relative;
  const std::int64_t nb = rel.active() ? rel.buckets() : 0;
  // Per thread: P, dropout(P) and dP tiles (Br, Bc); dK, dV accumulators
  // (Bc, D), (Bc, Dv); delta_i = dO_i . O_i (L); K^T and V^T of a key tile
  // in panels for the micro-kernel; relative positions: qa = scale Q rel_k^T
  // and da = dO rel_v^T for the whole head (L, nb) each, computed once
  // rather than per key tile, and bucket sums g (Br, nb); the head's Q
  // (L, D) and dO (L, Dv) and a key tile (Bc, D) as dense fp32 rows, the
  // micro-kernel's right-hand operands. 16-bit storage: a value tile
  // (Bc, Dv) and an output row (Dv), widened.
  const std::int64_t kt_size = simd::panels_size(d.D, Bc), vt_size = simd::panels_size(d.Dv, Bc);
  const std::int64_t conv = kHalfStorage<T> ? Bc * d.Dv + d.Dv : 0;
  const std::int64_t per_thread = 3 * Br * Bc + Bc * d.D + Bc * d.Dv + d.L + kt_size + vt_size + 2 * d.L * nb +
                                  Br * nb + d.L * (d.D + d.Dv) + Bc * d.D + conv;
  Tensor workspace = Tensor::empty({static_cast<std::int64_t>(omp_get_max_threads()) * per_thread});
  // Relative-position gradients per (batch, head), summed in a fixed order
  // afterwards, so the result does not depend on which thread ran which head.
  const std::int64_t rel_grad = nb * (d.D + d.Dv);
  Tensor rel_grads = Tensor::zeros({rel.active() ? d.B * d.H * rel_grad : 0});

#pragma omp parallel
  {
    float* p = workspace.f32() + omp_get_thread_num() * per_thread;  // (Br, Bc)
    float* pd = p + Br * Bc;                                         // (Br, Bc)
    float* dp = pd + Br * Bc;                                        // (Br, Bc)
    float* dk_acc = dp + Br * Bc;                                    // (Bc, D)
    float* dv_acc = dk_acc + Bc * d.D;                               // (Bc, Dv)
    float* delta = dv_acc + Bc * d.Dv;                               // (L)
    float* kt = delta + d.L;                                         // K^T (D, Bc) in panels
    float* vt = kt + kt_size;                                        // V^T (Dv, Bc) in panels
    float* qa = vt + vt_size;                                        // (L, nb)
    float* da = qa + d.L * nb;                                       // (L, nb)
    float* gb = da + d.L * nb;                                       // (Br, nb)
    float* qd = gb + Br * nb;                                        // (L, D)
    float* dod = qd + d.L * d.D;                                     // (L, Dv)
    float* kd = dod + d.L * d.Dv;                                    // (Bc, D)
    float* vbuf = kd + Bc * d.D;                                     // 16-bit storage: (Bc, Dv)
    float* orow = vbuf + Bc * d.Dv;                                  // (Dv)
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
      const std::int64_t b = bh / d.H, h = bh % d.H;
      const RelativeGradSlot slot(rel_grads.f32(), rel, bh, d.D, d.Dv);
      float *drk = slot.k, *drv = slot.v;  // (nb, D), (nb, Dv)
      const float* lse_bh = lse + bh * d.L;
      // dS = P * (dP - delta) with delta_i = sum_j P_ij dP_ij = dO_i . O_i
      // (also under dropout, since O already holds the dropped weights).
      dense_rows_f32(qd, q.at(b, h), q.row_stride, d.L, d.D);
      dense_rows_f32(dod, dout.at(b, h), dout.row_stride, d.L, d.Dv);
      for (std::int64_t i = 0; i < d.L; ++i) {
        std::int64_t ldo = 0;
        const float* o = rows_as_f32(out.at(b, h) + i * out.row_stride, out.row_stride, 1, d.Dv, orow, ldo);
        delta[i] = simd::dot(dod + i * d.Dv, o, d.Dv);
        std::fill_n(dq.at(b, h) + i * dq.row_stride, d.D, 0.0f);
        if (rel.rel_v)
          for (std::int64_t c = 0; c < nb; ++c)
            da[i * nb + c] = simd::dot(dout.at(b, h) + i * dout.row_stride, rel.rel_v + c * d.Dv, d.Dv);
      }
      if (rel.active())
        for (std::int64_t i0 = 0; i0 < d.L; i0 += Br) {
          const std::int64_t nr = std::min(Br, d.L - i0);
          relative_scores(qa + i0 * nb, qd + i0 * d.D, d.D, nr, d.D, rel, scale);
        }
      for (std::int64_t j0 = 0; j0 < d.S; j0 += Bc) {
        const std::int64_t nc_block = std::min(Bc, d.S - j0);
        std::int64_t ldv = 0;
        dense_rows_f32(kd, k.at(b, h) + j0 * k.row_stride, k.row_stride, nc_block, d.D);
        const float* vj = rows_as_f32(v.at(b, h) + j0 * v.row_stride, v.row_stride, nc_block, d.Dv, vbuf, ldv);
        std::fill_n(dk_acc, nc_block * d.D, 0.0f);
        std::fill_n(dv_acc, nc_block * d.Dv, 0.0f);
        const simd::GemmB ktp = tm.pack_t(kt, kd, d.D, nc_block, d.D), vtp = tm.pack_t(vt, vj, ldv, nc_block, d.Dv);
        for (std::int64_t i0_block = 0; i0_block < d.L; i0_block += Br) {
          const std::int64_t nr_block = std::min(Br, d.L - i0_block);
          const TilePlan plan = geo.plan(b, i0_block, nr_block, j0, nc_block);
          if (plan.skip) continue;
          // Only the causally visible rows and columns of the tile: the rest has P = 0.
          const auto [r0, nc] = geo.causal_span(i0_block, nr_block, j0, nc_block);
          const std::int64_t i0 = i0_block + r0, nr = nr_block - r0;
          const float* qi = qd + i0 * d.D;
          const float* doi = dod + i0 * d.Dv;
          // P = exp(scale * Q K^T + mask - lse)
          tm.q_kt(p, Bc, qi, d.D, kd, d.D, ktp, nr, nc, d.D, scale);
          const std::int64_t jm = std::min(j0 + nc, geo.cols) - j0;  // tile columns under the masks
          if (plan.elementwise) geo.apply(p, Bc, b, h, i0, nr, j0, nc, qa + i0 * nb);
          for (std::int64_t r = 0; r < nr; ++r) simd::exp_shift_sum(p + r * Bc, nc, lse_bh[i0 + r]);
          const float* pv = p;  // the weights that multiplied V
          if (dropout.active()) {
            for (std::int64_t r = 0; r < nr; ++r)
              apply_dropout_row(pd + r * Bc, p + r * Bc, nc, d, b, h, i0 + r, j0, dropout, KeepBits::kReplay);
            pv = pd;
          }
          // dV_j += dropout(P)^T dO_i
          tm.at_b(dv_acc, d.Dv, pv, Bc, doi, d.Dv, nc, d.Dv, nr, 1.0f, true);
          // dP = dO_i V_j^T (the gradient of the dropped weights), then dS in place.
          tm.q_kt(dp, Bc, doi, d.Dv, vj, ldv, vtp, nr, nc, d.Dv, 1.0f);
          if (rel.rel_v && jm > 0) {
            // out_i also held sum_j pv_ij rel_v[c]: dP gains dO_i . rel_v[c],
            // and rel_v's gradient gains the bucket sums of pv times dO_i.
            std::fill(gb, gb + nr * nb, 0.0f);
            for (std::int64_t r = 0; r < nr; ++r) {
              const float* dar = da + (i0 + r) * nb;
              const std::int64_t qpos = terms.positions.query_offset + i0 + r;
              add_bucket_terms(dp + r * Bc, jm, j0, qpos, dar, rel);
              bucket_sums(gb + r * nb, pv + r * Bc, jm, j0, qpos, rel);
            }
            small_atb(drv, gb, nb, doi, d.Dv, nr, nb, d.Dv, 1.0f);
          }
          // dS = pd * dP - P * delta with pd = dropout(P): the mask's draws are
          // not needed again (where P is 0, so is every term).
          for (std::int64_t r = 0; r < nr; ++r) {
            if (dropout.active())
              simd::dropout_softmax_grad_row(dp + r * Bc, p + r * Bc, pd + r * Bc, nc, delta[i0 + r]);
            else simd::softmax_grad_row(dp + r * Bc, p + r * Bc, nc, delta[i0 + r]);
          }
          if (rel.active() && jm > 0) {
            // score_ij also held scale * q_i . rel_k[c]: with g the bucket sums
            // of dS, dQ += scale * g rel_k and rel_k's gradient += scale * g^T Q.
            std::fill(gb, gb + nr * nb, 0.0f);
            for (std::int64_t r = 0; r < nr; ++r)
              bucket_sums(gb + r * nb, dp + r * Bc, jm, j0, terms.positions.query_offset + i0 + r, rel);
            small_ab(dq.at(b, h) + i0 * dq.row_stride, gb, rel.rel_k, nr, d.D, nb, scale, dq.row_stride, nb);
            small_atb(drk, gb, nb, qi, d.D, nr, nb, d.D, scale);
          }
          // dQ_i += scale * dS K_j;  dK_j += scale * dS^T Q_i
          tm.ab(dq.at(b, h) + i0 * dq.row_stride, dq.row_stride, dp, Bc, kd, d.D, nr, d.D, nc, scale, true);
          tm.at_b(dk_acc, d.D, dp, Bc, qi, d.D, nc, d.D, nr, scale, true);
        }
        for (std::int64_t c = 0; c < nc_block; ++c) {
          simd::stream_scaled_row(dk.at(b, h) + (j0 + c) * dk.row_stride, dk_acc + c * d.D, d.D, 1.0f);
          simd::stream_scaled_row(dv.at(b, h) + (j0 + c) * dv.row_stride, dv_acc + c * d.Dv, d.Dv, 1.0f);
        }
      }
      hwy::FlushStream();  // the streamed rows, before any other thread reads them
    }
  }
  if (rel.active()) add_relative_grads(rel, d_relative, rel_grads.f32(), d.B * d.H, d.D, d.Dv);
}

// One function for each element type: HWY_EXPORT takes no templates.
void attention_fused_backward_f32(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                                  HeadsView<const float> out, HeadsView<const float> dout, HeadsView<const float> q,
                                  HeadsView<const float> k, HeadsView<const float> v, const ScoreTerms<float>& terms,
                                  const AttentionDims& d, float scale, const AttentionDropout& dropout,
                                  const AttentionTiles& tiles, const RelativePositionGrads<float>& d_relative) {
  HWY_NAMESPACE::attention_fused_backward<float>(dq, dk, dv, lse, out, dout, q, k, v, terms, d, scale, dropout, tiles,
                                                 d_relative);
}
void attention_fused_backward_bf16(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                                   HeadsView<const BF16> out, HeadsView<const float> dout, HeadsView<const BF16> q,
                                   HeadsView<const BF16> k, HeadsView<const BF16> v, const ScoreTerms<float>& terms,
                                   const AttentionDims& d, float scale, const AttentionDropout& dropout,
                                   const AttentionTiles& tiles, const RelativePositionGrads<float>& d_relative) {
  HWY_NAMESPACE::attention_fused_backward<BF16>(dq, dk, dv, lse, out, dout, q, k, v, terms, d, scale, dropout, tiles,
                                                d_relative);
}
void attention_fused_backward_f16(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                                  HeadsView<const F16> out, HeadsView<const float> dout, HeadsView<const F16> q,
                                  HeadsView<const F16> k, HeadsView<const F16> v, const ScoreTerms<float>& terms,
                                  const AttentionDims& d, float scale, const AttentionDropout& dropout,
                                  const AttentionTiles& tiles, const RelativePositionGrads<float>& d_relative) {
  HWY_NAMESPACE::attention_fused_backward<F16>(dq, dk, dv, lse, out, dout, q, k, v, terms, d, scale, dropout, tiles,
                                               d_relative);
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(attention_fused_backward_f32);
HWY_EXPORT(attention_fused_backward_bf16);
HWY_EXPORT(attention_fused_backward_f16);

template <typename T>
void attention_fused_backward(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                              HeadsView<const T> out, HeadsView<const float> dout, HeadsView<const T> q,
                              HeadsView<const T> k, HeadsView<const T> v, const ScoreTerms<float>& terms,
                              const AttentionDims& d, float scale, const AttentionDropout& dropout,
                              const AttentionTiles& tiles, const RelativePositionGrads<float>& d_relative) {
  check_attention_dims(d, true);
  check_attention_views(d, out, q, k, v);
  check_heads_view("dout", dout, d.B * d.L, d.Dv);
  check_heads_view("dq", dq, d.B * d.L, d.D);
  check_heads_view("dk", dk, d.B * d.S, d.D);
  check_heads_view("dv", dv, d.B * d.S, d.Dv);
  for_element_type<T>(MULTIHEAD_DISPATCH(attention_fused_backward_f32),
                      MULTIHEAD_DISPATCH(attention_fused_backward_bf16),
                      MULTIHEAD_DISPATCH(attention_fused_backward_f16))(dq, dk, dv, lse, out, dout, q, k, v, terms, d,
                                                                        scale, dropout, tiles, d_relative);
}

template void attention_fused_backward<float>(HeadsView<float>, HeadsView<float>, HeadsView<float>, const float*,
                                              HeadsView<const float>, HeadsView<const float>, HeadsView<const float>,
                                              HeadsView<const float>, HeadsView<const float>, const ScoreTerms<float>&,
                                              const AttentionDims&, float, const AttentionDropout&,
                                              const AttentionTiles&, const RelativePositionGrads<float>&);
template void attention_fused_backward<BF16>(HeadsView<float>, HeadsView<float>, HeadsView<float>, const float*,
                                             HeadsView<const BF16>, HeadsView<const float>, HeadsView<const BF16>,
                                             HeadsView<const BF16>, HeadsView<const BF16>, const ScoreTerms<float>&,
                                             const AttentionDims&, float, const AttentionDropout&,
                                             const AttentionTiles&, const RelativePositionGrads<float>&);
template void attention_fused_backward<F16>(HeadsView<float>, HeadsView<float>, HeadsView<float>, const float*,
                                            HeadsView<const F16>, HeadsView<const float>, HeadsView<const F16>,
                                            HeadsView<const F16>, HeadsView<const F16>, const ScoreTerms<float>&,
                                            const AttentionDims&, float, const AttentionDropout&, const AttentionTiles&,
                                            const RelativePositionGrads<float>&);

}  // namespace multihead
#endif  // HWY_ONCE
