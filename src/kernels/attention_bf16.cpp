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
#define HWY_TARGET_INCLUDE "kernels/attention_bf16.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"
#include "attention_bf16_blocks.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {

using namespace bf16_blocks;

void attention_bf16_forward(HeadsView<BF16> out, float* lse, HeadsView<const BF16> q, HeadsView<const BF16> k,
                            HeadsView<const BF16> v, const ScoreTerms<float>& terms, const AttentionDims& d,
                            float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  const StepProfileScope profile(StepPart::kAttention);
  check_tiles(tiles);
  const MaskGeometry geo(terms, d);
  const std::int64_t Br = query_block(tiles, terms.masks), Bc = tiles.k_block;
  const std::int64_t nqb = ceil_div(d.L, Br);
  const std::int64_t tasks = d.B * d.H * nqb;
  const bool threaded = worth_threads(d);
  const RelativePositions<float>& rel = terms.positions.relative;
  const std::int64_t nb = rel.active() ? rel.buckets() : 0;
  using C = Carver;
  // Per thread, for one run of Sr keys at a time: scores (Br, Sr) fp32 and
  // the weights rounded (Br, Sr) bf16; the query block packed (Br, D) bf16;
  // the output accumulator (Br, Dv), m and l (Br); relative positions: the
  // query block widened (Br, D), key scores qa and value-bucket weights wv
  // (Br, nb); an output row (Dv), fp32 and rounded.
  const std::int64_t run_keys = std::max(kForwardRunKeys, Bc), Sr = std::min(d.S, run_keys);
  const std::int64_t per_thread = C::padded(Br * Sr) + C::padded(C::bf16_floats(Br * Sr)) +
                                  C::padded(C::bf16_floats(Br * d.D)) + C::padded(Br * d.Dv) + 2 * C::padded(Br) +
                                  C::padded(Br * d.D) + 2 * C::padded(Br * nb) + C::padded(d.Dv) +
                                  C::padded(C::bf16_floats(d.Dv));
  Tensor workspace = Tensor::empty({static_cast<std::int64_t>(omp_get_max_threads()) * per_thread});
  // Every head's K (S, D) and V (S, Dv), laid out once for all its query blocks.
  const bool on_tiles = products_on_tiles(Bc), pv_on_tiles = on_tiles && d.S >= kTilesFromKeys;
  const HeadOperand::Use k_use{on_tiles, false, !on_tiles}, v_use{false, pv_on_tiles, !pv_on_tiles};
  const std::int64_t k_size = HeadOperand::size(k_use, d.S, d.D), v_size = HeadOperand::size(v_use, d.S, d.Dv);
  Tensor k_packed = Tensor::empty({d.B * d.H, k_size}, DType::kBF16);
  Tensor v_packed = Tensor::empty({d.B * d.H, v_size}, DType::kBF16);
  std::vector<HeadOperand> k_heads(static_cast<std::size_t>(d.B * d.H)), v_heads(k_heads.size());
#pragma omp parallel for schedule(static) if (threaded)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const std::int64_t b = bh / d.H, h = bh % d.H;
    k_heads[bh] = HeadOperand::lay_out(k_use, k_packed.data<BF16>() + bh * k_size, k.at(b, h), k.row_stride, d.S, d.D);
    v_heads[bh] = HeadOperand::lay_out(v_use, v_packed.data<BF16>() + bh * v_size, v.at(b, h), v.row_stride, d.S, d.Dv);
  }

#pragma omp parallel if (threaded)
  {
    Carver carve(workspace.f32() + omp_get_thread_num() * per_thread);
    float* s = carve.f32(Br * Sr);
    BF16* pb = carve.bf16(Br * Sr);
    BF16* qd = carve.bf16(Br * d.D);
    float* acc = carve.f32(Br * d.Dv);
    float* m = carve.f32(Br);
    float* l = carve.f32(Br);
    float* qbuf = carve.f32(Br * d.D);
    float* qa = carve.f32(Br * nb);
    float* wv = carve.f32(Br * nb);
    float* orow = carve.f32(d.Dv);
    BF16* ob = carve.bf16(d.Dv);
    KeyPlan keys;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      const std::int64_t bh = t / nqb, b = bh / d.H, h = bh % d.H;
      const std::int64_t i0 = (t % nqb) * Br, nr = std::min(Br, d.L - i0);
      const HeadOperand &kh = k_heads[bh], &vh = v_heads[bh];
      pack_rows(qd, q.at(b, h) + i0 * q.row_stride, q.row_stride, nr, d.D);
      if (rel.active()) {
        std::int64_t ldq = 0;
        const float* q32 = rows_as_f32(qd, d.D, nr, d.D, qbuf, ldq);
        relative_scores(qa, q32, ldq, nr, d.D, rel, scale);
        std::fill(wv, wv + nr * nb, 0.0f);
      }
      keys.make(geo, d.S, Bc, b, i0, nr, run_keys);
      const ScalePlace place(keys, scale, on_tiles);
      std::fill(m, m + nr, -kInf);
      std::fill(l, l + nr, 0.0f);
      std::fill(acc, acc + nr * d.Dv, 0.0f);
      // Run by run, so that a run's scores and weights stay in the caches
      // between the products.
      for (std::size_t u = 0; u < keys.runs.size(); ++u) {
        const KeyRun& run = keys.runs[u];
        // S = scale Q K^T on the run's keys, then the masks.
        kh.times_transposed(s, qd, nr, run.j0, run.n, place.product_scale);
        if (place.own_pass) simd::scale_row(s, nr * run.n, scale);
        keys.apply_masks(geo, u, s, b, h, i0, nr, qa);
        // Row by row, in fp32: P = exp(S - m) under the running maximum m
        // (row_scale > 0 commutes with it), dropout, rel_v's bucket sums,
        // and P rounded while the row is in L1.
        for (std::int64_t r = 0; r < nr; ++r) {
          float* x = run.row(s, r);
          if (online_softmax_run(x, run.n, place.row_scale, m[r], l[r], acc + r * d.Dv, d.Dv, wv + r * nb,
                                 rel.rel_v ? nb : 0, true)) {
            if (dropout.active()) apply_dropout_row(x, x, run.n, d, b, h, i0 + r, run.j0, dropout, KeepBits::kRecord);
            if (rel.rel_v)
              bucket_sums(wv + r * nb, x, masked_keys(geo, run.j0, run.n), run.j0,
                          terms.positions.query_offset + i0 + r, rel);
          }
          round_operand(run.row(pb, r), x, run.n);
        }
        // O += P V, with P rounded to bf16.
        vh.times(acc, pb, nr, run.j0, run.n, true);
      }
      float* lse_bh = lse + bh * d.L + i0;
      for (std::int64_t r = 0; r < nr; ++r) {
        lse_bh[r] = finish_row(orow, acc + r * d.Dv, wv + r * nb, m[r], l[r], rel, nb, d.Dv);
        narrow(ob, orow, d.Dv);
        simd::stream_copy(out.at(b, h) + (i0 + r) * out.row_stride, ob, d.Dv * 2);
      }
    }
    hwy::FlushStream();  // the streamed rows, before the caller reads them
  }
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(attention_bf16_forward);

void attention_bf16_forward(HeadsView<BF16> out, float* lse, HeadsView<const BF16> q, HeadsView<const BF16> k,
                            HeadsView<const BF16> v, const ScoreTerms<float>& terms, const AttentionDims& d,
                            float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  // fp32 accumulators: the fp32 kernel's limit on positions, checked before any parallel region.
  check_attention_dims(d, true);
  check_attention_views(d, out, q, k, v);
  MULTIHEAD_DISPATCH(attention_bf16_forward)(out, lse, q, k, v, terms, d, scale, dropout, tiles);
}

}  // namespace multihead
#endif  // HWY_ONCE
