// SPDX-License-Identifier: Apache-2.0
// The bf16 attention kernels' blocks: which keys a query block sees (KeyPlan),
// the per-thread buffers (Carver), a head's K or V laid out for the block
// products (HeadOperand, on AMX tiles or for oneDNN), where the scale is
// applied, and the run lengths. Shared by attention_bf16.cpp (forward) and
// attention_bf16_backward.cpp. Internal header of src/kernels.
// Compiled once for each Highway target of the file that includes it (after
// hwy/foreach_target.h), into that target's namespace: the usual include
// guard, toggled by Highway on each pass.
#if defined(MULTIHEAD_KERNELS_ATTENTION_BF16_BLOCKS_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MULTIHEAD_KERNELS_ATTENTION_BF16_BLOCKS_H_
#undef MULTIHEAD_KERNELS_ATTENTION_BF16_BLOCKS_H_
#else
#define MULTIHEAD_KERNELS_ATTENTION_BF16_BLOCKS_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <vector>

#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/transpose.h"
#include "amx_tiles.h"
#include "attention_tiles.h"
#include "simd_rows.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE::bf16_blocks {

using namespace attention_tiles;

// Causal blocks end mid-tile: the run is cut at the last key any of the
// block's queries sees, rounded up to this many keys so that few distinct
// product shapes (each a cached oneDNN primitive) arise.
constexpr std::int64_t kKeyAlign = 32;

struct KeyTile {  // a key tile some query of the block sees
  std::int64_t j0, nc;
  bool elementwise;  // masks apply score by score
  std::size_t run;   // the run it belongs to
};
// Consecutive visible keys [j0, j0 + n): one product. Its scores for the
// block's nr queries are a dense (nr, n) matrix at the start of the block's
// buffers, as oneDNN's fast (brgemm) matmuls want dense operands.
struct KeyRun {
  std::int64_t j0, n;
  float* row(float* base, std::int64_t r) const { return base + r * n; }
  BF16* row(BF16* base, std::int64_t r) const { return base + r * n; }
};

// The keys query rows [i0, i0 + nr) of batch b see, tile by tile and as runs.
struct KeyPlan {
  std::vector<KeyTile> tiles;
  std::vector<KeyRun> runs;

  // A run holds at most max_run keys (at least one tile's: Bc <= max_run).
  void make(const MaskGeometry& geo, std::int64_t S, std::int64_t Bc, std::int64_t b, std::int64_t i0, std::int64_t nr,
            std::int64_t max_run) {
    tiles.clear();
    runs.clear();
    for (std::int64_t j0 = 0; j0 < S; j0 += Bc) {
      const std::int64_t nc_block = std::min(Bc, S - j0);
      const TilePlan plan = geo.plan(b, i0, nr, j0, nc_block);
      if (plan.skip) continue;
      const std::int64_t seen = geo.causal_span(i0, nr, j0, nc_block).nc;
      if (seen == 0) continue;
      const std::int64_t nc = std::min(nc_block, ceil_div(seen, kKeyAlign) * kKeyAlign);
      if (runs.empty() || runs.back().j0 + runs.back().n != j0 || runs.back().n + nc > max_run) runs.push_back({j0, 0});
      runs.back().n += nc;
      tiles.push_back({j0, nc, plan.elementwise, runs.size() - 1});
    }
  }
  bool elementwise() const {
    return std::any_of(tiles.begin(), tiles.end(), [](const KeyTile& t) { return t.elementwise; });
  }
  // The masks on run u's scores, (nr, n) at run_buf, tile by tile where
  // they apply elementwise.
  void apply_masks(const MaskGeometry& geo, std::size_t u, float* run_buf, std::int64_t b, std::int64_t h,
                   std::int64_t i0, std::int64_t nr, const float* qa) const {
    for (const KeyTile& t : tiles)
      if (t.run == u && t.elementwise)
        geo.apply(run_buf + (t.j0 - runs[u].j0), runs[u].n, b, h, i0, nr, t.j0, t.nc, qa);
  }
};

// Keys of a run under the masks: relative positions index only those.
inline std::int64_t masked_keys(const MaskGeometry& geo, std::int64_t j0, std::int64_t n) {
  return std::clamp<std::int64_t>(geo.cols - j0, 0, n);
}

// Query rows per block. oneDNN's AMX matmul copies its right-hand operand
// (K, V) into the tile layout on every call, so on AMX taller blocks
// amortise that copy over more rows: twice the fp32 kernel's block ran the
// core 10-13% faster at L = 4096, the same at L = 512 and under a causal
// mask (docs/BENCHMARKS.md). AVX512-BF16 dot products gain nothing from it,
// and block-sparse patterns keep blocks on their grid (5% slower across it).
inline std::int64_t query_block(const AttentionTiles& tiles, const AttentionMasks<float>& masks) {
  const bool taller = bf16_path() == Bf16Path::kAmx && masks.sparse_block == 0;
  return taller ? 2 * tiles.q_block : tiles.q_block;
}

// Per-thread buffers, carved from one workspace tensor so that they count
// in the memory report. Sizes in floats; bf16 buffers take half a float each.
class Carver {
 public:
  explicit Carver(float* base) : at_(base) {}
  float* f32(std::int64_t n) { return take(n); }
  BF16* bf16(std::int64_t n) { return reinterpret_cast<BF16*>(take(bf16_floats(n))); }
  static std::int64_t bf16_floats(std::int64_t n) { return (n + 1) / 2; }
  static std::int64_t padded(std::int64_t n) { return (n + 15) / 16 * 16; }

 private:
  float* take(std::int64_t n) {
    float* p = at_;
    at_ += padded(n);  // 64-byte steps keep every buffer aligned as the first
    return p;
  }
  float* at_;
};

// A head's keys or values as the right-hand side of the block products:
// on AMX laid out once into tiles (amx_tiles.h) for products against their
// transpose (Q K^T, dO V^T) or against themselves (P V, dS K); elsewhere
// packed densely for oneDNN's matmul.
struct HeadOperand {
  // Which layouts a kernel needs of an operand.
  struct Use {
    bool transposed_tiles = false;  // for times_transposed on AMX
    bool tiles = false;             // for times on AMX
    bool dense = false;             // for oneDNN, either product
  };

  const BF16* dense = nullptr;    // (S, w), row stride w: oneDNN's operand
  const BF16* tiles_t = nullptr;  // amx packing of this^T (w, S), or null
  const BF16* tiles_n = nullptr;  // amx packing of this (S, w), or null
  std::int64_t S = 0, w = 0;

  // Values the layouts take, one after the other.
  static std::int64_t size(Use u, std::int64_t S, std::int64_t w) {
    return (u.transposed_tiles ? amx::packed_size(w, S) : 0) + (u.tiles ? amx::packed_size(S, w) : 0) +
           (u.dense ? S * w : 0);
  }
  // src (S, w), row stride ld, laid out into buf.
  static HeadOperand lay_out(Use u, BF16* buf, const BF16* src, std::int64_t ld, std::int64_t S, std::int64_t w) {
    HeadOperand op{nullptr, nullptr, nullptr, S, w};
    if (u.transposed_tiles) {
      amx::pack_transposed(buf, src, ld, S, w);
      op.tiles_t = buf;
      buf += amx::packed_size(w, S);
    }
    if (u.tiles) {
      amx::pack(buf, src, ld, S, w);
      op.tiles_n = buf;
      buf += amx::packed_size(S, w);
    }
    if (u.dense) {
      pack_rows(buf, src, ld, S, w);
      op.dense = buf;
    }
    return op;
  }

  // C (nr, n) = alpha A (nr, w) this[j0 : j0 + n]^T.
  void times_transposed(float* C, const BF16* A, std::int64_t nr, std::int64_t j0, std::int64_t n, float alpha) const {
    if (tiles_t) return amx::gemm(C, n, A, w, amx::part(tiles_t, w, 0, j0), nr, n, w, alpha, false);
    gemm_bf16(Trans::kNo, Trans::kYes, nr, n, w, alpha, A, w, dense + j0 * w, w, 0.0f, C, n);
  }
  // C (nr, w) = A (nr, n) this[j0 : j0 + n], or C += that with accumulate.
  void times(float* C, const BF16* A, std::int64_t nr, std::int64_t j0, std::int64_t n, bool accumulate) const {
    if (tiles_n) return amx::gemm(C, w, A, n, amx::part(tiles_n, S, j0, 0), nr, w, n, 1.0f, accumulate);
    gemm_bf16(Trans::kNo, Trans::kNo, nr, w, n, 1.0f, A, n, dense + j0 * w, w, accumulate ? 1.0f : 0.0f, C, w);
  }
};

// Where the scores' scale is applied: off tiles by the product (oneDNN's
// output scale, product_scale); on AMX tiles by the softmax's row pass as it
// reads each row (row_scale), unless the scores take it in a pass of their
// own: masks must add to scaled scores first, or the scale is not positive
// (it would not commute with the softmax's maximum).
struct ScalePlace {
  float product_scale;
  bool own_pass;
  float row_scale;
  ScalePlace(const KeyPlan& keys, float scale, bool on_tiles)
      : product_scale(on_tiles ? 1.0f : scale),
        own_pass(on_tiles && (keys.elementwise() || !(scale > 0.0f))),
        row_scale(on_tiles && !own_pass ? scale : 1.0f) {}
};

// Whether the block products run on AMX tiles: where the CPU has them and
// key tiles start on the tile grid (32 keys).
inline bool products_on_tiles(std::int64_t Bc) { return Bc % 32 == 0 && amx::usable(); }
// Products against K or V themselves (P V, dS K; inner length: keys) take
// tiles from this many keys on: at 256 keys oneDNN's matmul ran them as fast
// or faster, at 1024 tiles were 4% faster (bench attention, AMX Xeon).
constexpr std::int64_t kTilesFromKeys = 1024;
// The backward takes a query block's keys in runs of at most this many
// (or one key tile, if larger), every step for one run before the next: a
// run's scores, weights and their gradients, (Br, run) fp32 each, then
// stay in the caches from one step to the next. At L = 4096 (AMX Xeon),
// runs of 256, 512, 1024 and all 4096 keys ran the core in 175, 186, 195
// and 215 ms.
constexpr std::int64_t kBackwardRunKeys = 256;
// The forward likewise, with the softmax online across runs.
constexpr std::int64_t kForwardRunKeys = 512;

// dst (cols, rows), row stride ldd = src (rows, cols)^T, row stride lds:
// 16-bit values, in 32 x 32 blocks.
inline void transpose_bf16(BF16* dst, std::int64_t ldd, const BF16* src, std::int64_t lds, std::int64_t rows,
                           std::int64_t cols) {
  constexpr std::int64_t kBlock = 32;
  for (std::int64_t i0 = 0; i0 < rows; i0 += kBlock)
    for (std::int64_t j0 = 0; j0 < cols; j0 += kBlock)
      for (std::int64_t j = j0; j < std::min(cols, j0 + kBlock); ++j)
        for (std::int64_t i = i0; i < std::min(rows, i0 + kBlock); ++i) dst[j * ldd + i] = src[i * lds + j];
}

// Row r of an (nr, n) fp32 operand at rows is final: on AMX, pack the pair
// of rows it completes (the last row of an odd count with zeros) into a
// packing of it for the tiles, and after the last row zero the padding.
inline void pack_as_produced(BF16* packed, const float* rows, std::int64_t r, std::int64_t nr, std::int64_t n) {
  if (r % 2 == 1) amx::pack_row_pair(packed, nr, n, r - 1, rows + (r - 1) * n, rows + r * n);
  else if (r == nr - 1) amx::pack_row_pair(packed, nr, n, r, rows + r * n, nullptr);
  if (r == nr - 1) amx::zero_rows_from(packed, nr, n, (nr + 1) / 2 * 2);
}

// Rows [0, S) of a (w, S) sum kept transposed, row stride lds, written
// scaled into out rows (S, w), row stride ldo, with non-temporal stores,
// through tmp (16, w).
inline void write_transposed(float* out, std::int64_t ldo, const float* src, std::int64_t lds, std::int64_t S,
                             std::int64_t w, float scale, float* tmp) {
  constexpr std::int64_t kRows = 16;
  for (std::int64_t j0 = 0; j0 < S; j0 += kRows) {
    const std::int64_t n = std::min(kRows, S - j0);
    transpose(tmp, w, src + j0, lds, w, n);
    for (std::int64_t j = 0; j < n; ++j) simd::stream_scaled_row(out + (j0 + j) * ldo, tmp + j * w, w, scale);
  }
}

}  // namespace multihead::HWY_NAMESPACE::bf16_blocks
HWY_AFTER_NAMESPACE();

#endif  // MULTIHEAD_KERNELS_ATTENTION_BF16_BLOCKS_H_
