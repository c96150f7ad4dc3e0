#include "multihead/kernels/attention_fused.h"

#include "multihead/kernels/attention_bf16.h"
#include "multihead/kernels/gemm_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "multihead/core/error.h"
#include "multihead/core/rng.h"
#include "multihead/core/step_profile.h"
#include "multihead/core/tensor.h"
#include "multihead/kernels/dropout.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/transpose.h"
#include "attention_tiles.h"
#include "simd_rows.h"
#include "tile_gemm.h"

namespace multihead {
namespace {

using namespace attention_tiles;

// The products on tiles, through the micro-kernel or BLAS. Names give the
// shapes: a "T" operand is used transposed.
struct TileMath {
  bool blas;

  // S (nr, nc), ld lds = alpha * Q (nr, D) K^T, with K (nc, D) row stride ldk.
  // The micro-kernel reads K^T from kt (D, nc), row stride ldkt, packed by pack_t.
  void q_kt(float* S, std::int64_t lds, const float* Q, std::int64_t ldq, const float* K, std::int64_t ldk,
            const float* kt, std::int64_t ldkt, std::int64_t nr, std::int64_t nc, std::int64_t D, float alpha) const {
    if (blas) gemm(Trans::kNo, Trans::kYes, nr, nc, D, alpha, Q, ldq, K, ldk, 0.0f, S, lds);
    else simd::tile_gemm<false>(S, lds, Q, ldq, kt, ldkt, nr, nc, D, alpha, false);
  }
  // C (m, n) (+)= alpha * A (m, k) B (k, n)
  void ab(float* C, std::int64_t ldc, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
          std::int64_t m, std::int64_t n, std::int64_t k, float alpha, bool accumulate) const {
    if (blas) gemm(Trans::kNo, Trans::kNo, m, n, k, alpha, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
    else simd::tile_gemm<false>(C, ldc, A, lda, B, ldb, m, n, k, alpha, accumulate);
  }
  // C (m, n) (+)= alpha * A^T B with A stored (k, m), B (k, n)
  void at_b(float* C, std::int64_t ldc, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
            std::int64_t m, std::int64_t n, std::int64_t k, float alpha, bool accumulate) const {
    if (blas) gemm(Trans::kYes, Trans::kNo, m, n, k, alpha, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
    else simd::tile_gemm<true>(C, ldc, A, lda, B, ldb, m, n, k, alpha, accumulate);
  }
  // dst (cols, rows) = src (rows, cols)^T with dst row stride ldd; for the micro-kernel only.
  void pack_t(float* dst, std::int64_t ldd, const float* src, std::int64_t lds, std::int64_t rows,
              std::int64_t cols) const {
    if (!blas) transpose(dst, ldd, src, lds, rows, cols);
  }
};

bool tiles_use_blas(const AttentionTiles& t, const AttentionDims& d) {
  return t.gemm == TileGemm::kBlas || (t.gemm == TileGemm::kAuto && std::max(d.D, d.Dv) <= kBlasTileMaxDim);
}

// Q, K, V and O may be stored in 16 bits; the kernels widen what a tile
// needs into per-thread fp32 buffers and compute in fp32.
template <typename T>
constexpr bool kHalfStorage = !std::is_same_v<std::remove_const_t<T>, float>;


}  // namespace

template <typename T>
void attention_fused_forward(HeadsView<T> out, float* lse, HeadsView<const T> q, HeadsView<const T> k,
                             HeadsView<const T> v, const AttentionMasks<float>& masks, const AttentionDims& d,
                             float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  if constexpr (std::is_same_v<T, BF16>)
    if (computes_in_bf16(DType::kBF16))
      return attention_bf16_forward(out, lse, q, k, v, masks, d, scale, dropout, tiles);
  const StepProfileScope profile(StepPart::kAttention);
  check_tiles(tiles);
  const MaskGeometry geo(masks, d);
  const std::int64_t Br = tiles.q_block, Bc = tiles.k_block;
  const std::int64_t nqb = ceil_div(d.L, Br);
  const std::int64_t tasks = d.B * d.H * nqb;
  const TileMath tm{tiles_use_blas(tiles, d)};
  const RelativePositions<float>& rel = masks.relative;
  const std::int64_t nb = rel.active() ? rel.buckets() : 0;
  // Per thread: scores (Br, Bc), output accumulator (Br, Dv), m and l (Br);
  // relative positions: key scores qa (Br, nb) and value-bucket weights wv (Br, nb).
  // 16-bit storage: the query block (Br, D), a key tile (Bc, D), a value
  // tile (Bc, Dv) and an output row (Dv), widened.
  const std::int64_t conv = kHalfStorage<T> ? Br * d.D + Bc * (d.D + d.Dv) + d.Dv : 0;
  const std::int64_t per_thread = Br * Bc + Br * d.Dv + 2 * Br + 2 * Br * nb + conv;
  Tensor workspace = Tensor::empty({static_cast<std::int64_t>(omp_get_max_threads()) * per_thread});
  auto conv_buffers = [&](int thread) { return workspace.f32() + (thread + 1) * per_thread - conv; };
  // K^T (B*H, D, S) for the micro-kernel, packed once and shared by every
  // query block of a head.
  Tensor kt_all = tm.blas ? Tensor() : Tensor::empty({d.B * d.H, d.D, d.S});
  if (!tm.blas) {
#pragma omp parallel for schedule(static)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
      float* kbuf = conv_buffers(omp_get_thread_num()) + Br * d.D;  // (Bc, D)
      for (std::int64_t j0 = 0; j0 < d.S; j0 += Bc) {
        const std::int64_t nc = std::min(Bc, d.S - j0);
        std::int64_t ldk = 0;
        const float* kj = rows_as_f32(k.at(bh / d.H, bh % d.H) + j0 * k.row_stride, k.row_stride, nc, d.D, kbuf, ldk);
        tm.pack_t(kt_all.f32() + bh * d.D * d.S + j0, d.S, kj, ldk, nc, d.D);
      }
    }
  }

#pragma omp parallel
  {
    float* s = workspace.f32() + omp_get_thread_num() * per_thread;  // (Br, Bc)
    float* acc = s + Br * Bc;                                        // (Br, Dv)
    float* m = acc + Br * d.Dv;                                      // (Br)
    float* l = m + Br;                                               // (Br)
    float* qa = l + Br;                                              // (Br, nb)
    float* wv = qa + Br * nb;                                        // (Br, nb)
    float* qbuf = conv_buffers(omp_get_thread_num());                // 16-bit storage: (Br, D)
    float* kbuf = qbuf + Br * d.D;                                   // (Bc, D)
    float* vbuf = kbuf + Bc * d.D;                                   // (Bc, Dv)
    float* orow = vbuf + Bc * d.Dv;                                  // (Dv)
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      const std::int64_t bh = t / nqb, b = bh / d.H, h = bh % d.H;
      const std::int64_t i0 = (t % nqb) * Br, nr = std::min(Br, d.L - i0);
      std::int64_t ldq = 0;
      const float* qi = rows_as_f32(q.at(b, h) + i0 * q.row_stride, q.row_stride, nr, d.D, qbuf, ldq);
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
        const float* kt = tm.blas ? nullptr : kt_all.f32() + bh * d.D * d.S + j0;
        std::int64_t ldk = 0, ldv = 0;  // the micro-kernel reads K^T from kt instead of K's rows
        const float* kj = tm.blas ? rows_as_f32(k.at(b, h) + j0 * k.row_stride, k.row_stride, nc, d.D, kbuf, ldk) : nullptr;
        tm.q_kt(s + r0 * Bc, Bc, qi + r0 * ldq, ldq, kj, ldk, kt, d.S, nr - r0, nc, d.D, scale);
        if (plan.elementwise) geo.apply(s + r0 * Bc, Bc, b, h, i0 + r0, nr - r0, j0, nc, qa + r0 * nb);
        for (std::int64_t r = r0; r < nr; ++r) {
          float* row = s + r * Bc;
          const float m_new = std::max(m[r], simd::row_max(row, nc));
          if (m_new == -kInf) {  // nothing visible yet in this row
            std::fill(row, row + nc, 0.0f);
            continue;
          }
          const float alpha = std::exp(m[r] - m_new);  // 0 when m was -inf
          l[r] = l[r] * alpha + simd::exp_shift_sum(row, nc, m_new);
          if (alpha != 1.0f) {
            simd::scale_row(acc + r * d.Dv, d.Dv, alpha);
            if (rel.rel_v) simd::scale_row(wv + r * nb, nb, alpha);
          }
          m[r] = m_new;
          if (dropout.active()) apply_dropout_row(row, nc, dropout_index(d, b, h, i0 + r, j0), dropout);
          if (rel.rel_v)
            bucket_sums(wv + r * nb, row, std::min(j0 + nc, geo.cols) - j0, j0, masks.query_offset + i0 + r, rel);
        }
        const float* vj = rows_as_f32(v.at(b, h) + j0 * v.row_stride, v.row_stride, nc, d.Dv, vbuf, ldv);
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

template <typename T>
void attention_fused_backward(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                              HeadsView<const T> out, HeadsView<const float> dout, HeadsView<const T> q,
                              HeadsView<const T> k, HeadsView<const T> v, const AttentionMasks<float>& masks,
                              const AttentionDims& d, float scale, const AttentionDropout& dropout,
                              const AttentionTiles& tiles) {
  if constexpr (std::is_same_v<T, BF16>)
    if (computes_in_bf16(DType::kBF16))
      return attention_bf16_backward(dq, dk, dv, lse, out, dout, q, k, v, masks, d, scale, dropout, tiles);
  const StepProfileScope profile(StepPart::kAttention);
  check_tiles(tiles);
  const MaskGeometry geo(masks, d);
  const std::int64_t Br = tiles.q_block, Bc = tiles.k_block;
  const TileMath tm{tiles_use_blas(tiles, d)};
  const RelativePositions<float>& rel = masks.relative;
  const std::int64_t nb = rel.active() ? rel.buckets() : 0;
  // Per thread: P, dropout(P) and dP tiles (Br, Bc); dK, dV accumulators
  // (Bc, D), (Bc, Dv); delta_i = dO_i . O_i (L); K^T (D, Bc) and V^T (Dv, Bc);
  // relative positions: qa = scale Q rel_k^T and da = dO rel_v^T for the
  // whole head (L, nb) each, computed once rather than per key tile, and
  // bucket sums g (Br, nb).
  // 16-bit storage: a query block (Br, D), a key and a value tile (Bc, D),
  // (Bc, Dv) and an output row (Dv), widened.
  const std::int64_t conv = kHalfStorage<T> ? Br * d.D + Bc * (d.D + d.Dv) + d.Dv : 0;
  const std::int64_t per_thread =
      3 * Br * Bc + Bc * d.D + Bc * d.Dv + d.L + Bc * (d.D + d.Dv) + 2 * d.L * nb + Br * nb + conv;
  Tensor workspace = Tensor::empty({static_cast<std::int64_t>(omp_get_max_threads()) * per_thread});
  // Relative-position gradients per (batch, head), summed in a fixed order
  // afterwards, so the result does not depend on which thread ran which head.
  const std::int64_t rel_grad = nb * (d.D + d.Dv);
  Tensor rel_grads = Tensor::zeros({rel.active() ? d.B * d.H * rel_grad : 0});

#pragma omp parallel
  {
    float* p = workspace.f32() + omp_get_thread_num() * per_thread;  // (Br, Bc)
    float* pd = p + Br * Bc;                                           // (Br, Bc)
    float* dp = pd + Br * Bc;                                          // (Br, Bc)
    float* dk_acc = dp + Br * Bc;                                      // (Bc, D)
    float* dv_acc = dk_acc + Bc * d.D;                                 // (Bc, Dv)
    float* delta = dv_acc + Bc * d.Dv;                                 // (L)
    float* kt = delta + d.L;                                           // (D, Bc)
    float* vt = kt + d.D * Bc;                                         // (Dv, Bc)
    float* qa = vt + d.Dv * Bc;                                        // (L, nb)
    float* da = qa + d.L * nb;                                         // (L, nb)
    float* gb = da + d.L * nb;                                         // (Br, nb)
    float* qbuf = gb + Br * nb;                                        // 16-bit storage: (Br, D)
    float* kbuf = qbuf + Br * d.D;                                     // (Bc, D)
    float* vbuf = kbuf + Bc * d.D;                                     // (Bc, Dv)
    float* orow = vbuf + Bc * d.Dv;                                    // (Dv)
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
      const std::int64_t b = bh / d.H, h = bh % d.H;
      float* drk = rel.active() ? rel_grads.f32() + bh * rel_grad : nullptr;  // (nb, D)
      float* drv = rel.active() ? drk + nb * d.D : nullptr;                   // (nb, Dv)
      const float* lse_bh = lse + bh * d.L;
      // dS = P * (dP - delta) with delta_i = sum_j P_ij dP_ij = dO_i . O_i
      // (also under dropout, since O already holds the dropped weights).
      for (std::int64_t i = 0; i < d.L; ++i) {
        std::int64_t ldo = 0;
        const float* o = rows_as_f32(out.at(b, h) + i * out.row_stride, out.row_stride, 1, d.Dv, orow, ldo);
        delta[i] = simd::dot(dout.at(b, h) + i * dout.row_stride, o, d.Dv);
        std::fill_n(dq.at(b, h) + i * dq.row_stride, d.D, 0.0f);
        if (rel.rel_v)
          for (std::int64_t c = 0; c < nb; ++c)
            da[i * nb + c] = simd::dot(dout.at(b, h) + i * dout.row_stride, rel.rel_v + c * d.Dv, d.Dv);
      }
      if (rel.active())
        for (std::int64_t i0 = 0; i0 < d.L; i0 += Br) {
          const std::int64_t nr = std::min(Br, d.L - i0);
          std::int64_t ldq = 0;
          const float* qi = rows_as_f32(q.at(b, h) + i0 * q.row_stride, q.row_stride, nr, d.D, qbuf, ldq);
          relative_scores(qa + i0 * nb, qi, ldq, nr, d.D, rel, scale);
        }
      for (std::int64_t j0 = 0; j0 < d.S; j0 += Bc) {
        const std::int64_t nc_block = std::min(Bc, d.S - j0);
        std::int64_t ldk = 0, ldv = 0, ldq = 0;
        const float* kj = rows_as_f32(k.at(b, h) + j0 * k.row_stride, k.row_stride, nc_block, d.D, kbuf, ldk);
        const float* vj = rows_as_f32(v.at(b, h) + j0 * v.row_stride, v.row_stride, nc_block, d.Dv, vbuf, ldv);
        std::fill_n(dk_acc, nc_block * d.D, 0.0f);
        std::fill_n(dv_acc, nc_block * d.Dv, 0.0f);
        tm.pack_t(kt, Bc, kj, ldk, nc_block, d.D);
        tm.pack_t(vt, Bc, vj, ldv, nc_block, d.Dv);
        for (std::int64_t i0_block = 0; i0_block < d.L; i0_block += Br) {
          const std::int64_t nr_block = std::min(Br, d.L - i0_block);
          const TilePlan plan = geo.plan(b, i0_block, nr_block, j0, nc_block);
          if (plan.skip) continue;
          // Only the causally visible rows and columns of the tile: the rest has P = 0.
          const auto [r0, nc] = geo.causal_span(i0_block, nr_block, j0, nc_block);
          const std::int64_t i0 = i0_block + r0, nr = nr_block - r0;
          const float* qi = rows_as_f32(q.at(b, h) + i0 * q.row_stride, q.row_stride, nr, d.D, qbuf, ldq);
          const float* doi = dout.at(b, h) + i0 * dout.row_stride;
          // P = exp(scale * Q K^T + mask - lse)
          tm.q_kt(p, Bc, qi, ldq, kj, ldk, kt, Bc, nr, nc, d.D, scale);
          const std::int64_t jm = std::min(j0 + nc, geo.cols) - j0;  // tile columns under the masks
          if (plan.elementwise) geo.apply(p, Bc, b, h, i0, nr, j0, nc, qa + i0 * nb);
          for (std::int64_t r = 0; r < nr; ++r) simd::exp_shift_sum(p + r * Bc, nc, lse_bh[i0 + r]);
          const float* pv = p;  // the weights that multiplied V
          if (dropout.active()) {
            for (std::int64_t r = 0; r < nr; ++r) {
              std::copy_n(p + r * Bc, nc, pd + r * Bc);
              apply_dropout_row(pd + r * Bc, nc, dropout_index(d, b, h, i0 + r, j0), dropout);
            }
            pv = pd;
          }
          // dV_j += dropout(P)^T dO_i
          tm.at_b(dv_acc, d.Dv, pv, Bc, doi, dout.row_stride, nc, d.Dv, nr, 1.0f, true);
          // dP = dO_i V_j^T (the gradient of the dropped weights), then dS in place.
          tm.q_kt(dp, Bc, doi, dout.row_stride, vj, ldv, vt, Bc, nr, nc, d.Dv, 1.0f);
          if (rel.rel_v && jm > 0) {
            // out_i also held sum_j pv_ij rel_v[c]: dP gains dO_i . rel_v[c],
            // and rel_v's gradient gains the bucket sums of pv times dO_i.
            std::fill(gb, gb + nr * nb, 0.0f);
            for (std::int64_t r = 0; r < nr; ++r) {
              const float* dar = da + (i0 + r) * nb;
              const std::int64_t qpos = masks.query_offset + i0 + r;
              add_bucket_terms(dp + r * Bc, jm, j0, qpos, dar, rel);
              bucket_sums(gb + r * nb, pv + r * Bc, jm, j0, qpos, rel);
            }
            small_atb(drv, gb, nb, doi, dout.row_stride, nr, nb, d.Dv, 1.0f);
          }
          // dS = pd * dP - P * delta with pd = dropout(P): the mask's draws are
          // not needed again (where P is 0, so is every term).
          for (std::int64_t r = 0; r < nr; ++r) {
            if (dropout.active()) simd::dropout_softmax_grad_row(dp + r * Bc, p + r * Bc, pd + r * Bc, nc, delta[i0 + r]);
            else simd::softmax_grad_row(dp + r * Bc, p + r * Bc, nc, delta[i0 + r]);
          }
          if (rel.active() && jm > 0) {
            // score_ij also held scale * q_i . rel_k[c]: with g the bucket sums
            // of dS, dQ += scale * g rel_k and rel_k's gradient += scale * g^T Q.
            std::fill(gb, gb + nr * nb, 0.0f);
            for (std::int64_t r = 0; r < nr; ++r)
              bucket_sums(gb + r * nb, dp + r * Bc, jm, j0, masks.query_offset + i0 + r, rel);
            small_ab(dq.at(b, h) + i0 * dq.row_stride, gb, rel.rel_k, nr, d.D, nb, scale, dq.row_stride, nb);
            small_atb(drk, gb, nb, qi, ldq, nr, nb, d.D, scale);
          }
          // dQ_i += scale * dS K_j;  dK_j += scale * dS^T Q_i
          tm.ab(dq.at(b, h) + i0 * dq.row_stride, dq.row_stride, dp, Bc, kj, ldk, nr, d.D, nc, scale, true);
          tm.at_b(dk_acc, d.D, dp, Bc, qi, ldq, nc, d.D, nr, scale, true);
        }
        for (std::int64_t c = 0; c < nc_block; ++c) {
          std::copy_n(dk_acc + c * d.D, d.D, dk.at(b, h) + (j0 + c) * dk.row_stride);
          std::copy_n(dv_acc + c * d.Dv, d.Dv, dv.at(b, h) + (j0 + c) * dv.row_stride);
        }
      }
    }
  }
  if (rel.active()) add_relative_grads(rel, rel_grads.f32(), d.B * d.H, d.D, d.Dv);
}

template <typename T>
void attention_fused_weights(float* weights, bool average_heads, const float* lse, HeadsView<const T> q,
                             HeadsView<const T> k, const AttentionMasks<float>& masks, const AttentionDims& d,
                             float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  check_tiles(tiles);
  const MaskGeometry geo(masks, d);
  const std::int64_t Br = tiles.q_block, Bc = tiles.k_block;
  const std::int64_t nqb = ceil_div(d.L, Br);
  const TileMath tm{tiles_use_blas(tiles, d)};
  const RelativePositions<float>& rel = masks.relative;
  const std::int64_t nb = rel.active() ? rel.buckets() : 0;
  // P (Br, Bc), K^T (D, Bc), qa (Br, nb); 16-bit storage: a query block (Br, D) and a key tile (Bc, D), widened.
  const std::int64_t per_thread = Br * Bc + d.D * Bc + Br * nb + (kHalfStorage<T> ? (Br + Bc) * d.D : 0);
  Tensor workspace = Tensor::empty({static_cast<std::int64_t>(omp_get_max_threads()) * per_thread});
  const float inv_h = 1.0f / static_cast<float>(d.H);

  // Tasks own (batch, query block) so head averaging writes disjoint rows.
#pragma omp parallel
  {
    float* p = workspace.f32() + omp_get_thread_num() * per_thread;  // (Br, Bc)
    float* kt = p + Br * Bc;                                           // (D, Bc)
    float* qa = kt + d.D * Bc;                                         // (Br, nb)
    float* qbuf = qa + Br * nb;                                        // (Br, D)
    float* kbuf = qbuf + Br * d.D;                                     // (Bc, D)
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
          tm.pack_t(kt, Bc, kj, ldk, nc, d.D);
          tm.q_kt(p, Bc, qi, ldq, kj, ldk, kt, Bc, nr, nc, d.D, scale);
          if (plan.elementwise) geo.apply(p, Bc, b, h, i0, nr, j0, nc, qa);
          for (std::int64_t r = 0; r < nr; ++r) {
            float* row = p + r * Bc;
            simd::exp_shift_sum(row, nc, lse_bh[i0 + r]);
            if (dropout.active()) apply_dropout_row(row, nc, dropout_index(d, b, h, i0 + r, j0), dropout);
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

#define MULTIHEAD_INSTANTIATE(T)                                                                                   \
  template void attention_fused_forward<T>(HeadsView<T>, float*, HeadsView<const T>, HeadsView<const T>,               \
                                           HeadsView<const T>, const AttentionMasks<float>&, const AttentionDims&,     \
                                           float, const AttentionDropout&, const AttentionTiles&);                     \
  template void attention_fused_backward<T>(HeadsView<float>, HeadsView<float>, HeadsView<float>, const float*,        \
                                            HeadsView<const T>, HeadsView<const float>, HeadsView<const T>,            \
                                            HeadsView<const T>, HeadsView<const T>, const AttentionMasks<float>&,      \
                                            const AttentionDims&, float, const AttentionDropout&,                      \
                                            const AttentionTiles&);                                                    \
  template void attention_fused_weights<T>(float*, bool, const float*, HeadsView<const T>, HeadsView<const T>,         \
                                           const AttentionMasks<float>&, const AttentionDims&, float,                  \
                                           const AttentionDropout&, const AttentionTiles&);
MULTIHEAD_INSTANTIATE(float)
MULTIHEAD_INSTANTIATE(BF16)
MULTIHEAD_INSTANTIATE(F16)
#undef MULTIHEAD_INSTANTIATE

}  // namespace multihead
