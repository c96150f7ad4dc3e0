// SPDX-License-Identifier: Apache-2.0
// Shared vocabulary of the attention kernels: sizes, strided head views,
// masks (with PyTorch nn.MultiheadAttention polarity), the positions that act
// on the scores, and dropout.
#pragma once

#include <cstdint>
#include <limits>

namespace multihead {

struct AttentionDims {
  std::int64_t B = 1;   // batch
  std::int64_t H = 1;   // heads
  std::int64_t L = 1;   // query positions
  std::int64_t S = 1;   // key/value positions
  std::int64_t D = 1;   // query/key head dim
  std::int64_t Dv = 1;  // value head dim
};

// Element (b, pos, h, d) lives at ptr[b*batch_stride + pos*row_stride + (h/group)*head_stride + d].
// With (B, L, H*D) activations: row_stride = H*D (or 3E inside a packed QKV
// buffer), head_stride = D. Heads are split and merged by these strides alone,
// never by copies.
template <typename T>
struct HeadsView {
  T* ptr = nullptr;
  std::int64_t batch_stride = 0;
  std::int64_t row_stride = 0;
  std::int64_t head_stride = 0;
  // Grouped-query attention: `group` query heads share one key/value head,
  // so head h reads stored head h / group. 1 for plain multi-head attention.
  std::int64_t group = 1;

  T* at(std::int64_t b, std::int64_t h) const { return ptr + b * batch_stride + (h / group) * head_stride; }
};

// Which keys a causal query may see.
//   kTopLeft     (PyTorch is_causal): query i sees keys j <= i.
//   kBottomRight (FlashAttention >= 2.1): query i sees keys j <= i + S - L,
//                so the last query sees every key; the two agree when L == S.
enum class CausalAlign : std::uint8_t { kNone, kTopLeft, kBottomRight };

// Shaw et al. (2018) relative positions. Key j, seen from query i, uses the
// bucket c = clamp(j - (query_offset + i), -clip, clip) + clip:
//   score_ij += scale * q_i . rel_k[c]          out_i += sum_j p_ij rel_v[c]
// The embeddings are shared by all heads and batch elements.
template <typename T>
struct RelativePositions {
  const T* rel_k = nullptr;  // (2*clip + 1, D); null: no relative positions
  const T* rel_v = nullptr;  // (2*clip + 1, Dv), or null for keys only
  std::int64_t clip = 0;

  bool active() const { return rel_k != nullptr; }
  std::int64_t buckets() const { return 2 * clip + 1; }
  std::int64_t bucket(std::int64_t query_pos, std::int64_t j) const {
    const std::int64_t r = j - query_pos;
    return (r < -clip ? -clip : r > clip ? clip : r) + clip;
  }
};

// Where a backward pass adds the relative-position embeddings' gradients
// (the shapes of rel_k and rel_v); null: not wanted.
template <typename T>
struct RelativePositionGrads {
  T* d_rel_k = nullptr;  // (2*clip + 1, D), accumulated
  T* d_rel_v = nullptr;  // (2*clip + 1, Dv), accumulated
};

// The positions that act on the scores inside attention, apart from the
// masks: ALiBi (Press et al. 2022) adds -slope[h] * |query_offset + i - j|
// to every score of head h whose key is under the masks; relative positions
// add their terms to the same keys. Read only.
template <typename T>
struct ScorePositions {
  const T* alibi_slopes = nullptr;  // (H); null: no ALiBi
  std::int64_t query_offset = 0;    // position of query 0, counted in keys
  RelativePositions<T> relative;

  bool active() const { return alibi_slopes != nullptr || relative.active(); }
  T alibi(std::int64_t h, std::int64_t i, std::int64_t j) const {
    const std::int64_t dist = query_offset + i - j;
    return -alibi_slopes[h] * static_cast<T>(dist < 0 ? -dist : dist);
  }
};

// Masks with nn.MultiheadAttention's meanings: a nonzero bool means "masked",
// a float is added to the scores. Every pointer is optional; bool masks are
// OR-ed together and float masks summed. The masks cover the first
// `masked_cols` keys (the caller's S); keys past that (the bias_k and zero
// positions of add_bias_kv / add_zero_attn) are never masked, as PyTorch pads
// both masks with an unmasked column for them.
template <typename T>
struct AttentionMasks {
  const std::uint8_t* key_padding_bool = nullptr;  // (B, masked_cols)
  const T* key_padding_add = nullptr;              // (B, masked_cols)
  const std::uint8_t* attn_bool = nullptr;         // (L, masked_cols) or (B*H, L, masked_cols)
  const T* attn_add = nullptr;                     // same shapes as attn_bool
  bool attn_per_head = false;                      // true: attn mask is (B*H, L, masked_cols)
  CausalAlign causal = CausalAlign::kNone;
  std::int64_t masked_cols = -1;  // -1: all S keys
  // Sparse patterns, on positions aligned bottom-right as FlashAttention's
  // window: query i sits at position p_i = i + masked_cols - L.
  //   sliding window: query i sees keys p_i - window_left .. p_i + window_right
  //                   inclusive; -1 means unlimited on that side.
  //   block-sparse:   with blocks of sparse_block positions, query i sees the
  //                   keys of its own block and of sparse_neighbours blocks on
  //                   each side; the first global_tokens positions see and are
  //                   seen by everything. 0 turns it off.
  std::int64_t window_left = -1, window_right = -1;
  std::int64_t sparse_block = 0, sparse_neighbours = 0, global_tokens = 0;

  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  // Whether key j is outside the sparse pattern of query i (cols: masked_cols resolved).
  bool sparse_blocked(std::int64_t i, std::int64_t j, std::int64_t L, std::int64_t cols) const {
    const std::int64_t p = i + cols - L;
    if (window_left >= 0 && j < p - window_left) return true;
    if (window_right >= 0 && j > p + window_right) return true;
    if (sparse_block > 0 && j >= global_tokens && p >= global_tokens) {
      const std::int64_t qb = p < 0 ? -1 : p / sparse_block, kb = j / sparse_block;
      if (kb < qb - sparse_neighbours || kb > qb + sparse_neighbours) return true;
    }
    return false;
  }

  // Additive bias for score (b, h, i, j); -inf when the key is masked out.
  T bias(const AttentionDims& d, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    const std::int64_t cols = masked_cols < 0 ? d.S : masked_cols;
    if (j >= cols) return T(0);
    constexpr T kMasked = -std::numeric_limits<T>::infinity();
    if (causal == CausalAlign::kTopLeft && j > i) return kMasked;
    if (causal == CausalAlign::kBottomRight && j > i + cols - d.L) return kMasked;
    if (key_padding_bool && key_padding_bool[b * cols + j]) return kMasked;
    if (sparse_blocked(i, j, d.L, cols)) return kMasked;
    std::int64_t a = ((attn_per_head ? (b * d.H + h) * d.L : 0) + i) * cols + j;
    if (attn_bool && attn_bool[a]) return kMasked;
    T add = T(0);
    if (key_padding_add) add += key_padding_add[b * cols + j];
    if (attn_add) add += attn_add[a];
    return add;
  }
};

// Everything a score is made of beside scale * q . k: the masks, and the
// positions that act inside attention. What the attention kernels read; a
// call without positions passes its masks alone.
template <typename T>
struct ScoreTerms {
  ScoreTerms(const AttentionMasks<T>& m = {}, const ScorePositions<T>& p = {})  // NOLINT: masks alone convert
      : masks(m), positions(p) {}

  AttentionMasks<T> masks;
  ScorePositions<T> positions;

  // The masks' bias for score (b, h, i, j) with ALiBi's term, on the keys
  // under the masks (-inf when masked out). Relative positions, which
  // depend on q, are the kernels' to add.
  T bias(const AttentionDims& d, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    const T x = masks.bias(d, b, h, i, j);
    const std::int64_t cols = masks.masked_cols < 0 ? d.S : masks.masked_cols;
    return positions.alibi_slopes && j < cols ? x + positions.alibi(h, i, j) : x;
  }
};

// Inverted dropout on the attention weights: weight (b, h, i, j) is kept when
// uniform_at(seed, stream, ((b*H + h)*L + i)*S + j) >= p, and scaled by 1/(1-p).
struct AttentionDropout {
  float p = 0.0f;  // 0 disables dropout
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  // Optional: one keep bit per weight, which the fused forward kernels
  // record and the fused backward kernels read instead of drawing the mask
  // again (the same values). Row (b, h, i) takes keep_words(S) words from
  // word (b*H + h)*L + i times that; bit j of the row is weight j's.
  std::uint64_t* keep_bits = nullptr;

  bool active() const { return p > 0.0f; }
  static std::int64_t keep_words(std::int64_t S) { return (S + 63) / 64; }
};

}  // namespace multihead
