// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/attention_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "multihead/core/step_profile.h"
#include "multihead/kernels/attention_checks.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/transpose.h"
#include "amx_tiles.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_bf16_backward.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"
#include "attention_bf16_blocks.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {

using namespace bf16_blocks;

void attention_bf16_backward(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                             HeadsView<const BF16> out, HeadsView<const float> dout, HeadsView<const BF16> q,
                             HeadsView<const BF16> k, HeadsView<const BF16> v, const ScoreTerms<float>& terms,
                             const AttentionDims& d, float scale, const AttentionDropout& dropout,
                             const AttentionTiles& tiles, const RelativePositionGrads<float>& d_relative) {
  const StepProfileScope profile(StepPart::kAttention);
  check_tiles(tiles);
  const MaskGeometry geo(terms, d);
  const std::int64_t Br = query_block(tiles, terms.masks), Bc = tiles.k_block;
  const RelativePositions<float>& rel = terms.positions.relative;
  const std::int64_t nb = rel.active() ? rel.buckets() : 0;
  using C = Carver;
  // Per thread, for one run of Sr keys at a time: P, dropout(P) when
  // dropout is on, and dP then dS, (Br, Sr) fp32 each; dropout(P), then dS,
  // rounded (Br, Sr) bf16. The head's K (S, D) and V (S, Dv) packed bf16
  // (on AMX tiles: K^T, K and V^T laid out for the tile products), and its
  // dK, dV accumulators (S, D), (S, Dv) fp32; the query block packed
  // (Br, D) bf16 and the head's dO rounded (L, Dv) bf16; the block's dQ
  // (Br, D); delta (L); an output and a dO row (Dv); relative positions:
  // the query block widened (Br, D), qa = scale Q rel_k^T and da = dO
  // rel_v^T for the head (L, nb) each, bucket sums of pd and of dS (Br, nb)
  // each.
  //
  // On AMX tiles dK and dV are summed transposed, dK^T += Q^T dS and
  // dV^T += dO^T dropout(P), (D, Sp) and (Dv, Sp): the weights and dS are
  // packed for the tiles pair of rows by pair of rows as the row passes
  // round them (pp, sp), so no operand is transposed per run, only Q and dO
  // once per head (qt, dot: (D, Lp), (Dv, Lp) bf16); Sp and Lp keep the
  // rows of those an odd number of cache lines apart, off each other's L1
  // sets. oneDNN's matmul took P^T dO and dS^T Q from the rounded rows
  // (copying them transposed on every call): at L = 4096 each of the two
  // cost about 20 ms of the core's 165.
  const bool on_tiles = products_on_tiles(Bc), dq_on_tiles = on_tiles && d.S >= kTilesFromKeys;
  const bool kv_on_tiles = on_tiles;
  const HeadOperand::Use k_use{on_tiles, dq_on_tiles, !on_tiles || !dq_on_tiles}, v_use{on_tiles, false, !on_tiles};
  const std::int64_t k_size = HeadOperand::size(k_use, d.S, d.D), v_size = HeadOperand::size(v_use, d.S, d.Dv);
  const std::int64_t run_keys = std::max(kBackwardRunKeys, Bc), Sr = std::min(d.S, run_keys);
  const std::int64_t Sp = kv_on_tiles ? ceil_div(d.S, 32) * 32 + 16 : d.S;  // floats: 64 bytes past 128-byte steps
  const std::int64_t Lp = ceil_div(d.L, 64) * 64 + 32;                      // bf16: the same
  const std::int64_t packed_run = kv_on_tiles ? amx::packed_size(Br, Sr) : 0;
  const std::int64_t transposed_qdo = kv_on_tiles ? (d.D + d.Dv) * Lp : 0;
  const std::int64_t per_thread = (dropout.active() ? 3 : 2) * C::padded(Br * Sr) + C::padded(C::bf16_floats(Br * Sr)) +
                                  C::padded(C::bf16_floats(k_size)) + C::padded(C::bf16_floats(v_size)) +
                                  C::padded(Sp * d.D) + C::padded(Sp * d.Dv) + C::padded(C::bf16_floats(Br * d.D)) +
                                  C::padded(C::bf16_floats(d.L * d.Dv)) + C::padded(Br * d.D) + C::padded(d.L) +
                                  2 * C::padded(d.Dv) + C::padded(Br * d.D) + 2 * C::padded(d.L * nb) +
                                  2 * C::padded(Br * nb) + 2 * C::padded(C::bf16_floats(packed_run)) +
                                  C::padded(C::bf16_floats(transposed_qdo)) + C::padded(16 * std::max(d.D, d.Dv));
  Tensor workspace = Tensor::empty({static_cast<std::int64_t>(omp_get_max_threads()) * per_thread});
  // Relative-position gradients per (batch, head), summed in a fixed order afterwards.
  const std::int64_t rel_grad = nb * (d.D + d.Dv);
  Tensor rel_grads = Tensor::zeros({rel.active() ? d.B * d.H * rel_grad : 0});

#pragma omp parallel
  {
    Carver carve(workspace.f32() + omp_get_thread_num() * per_thread);
    float* p = carve.f32(Br * Sr);
    float* pd = dropout.active() ? carve.f32(Br * Sr) : p;  // dropout(P): the weights that multiplied V
    float* dp = carve.f32(Br * Sr);
    BF16* b16 = carve.bf16(Br * Sr);  // dropout(P), then dS, rounded
    BF16* kbuf = carve.bf16(k_size);
    BF16* vbuf = carve.bf16(v_size);
    float* dk_acc = carve.f32(Sp * d.D);   // (S, D), or on tiles dK^T (D, Sp)
    float* dv_acc = carve.f32(Sp * d.Dv);  // (S, Dv), or on tiles dV^T (Dv, Sp)
    BF16* qd = carve.bf16(Br * d.D);
    BF16* dob = carve.bf16(d.L * d.Dv);  // the head's dO, rounded
    float* dq_acc = carve.f32(Br * d.D);
    float* delta = carve.f32(d.L);
    float* orow = carve.f32(d.Dv);
    float* grow = carve.f32(d.Dv);
    float* qbuf = carve.f32(Br * d.D);
    float* qa = carve.f32(d.L * nb);
    float* da = carve.f32(d.L * nb);
    float* gbv = carve.f32(Br * nb);
    float* gbk = carve.f32(Br * nb);
    BF16* pp = carve.bf16(packed_run);      // tiles: dropout(P) packed
    BF16* sp = carve.bf16(packed_run);      // tiles: dS packed
    BF16* qt = carve.bf16(transposed_qdo);  // tiles: Q^T (D, Lp), then dO^T (Dv, Lp)
    BF16* dot = qt + d.D * Lp;
    float* tmp = carve.f32(16 * std::max(d.D, d.Dv));
    KeyPlan keys;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
      const std::int64_t b = bh / d.H, h = bh % d.H;
      const RelativeGradSlot slot(rel_grads.f32(), rel, bh, d.D, d.Dv);
      float *drk = slot.k, *drv = slot.v;  // (nb, D), (nb, Dv)
      const float* lse_bh = lse + bh * d.L;
      const HeadOperand kh = HeadOperand::lay_out(k_use, kbuf, k.at(b, h), k.row_stride, d.S, d.D);
      const HeadOperand vh = HeadOperand::lay_out(v_use, vbuf, v.at(b, h), v.row_stride, d.S, d.Dv);
      // delta_i = dO_i . O_i, with dO_i rounded as the products see it: a
      // query that sees one key then gets dS = 0 exactly, as in fp32. dO is
      // rounded here once for the whole head.
      for (std::int64_t i = 0; i < d.L; ++i) {
        if (i + simd::kRowsAhead < d.L) {
          simd::prefetch_bytes(dout.at(b, h) + (i + simd::kRowsAhead) * dout.row_stride, d.Dv * 4);
          simd::prefetch_bytes(out.at(b, h) + (i + simd::kRowsAhead) * out.row_stride, d.Dv * 2);
        }
        std::int64_t ldo = 0;
        const float* o = rows_as_f32(out.at(b, h) + i * out.row_stride, out.row_stride, 1, d.Dv, orow, ldo);
        narrow(dob + i * d.Dv, dout.at(b, h) + i * dout.row_stride, d.Dv);
        widen(grow, dob + i * d.Dv, d.Dv);
        delta[i] = simd::dot(grow, o, d.Dv);
        if (rel.rel_v)
          for (std::int64_t c = 0; c < nb; ++c)
            da[i * nb + c] = simd::dot(dout.at(b, h) + i * dout.row_stride, rel.rel_v + c * d.Dv, d.Dv);
      }
      if (kv_on_tiles) {
        std::fill_n(dk_acc, d.D * Sp, 0.0f);
        std::fill_n(dv_acc, d.Dv * Sp, 0.0f);
        transpose_bf16(qt, Lp, q.at(b, h), q.row_stride, d.L, d.D);
        transpose_bf16(dot, Lp, dob, d.Dv, d.L, d.Dv);
      }
      for (std::int64_t i0 = 0; i0 < d.L; i0 += Br) {
        const std::int64_t nr = std::min(Br, d.L - i0);
        const float* doi = dout.at(b, h) + i0 * dout.row_stride;
        float* dqi = dq.at(b, h) + i0 * dq.row_stride;
        keys.make(geo, d.S, Bc, b, i0, nr, run_keys);
        // dK and dV sum over the query blocks: off tiles, the first block's
        // products write them outright where its one run covers every key.
        const bool overwrite =
            !kv_on_tiles && i0 == 0 && keys.runs.size() == 1 && keys.runs[0].j0 == 0 && keys.runs[0].n == d.S;
        if (!kv_on_tiles && i0 == 0 && !overwrite) {
          std::fill_n(dk_acc, d.S * d.D, 0.0f);
          std::fill_n(dv_acc, d.S * d.Dv, 0.0f);
        }
        if (keys.runs.empty()) {  // no key visible: no gradient
          for (std::int64_t r = 0; r < nr; ++r) std::fill_n(dqi + r * dq.row_stride, d.D, 0.0f);
          continue;
        }
        pack_rows(qd, q.at(b, h) + i0 * q.row_stride, q.row_stride, nr, d.D);
        const BF16* dobi = dob + i0 * d.Dv;
        std::int64_t ldq32 = 0;
        const float* q32 = rel.active() ? rows_as_f32(qd, d.D, nr, d.D, qbuf, ldq32) : nullptr;
        if (rel.active()) relative_scores(qa + i0 * nb, q32, ldq32, nr, d.D, rel, scale);
        const ScalePlace place(keys, scale, on_tiles);
        if (rel.rel_v) std::fill(gbv, gbv + nr * nb, 0.0f);
        if (rel.active()) std::fill(gbk, gbk + nr * nb, 0.0f);
        // Run by run, so that a run's scores, weights and their gradients
        // stay in the caches.
        for (std::size_t u = 0; u < keys.runs.size(); ++u) {
          const KeyRun& run = keys.runs[u];
          // Scores scale Q K^T on the run's keys, then the masks.
          kh.times_transposed(p, qd, nr, run.j0, run.n, place.product_scale);
          if (place.own_pass) simd::scale_row(p, nr * run.n, scale);
          keys.apply_masks(geo, u, p, b, h, i0, nr, qa + i0 * nb);
          // Row by row, while a row is in L1: P = exp(S - lse), dropout(P)
          // (pd), rel_v's bucket sums of pd, and pd rounded for the products.
          for (std::int64_t r = 0; r < nr; ++r) {
            float* x = run.row(p, r);
            simd::exp_shift_sum_coarse(x, run.n, lse_bh[i0 + r], place.row_scale);
            if (dropout.active()) {
              float* y = run.row(pd, r);
              apply_dropout_row(y, x, run.n, d, b, h, i0 + r, run.j0, dropout, KeepBits::kReplay);
              x = y;
            }
            // out_i also held sum_j pd_ij rel_v[c]: rel_v's gradient gains the
            // bucket sums of pd times dO_i.
            if (rel.rel_v)
              bucket_sums(gbv + r * nb, x, masked_keys(geo, run.j0, run.n), run.j0,
                          terms.positions.query_offset + i0 + r, rel);
            if (kv_on_tiles) pack_as_produced(pp, pd, r, nr, run.n);
            else round_operand(run.row(b16, r), x, run.n);
          }
          // dV += dropout(P)^T dO and dP = dO V^T (the gradient of pd), in bf16.
          if (kv_on_tiles)
            amx::gemm(dv_acc + run.j0, Sp, dot + i0, Lp, amx::part(pp, nr, 0, 0), d.Dv, run.n, nr, 1.0f, true);
          else
            gemm_bf16(Trans::kYes, Trans::kNo, run.n, d.Dv, nr, 1.0f, b16, run.n, dobi, d.Dv, overwrite ? 0.0f : 1.0f,
                      dv_acc + run.j0 * d.Dv, d.Dv);
          vh.times_transposed(dp, dobi, nr, run.j0, run.n, 1.0f);
          // Row by row: dP gains dO_i . rel_v[c]; dS = pd * dP - P * delta
          // (= P * (dP - delta) without dropout); rel_k's bucket sums of dS;
          // dS rounded for the products.
          for (std::int64_t r = 0; r < nr; ++r) {
            float* x = run.row(dp, r);
            const std::int64_t qpos = terms.positions.query_offset + i0 + r, jm = masked_keys(geo, run.j0, run.n);
            if (rel.rel_v) add_bucket_terms(x, jm, run.j0, qpos, da + (i0 + r) * nb, rel);
            if (dropout.active())
              simd::dropout_softmax_grad_row(x, run.row(p, r), run.row(pd, r), run.n, delta[i0 + r]);
            else simd::softmax_grad_row(x, run.row(p, r), run.n, delta[i0 + r]);
            if (rel.active()) bucket_sums(gbk + r * nb, x, jm, run.j0, qpos, rel);
            round_operand(run.row(b16, r), x, run.n);
            if (kv_on_tiles) pack_as_produced(sp, dp, r, nr, run.n);
          }
          // dQ = scale dS K (the sum over runs, then the scale) and dK +=
          // scale dS^T Q (on tiles unscaled, scaled as it is written out), in bf16.
          kh.times(dq_acc, b16, nr, run.j0, run.n, u > 0);
          if (kv_on_tiles)
            amx::gemm(dk_acc + run.j0, Sp, qt + i0, Lp, amx::part(sp, nr, 0, 0), d.D, run.n, nr, 1.0f, true);
          else
            gemm_bf16(Trans::kYes, Trans::kNo, run.n, d.D, nr, scale, b16, run.n, qd, d.D, overwrite ? 0.0f : 1.0f,
                      dk_acc + run.j0 * d.D, d.D);
        }
        if (rel.rel_v) small_atb(drv, gbv, nb, doi, dout.row_stride, nr, nb, d.Dv, 1.0f);
        for (std::int64_t r = 0; r < nr; ++r)
          simd::stream_scaled_row(dqi + r * dq.row_stride, dq_acc + r * d.D, d.D, scale);
        if (rel.active()) {
          // score_ij also held scale * q_i . rel_k[c]: with g the bucket sums
          // of dS, dQ += scale * g rel_k and rel_k's gradient += scale * g^T Q.
          small_ab(dqi, gbk, rel.rel_k, nr, d.D, nb, scale, dq.row_stride, nb);
          small_atb(drk, gbk, nb, q32, ldq32, nr, nb, d.D, scale);
        }
      }
      if (kv_on_tiles) {
        write_transposed(dk.at(b, h), dk.row_stride, dk_acc, Sp, d.S, d.D, scale, tmp);
        write_transposed(dv.at(b, h), dv.row_stride, dv_acc, Sp, d.S, d.Dv, 1.0f, tmp);
      } else {
        for (std::int64_t j = 0; j < d.S; ++j) {
          simd::stream_scaled_row(dk.at(b, h) + j * dk.row_stride, dk_acc + j * d.D, d.D, 1.0f);
          simd::stream_scaled_row(dv.at(b, h) + j * dv.row_stride, dv_acc + j * d.Dv, d.Dv, 1.0f);
        }
      }
      hwy::FlushStream();  // the streamed rows, before any other thread reads them
    }
  }
  if (rel.active()) add_relative_grads(rel, d_relative, rel_grads.f32(), d.B * d.H, d.D, d.Dv);
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(attention_bf16_backward);

void attention_bf16_backward(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                             HeadsView<const BF16> out, HeadsView<const float> dout, HeadsView<const BF16> q,
                             HeadsView<const BF16> k, HeadsView<const BF16> v, const ScoreTerms<float>& terms,
                             const AttentionDims& d, float scale, const AttentionDropout& dropout,
                             const AttentionTiles& tiles, const RelativePositionGrads<float>& d_relative) {
  check_attention_dims(d, true);
  check_attention_views(d, out, q, k, v);
  MULTIHEAD_DISPATCH(attention_bf16_backward)
  (dq, dk, dv, lse, out, dout, q, k, v, terms, d, scale, dropout, tiles, d_relative);
}

}  // namespace multihead
#endif  // HWY_ONCE
