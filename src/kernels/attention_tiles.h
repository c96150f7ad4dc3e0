// SPDX-License-Identifier: Apache-2.0
// What the fused attention kernels share: how masks, sparse patterns and
// relative positions fall on a (query block, key block) tile, the small
// products of relative positions, and the fp32 kernels' tile products.
// Internal header of src/kernels.
// Compiled once for each Highway target of the file that includes it (after
// hwy/foreach_target.h), into that target's namespace: the usual include
// guard, toggled by Highway on each pass.
#if defined(MULTIHEAD_KERNELS_ATTENTION_TILES_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MULTIHEAD_KERNELS_ATTENTION_TILES_H_
#undef MULTIHEAD_KERNELS_ATTENTION_TILES_H_
#else
#define MULTIHEAD_KERNELS_ATTENTION_TILES_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "multihead/core/error.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_types.h"
#include "multihead/kernels/dropout.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/transpose.h"
#include "simd_rows.h"
#include "tile_gemm.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE::attention_tiles {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

// Relative-position buckets along a tile row: the columns c < n of keys
// j0 + c seen from query position qpos. Keys more than clip before the query
// share bucket 0, keys more than clip after it share bucket 2 clip, and the
// 2 clip + 1 keys between have a bucket each. The runs [0, lo) and [hi, n)
// are the shared ones.
struct BucketRuns {
  std::int64_t lo, hi;
  BucketRuns(std::int64_t n, std::int64_t j0, std::int64_t qpos, std::int64_t clip)
      : lo(std::clamp<std::int64_t>(qpos - clip - j0, 0, n)),
        hi(std::clamp<std::int64_t>(qpos + clip + 1 - j0, 0, n)) {}
};

// row[c] += t[bucket(qpos, j0 + c)] for c < n.
inline void add_bucket_terms(float* row, std::int64_t n, std::int64_t j0, std::int64_t qpos, const float* t,
                             const RelativePositions<float>& rel) {
  const BucketRuns run(n, j0, qpos, rel.clip);
  simd::add_scalar(row, run.lo, t[0]);
  for (std::int64_t c = run.lo; c < run.hi; ++c) row[c] += t[rel.bucket(qpos, j0 + c)];
  simd::add_scalar(row + run.hi, n - run.hi, t[2 * rel.clip]);
}

// w[bucket(qpos, j0 + c)] += x[c] for c < n.
inline void bucket_sums(float* w, const float* x, std::int64_t n, std::int64_t j0, std::int64_t qpos,
                        const RelativePositions<float>& rel) {
  const BucketRuns run(n, j0, qpos, rel.clip);
  w[0] += simd::row_sum(x, run.lo);
  for (std::int64_t c = run.lo; c < run.hi; ++c) w[rel.bucket(qpos, j0 + c)] += x[c];
  w[2 * rel.clip] += simd::row_sum(x + run.hi, n - run.hi);
}

// Which part of a (query block, key block) tile the masks touch.
struct TilePlan {
  bool skip = false;         // every score is masked (causality or padding): nothing to compute
  bool elementwise = false;  // some scores need masks applied one by one
};

struct MaskGeometry {
  const AttentionMasks<float>& m;
  const ScorePositions<float>& pos;
  const AttentionDims& d;
  std::int64_t cols;      // keys the masks cover
  std::int64_t offset;    // causal: query i sees keys j <= i + offset
  bool has_tensor_masks;  // masks or position terms that act score by score

  MaskGeometry(const ScoreTerms<float>& terms, const AttentionDims& dims)
      : m(terms.masks),
        pos(terms.positions),
        d(dims),
        cols(m.masked_cols < 0 ? dims.S : m.masked_cols),
        offset(m.causal == CausalAlign::kBottomRight ? cols - dims.L : 0),
        has_tensor_masks(m.key_padding_bool || m.key_padding_add || m.attn_bool || m.attn_add || pos.active()) {}

  TilePlan plan(std::int64_t b, std::int64_t i0, std::int64_t nr, std::int64_t j0, std::int64_t nc) const {
    TilePlan p;
    const bool in_masked_cols = j0 < cols;
    const bool all_masked_cols = j0 + nc <= cols;  // keys past `cols` (bias_k / zero) are never masked
    if (m.causal != CausalAlign::kNone && in_masked_cols) {
      if (all_masked_cols && j0 > i0 + nr - 1 + offset) p.skip = true;
      if (j0 + nc - 1 > i0 + offset) p.elementwise = true;
    }
    if ((m.has_window() || m.sparse_block > 0) && in_masked_cols) {
      // Skip a tile no query of which reaches any of its keys; a tile the
      // pattern does not fully cover is masked element by element.
      const std::int64_t p0 = i0 + cols - d.L, p1 = i0 + nr - 1 + cols - d.L;
      const std::int64_t j1 = std::min(j0 + nc, cols) - 1;
      bool none = false;
      if (m.window_right >= 0 && j0 > p1 + m.window_right) none = true;
      if (m.window_left >= 0 && j1 < p0 - m.window_left) none = true;
      if (m.sparse_block > 0 && j0 >= m.global_tokens && p0 >= m.global_tokens) {
        const std::int64_t qb0 = p0 / m.sparse_block, qb1 = p1 / m.sparse_block;
        const std::int64_t kb0 = j0 / m.sparse_block, kb1 = j1 / m.sparse_block;
        if (kb0 > qb1 + m.sparse_neighbours || kb1 < qb0 - m.sparse_neighbours) none = true;
      }
      if (none && all_masked_cols) p.skip = true;
      // Element-wise masking only where the pattern cuts through the tile.
      bool inside = all_masked_cols;
      if (m.window_left >= 0 && j0 < p1 - m.window_left) inside = false;
      if (m.window_right >= 0 && j1 > p0 + m.window_right) inside = false;
      if (m.sparse_block > 0 && !(j1 < m.global_tokens || p1 < m.global_tokens)) {
        const std::int64_t qb0 = std::max<std::int64_t>(p0, 0) / m.sparse_block, qb1 = p1 / m.sparse_block;
        const std::int64_t kb0 = j0 / m.sparse_block, kb1 = j1 / m.sparse_block;
        if (kb0 < qb1 - m.sparse_neighbours || kb1 > qb0 + m.sparse_neighbours || p0 < 0) inside = false;
      }
      if (!inside) p.elementwise = true;
    }
    if (m.key_padding_bool && all_masked_cols) {  // a block of keys that are all padding
      const std::uint8_t* kp = m.key_padding_bool + b * cols + j0;
      if (std::all_of(kp, kp + nc, [](std::uint8_t x) { return x != 0; })) p.skip = true;
    }
    if (has_tensor_masks && in_masked_cols) p.elementwise = true;
    return p;
  }

  // The part of a tile that causality leaves visible: rows [r0, nr) see at
  // least one of its keys, and no row sees past column nc. The rest of the
  // tile is all -inf, so it is neither computed nor read. Keys past `cols`
  // (bias_k / zero) are visible to every row, so a tile reaching them is whole.
  struct Span {
    std::int64_t r0, nc;
  };
  Span causal_span(std::int64_t i0, std::int64_t nr, std::int64_t j0, std::int64_t nc) const {
    if (m.causal == CausalAlign::kNone || j0 + nc > cols) return {0, nc};
    return {std::clamp<std::int64_t>(j0 - offset - i0, 0, nr), std::clamp<std::int64_t>(i0 + nr + offset - j0, 0, nc)};
  }

  // Adds float masks and position terms, and sets masked scores to -inf, in
  // s (nr, nc), row stride lds. qa (nr, buckets): the relative-key scores of
  // the block's queries, when relative positions are on.
  void apply(float* s, std::int64_t lds, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t nr,
             std::int64_t j0, std::int64_t nc, const float* qa) const {
    const std::int64_t jm = std::min(j0 + nc, cols) - j0;  // tile columns under the masks
    if (jm <= 0) return;
    for (std::int64_t r = 0; r < nr; ++r) {
      float* row = s + r * lds;
      const std::int64_t i = i0 + r;
      if (m.key_padding_add) {
        const float* kp = m.key_padding_add + b * cols + j0;
        for (std::int64_t c = 0; c < jm; ++c) row[c] += kp[c];
      }
      const std::int64_t a = ((m.attn_per_head ? (b * d.H + h) * d.L : 0) + i) * cols + j0;
      if (m.attn_add) {
        const float* am = m.attn_add + a;
        for (std::int64_t c = 0; c < jm; ++c) row[c] += am[c];
      }
      if (pos.relative.active()) {
        const float* qar = qa + r * pos.relative.buckets();
        const std::int64_t qpos = pos.query_offset + i;
        add_bucket_terms(row, jm, j0, qpos, qar, pos.relative);
      }
      if (pos.alibi_slopes) {
        const float slope = pos.alibi_slopes[h];
        const std::int64_t qpos = pos.query_offset + i - j0;
        for (std::int64_t c = 0; c < jm; ++c) row[c] -= slope * static_cast<float>(qpos > c ? qpos - c : c - qpos);
      }
      if (m.key_padding_bool) {
        const std::uint8_t* kp = m.key_padding_bool + b * cols + j0;
        for (std::int64_t c = 0; c < jm; ++c) row[c] = kp[c] ? -kInf : row[c];
      }
      if (m.attn_bool) {
        const std::uint8_t* am = m.attn_bool + a;
        for (std::int64_t c = 0; c < jm; ++c) row[c] = am[c] ? -kInf : row[c];
      }
      if (m.causal != CausalAlign::kNone) {
        for (std::int64_t c = std::max<std::int64_t>(0, i + offset + 1 - j0); c < jm; ++c) row[c] = -kInf;
      }
      if (m.has_window() || m.sparse_block > 0) {
        // The keys outside the pattern form at most four runs (before and
        // after the window, between the global tokens and the neighbouring
        // blocks, after those blocks): masked run by run, as sparse_blocked
        // defines them.
        const std::int64_t p = i + cols - d.L, end = j0 + jm;
        auto mask_keys = [&](std::int64_t from, std::int64_t to) {  // keys [from, to)
          from = std::max(from, j0), to = std::min(to, end);
          if (from < to) std::fill(row + (from - j0), row + (to - j0), -kInf);
        };
        if (m.window_left >= 0) mask_keys(j0, p - m.window_left);
        if (m.window_right >= 0) mask_keys(p + m.window_right + 1, end);
        if (m.sparse_block > 0 && p >= m.global_tokens) {
          const std::int64_t qb = p / m.sparse_block;
          mask_keys(m.global_tokens, (qb - m.sparse_neighbours) * m.sparse_block);
          mask_keys(std::max(m.global_tokens, (qb + m.sparse_neighbours + 1) * m.sparse_block), end);
        }
      }
    }
  }
};

inline std::uint64_t dropout_index(const AttentionDims& d, std::int64_t b, std::int64_t h, std::int64_t i,
                                   std::int64_t j) {
  return static_cast<std::uint64_t>(((b * d.H + h) * d.L + i) * d.S + j);
}

// What a kernel does with the keep bits when the layer gives them: the
// forward records them, the backward reads them, the weights pass neither.
enum class KeepBits { kIgnore, kRecord, kReplay };

// y = dropout(x) over weights (b, h, i, j0 .. j0 + n) (y may be x), no
// threads: the kernels call it inside their own parallel regions.
inline void apply_dropout_row(float* y, const float* x, std::int64_t n, const AttentionDims& d, std::int64_t b,
                              std::int64_t h, std::int64_t i, std::int64_t j0, const AttentionDropout& drop,
                              KeepBits use) {
  const DropoutSpec spec{drop.p, drop.seed, drop.stream};
  std::uint64_t* row = drop.keep_bits == nullptr || use == KeepBits::kIgnore
                           ? nullptr
                           : drop.keep_bits + ((b * d.H + h) * d.L + i) * AttentionDropout::keep_words(d.S);
  if (row != nullptr && use == KeepBits::kReplay) return dropout_row_from_bits(y, x, n, spec, row, j0);
  const std::uint64_t base = dropout_index(d, b, h, i, j0);
  if (row != nullptr) return dropout_row(y, x, n, base, spec, row, j0);
  dropout_row(y, x, n, base, spec);
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// qa (nr, buckets) = scale * Q (nr, D) rel_k^T, Q with row stride ldq.
inline void relative_scores(float* qa, const float* q, std::int64_t ldq, std::int64_t nr, std::int64_t D,
                            const RelativePositions<float>& rel, float scale) {
  for (std::int64_t r = 0; r < nr; ++r)
    for (std::int64_t c = 0; c < rel.buckets(); ++c)
      qa[r * rel.buckets() + c] = scale * simd::dot(q + r * ldq, rel.rel_k + c * D, D);
}

// C (m, n) += alpha * A (m, k) B (k, n), all contiguous: the small products of
// relative positions (k = buckets).
inline void small_ab(float* C, const float* A, const float* B, std::int64_t m, std::int64_t n, std::int64_t k,
                     float alpha, std::int64_t ldc, std::int64_t lda) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p) {
      const float a = alpha * A[i * lda + p];
      if (a == 0.0f) continue;
      for (std::int64_t j = 0; j < n; ++j) C[i * ldc + j] += a * B[p * n + j];
    }
}

// C (k, n) += alpha * A^T B with A (m, k) row stride lda and B (m, n) row stride ldb.
inline void small_atb(float* C, const float* A, std::int64_t lda, const float* B, std::int64_t ldb, std::int64_t m,
                      std::int64_t k, std::int64_t n, float alpha) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p) {
      const float a = alpha * A[i * lda + p];
      if (a == 0.0f) continue;
      for (std::int64_t j = 0; j < n; ++j) C[p * n + j] += a * B[i * ldb + j];
    }
}

// One run of a query's scores x (n) into its running softmax (the online
// softmax of FlashAttention): with m the running maximum of row_scale x over
// the runs so far and l the running sum, x becomes exp(row_scale x - m) under
// the new maximum, and what was summed under the old one (l, the output
// accumulator acc (Dv), rel_v's bucket weights wv (nb)) is scaled to it.
// Returns false, with x zeroed, while every score of the row so far is masked.
// A NaN score makes m NaN, and so the row's output. coarse: the exponentials
// of simd::exp_shift_sum_coarse, for weights rounded to bf16.
inline bool online_softmax_run(float* x, std::int64_t n, float row_scale, float& m, float& l, float* acc,
                               std::int64_t Dv, float* wv, std::int64_t nb, bool coarse) {
  const float m_new = simd::max_keeping_nan(m, simd::row_max(x, n) * row_scale);
  if (m_new == -kInf) {
    std::fill(x, x + n, 0.0f);
    return false;
  }
  const float alpha = std::exp(m - m_new);  // 0 when m was -inf
  l = l * alpha +
      (coarse ? simd::exp_shift_sum_coarse(x, n, m_new, row_scale) : simd::exp_shift_sum(x, n, m_new, row_scale));
  if (alpha != 1.0f) {
    simd::scale_row(acc, Dv, alpha);
    if (nb > 0) simd::scale_row(wv, nb, alpha);
  }
  m = m_new;
  return true;
}

// The output row of a query (o, Dv) from its accumulated weighted values
// acc (Dv), value-bucket weights wv (nb) under relative positions, running
// max m and sum l; returns its lse. A row whose every key was masked (l = 0)
// gets O = 0 and lse = +inf, so that backward recomputes exp(S - inf) = 0.
inline float finish_row(float* o, float* acc, const float* wv, float m, float l, const RelativePositions<float>& rel,
                        std::int64_t nb, std::int64_t Dv) {
  if (l == 0.0f) {  // NaN carries on
    std::fill(o, o + Dv, 0.0f);
    return kInf;
  }
  const float inv = 1.0f / l;
  if (rel.rel_v) small_ab(acc, wv, rel.rel_v, 1, Dv, nb, 1.0f, Dv, nb);
  for (std::int64_t e = 0; e < Dv; ++e) o[e] = acc[e] * inv;
  return m + std::log(l);
}

// Where (batch, head) bh keeps its relative-position gradients in g
// (BH, nb, D + Dv): rel_k's (nb, D), then rel_v's (nb, Dv). Null pointers
// without relative positions.
struct RelativeGradSlot {
  float* k = nullptr;
  float* v = nullptr;
  RelativeGradSlot(float* g, const RelativePositions<float>& rel, std::int64_t bh, std::int64_t D, std::int64_t Dv) {
    if (!rel.active()) return;
    k = g + bh * rel.buckets() * (D + Dv);
    v = k + rel.buckets() * D;
  }
};

// Adds the relative-position gradients of every (batch, head), g (BH, nb,
// D + Dv), into out's d_rel_k and d_rel_v, in a fixed order so that the sum
// does not depend on which thread ran which head.
inline void add_relative_grads(const RelativePositions<float>& rel, const RelativePositionGrads<float>& out,
                               const float* g, std::int64_t BH, std::int64_t D, std::int64_t Dv) {
  const std::int64_t nb = rel.buckets();
  for (std::int64_t bh = 0; bh < BH; ++bh, g += nb * (D + Dv)) {
    if (out.d_rel_k)
      for (std::int64_t e = 0; e < nb * D; ++e) out.d_rel_k[e] += g[e];
    if (out.d_rel_v && rel.rel_v)
      for (std::int64_t e = 0; e < nb * Dv; ++e) out.d_rel_v[e] += g[nb * D + e];
  }
}

// Rows (n, w) of src, row stride ld, copied densely into dst (n, w).
template <typename T>
inline void pack_rows(T* dst, const T* src, std::int64_t ld, std::int64_t n, std::int64_t w) {
  for (std::int64_t r = 0; r < n; ++r) std::copy_n(src + r * ld, w, dst + r * w);
}

// Rows (n, w) of src, row stride lds, as dense fp32 rows at dst (row
// stride w): copied, or widened from 16 bits.
template <typename T>
inline void dense_rows_f32(float* dst, const T* src, std::int64_t lds, std::int64_t n, std::int64_t w) {
  if constexpr (std::is_same_v<T, float>) pack_rows(dst, src, lds, n, w);
  else
    for (std::int64_t r = 0; r < n; ++r) widen(dst + r * w, src + r * lds, w);
}

// The products on tiles, through the micro-kernel or BLAS. Names give the
// shapes: a "T" operand is used transposed.
struct TileMath {
  bool blas;

  // S (nr, nc), ld lds = alpha * Q (nr, D) K^T, with K (nc, D) row stride ldk.
  // The micro-kernel reads K^T from kt, panels laid out by pack_t.
  void q_kt(float* S, std::int64_t lds, const float* Q, std::int64_t ldq, const float* K, std::int64_t ldk,
            simd::GemmB kt, std::int64_t nr, std::int64_t nc, std::int64_t D, float alpha) const {
    if (blas) gemm(Trans::kNo, Trans::kYes, nr, nc, D, alpha, Q, ldq, K, ldk, 0.0f, S, lds);
    else simd::tile_gemm<false>(S, lds, Q, ldq, kt, nr, nc, D, alpha, false);
  }
  // C (m, n) (+)= alpha * A (m, k) B (k, n)
  void ab(float* C, std::int64_t ldc, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
          std::int64_t m, std::int64_t n, std::int64_t k, float alpha, bool accumulate) const {
    if (blas) gemm(Trans::kNo, Trans::kNo, m, n, k, alpha, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
    else simd::tile_gemm<false>(C, ldc, A, lda, simd::row_major_b(B, ldb), m, n, k, alpha, accumulate);
  }
  // C (m, n) (+)= alpha * A^T B with A stored (k, m), B (k, n)
  void at_b(float* C, std::int64_t ldc, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
            std::int64_t m, std::int64_t n, std::int64_t k, float alpha, bool accumulate) const {
    if (blas) gemm(Trans::kYes, Trans::kNo, m, n, k, alpha, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
    else simd::tile_gemm<true>(C, ldc, A, lda, simd::row_major_b(B, ldb), m, n, k, alpha, accumulate);
  }
  // src (rows, cols)^T laid out at dst in panels for the micro-kernel
  // (simd::panels_size(cols, rows) floats); nothing on BLAS.
  simd::GemmB pack_t(float* dst, const float* src, std::int64_t lds, std::int64_t rows, std::int64_t cols) const {
    if (blas) return {};
    return simd::pack_panels_t(dst, src, lds, rows, cols);
  }
};

// At most this many queries a head (cached decoding: the new positions
// over the cache), the forward kernel computes scores as dot products of
// query rows with key rows read in place: packing K^T for the micro-kernel
// would cost as much as the scores themselves.
inline constexpr std::int64_t kFewQueryRows = 4;

// S (nr, nc), ld lds = alpha * Q (nr, D) K^T, one dot product a score.
inline void dot_scores(float* S, std::int64_t lds, const float* Q, std::int64_t ldq, const float* K, std::int64_t ldk,
                       std::int64_t nr, std::int64_t nc, std::int64_t D, float alpha) {
  for (std::int64_t r = 0; r < nr; ++r)
    for (std::int64_t j = 0; j < nc; ++j) S[r * lds + j] = alpha * simd::dot(Q + r * ldq, K + j * ldk, D);
}

// Multiply-adds (QK^T and PV over every head) below which a forward call
// stays on the calling thread: a decoding step's, one query row a head over a
// few dozen keys, is a few thousand, and under perf such a call spent nearly
// all its time in OpenMP's start and join (an encoder-decoder's greedy
// decoding, 2 threads).
inline constexpr std::int64_t kThreadedFromMacs = std::int64_t{1} << 17;
inline bool worth_threads(const AttentionDims& d) { return d.B * d.H * d.L * d.S * (d.D + d.Dv) >= kThreadedFromMacs; }

inline bool tiles_use_blas(const AttentionTiles& t, const AttentionDims& d) {
  return t.gemm == TileGemm::kBlas || (t.gemm == TileGemm::kAuto && std::max(d.D, d.Dv) <= kBlasTileMaxDim);
}

// Q, K, V and O may be stored in 16 bits; the kernels widen what a tile
// needs into per-thread fp32 buffers and compute in fp32.
template <typename T>
constexpr bool kHalfStorage = !std::is_same_v<std::remove_const_t<T>, float>;

inline void check_tiles(const AttentionTiles& t) {
  check<ConfigError>(t.q_block > 0 && t.k_block > 0, "attention tile sizes must be positive, got {} x {}", t.q_block,
                     t.k_block);
}

}  // namespace multihead::HWY_NAMESPACE::attention_tiles
HWY_AFTER_NAMESPACE();

#endif  // MULTIHEAD_KERNELS_ATTENTION_TILES_H_
