#include "multihead/kernels/attention_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "multihead/core/step_profile.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/transpose.h"
#include "amx_tiles.h"
#include "attention_tiles.h"
#include "simd_rows.h"

namespace multihead {
namespace {

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
  void make(const MaskGeometry& geo, std::int64_t S, std::int64_t Bc, std::int64_t b, std::int64_t i0,
            std::int64_t nr, std::int64_t max_run) {
    tiles.clear();
    runs.clear();
    for (std::int64_t j0 = 0; j0 < S; j0 += Bc) {
      const std::int64_t nc_block = std::min(Bc, S - j0);
      const TilePlan plan = geo.plan(b, i0, nr, j0, nc_block);
      if (plan.skip) continue;
      const std::int64_t seen = geo.causal_span(i0, nr, j0, nc_block).nc;
      if (seen == 0) continue;
      const std::int64_t nc = std::min(nc_block, ceil_div(seen, kKeyAlign) * kKeyAlign);
      if (runs.empty() || runs.back().j0 + runs.back().n != j0 || runs.back().n + nc > max_run)
        runs.push_back({j0, 0});
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
std::int64_t masked_keys(const MaskGeometry& geo, std::int64_t j0, std::int64_t n) {
  return std::clamp<std::int64_t>(geo.cols - j0, 0, n);
}

// Query rows per block. oneDNN's AMX matmul copies its right-hand operand
// (K, V) into the tile layout on every call, so on AMX taller blocks
// amortise that copy over more rows: twice the fp32 kernel's block ran the
// core 10-13% faster at L = 4096, the same at L = 512 and under a causal
// mask (docs/BENCHMARKS.md). AVX512-BF16 dot products gain nothing from it,
// and block-sparse patterns keep blocks on their grid (5% slower across it).
std::int64_t query_block(const AttentionTiles& tiles, const AttentionMasks<float>& masks) {
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
bool products_on_tiles(std::int64_t Bc) { return Bc % 32 == 0 && amx::usable(); }
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
void transpose_bf16(BF16* dst, std::int64_t ldd, const BF16* src, std::int64_t lds, std::int64_t rows,
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
void pack_as_produced(BF16* packed, const float* rows, std::int64_t r, std::int64_t nr, std::int64_t n) {
  if (r % 2 == 1) amx::pack_row_pair(packed, nr, n, r - 1, rows + (r - 1) * n, rows + r * n);
  else if (r == nr - 1) amx::pack_row_pair(packed, nr, n, r, rows + r * n, nullptr);
  if (r == nr - 1) amx::zero_rows_from(packed, nr, n, (nr + 1) / 2 * 2);
}

// Rows [0, S) of a (w, S) sum kept transposed, row stride lds, written
// scaled into out rows (S, w), row stride ldo, with non-temporal stores,
// through tmp (16, w).
void write_transposed(float* out, std::int64_t ldo, const float* src, std::int64_t lds, std::int64_t S,
                      std::int64_t w, float scale, float* tmp) {
  constexpr std::int64_t kRows = 16;
  for (std::int64_t j0 = 0; j0 < S; j0 += kRows) {
    const std::int64_t n = std::min(kRows, S - j0);
    transpose(tmp, w, src + j0, lds, w, n);
    for (std::int64_t j = 0; j < n; ++j) simd::stream_scaled_row(out + (j0 + j) * ldo, tmp + j * w, w, scale);
  }
}

}  // namespace

void attention_bf16_forward(HeadsView<BF16> out, float* lse, HeadsView<const BF16> q, HeadsView<const BF16> k,
                            HeadsView<const BF16> v, const AttentionMasks<float>& masks, const AttentionDims& d,
                            float scale, const AttentionDropout& dropout, const AttentionTiles& tiles) {
  const StepProfileScope profile(StepPart::kAttention);
  check_tiles(tiles);
  const MaskGeometry geo(masks, d);
  const std::int64_t Br = query_block(tiles, masks), Bc = tiles.k_block;
  const std::int64_t nqb = ceil_div(d.L, Br);
  const std::int64_t tasks = d.B * d.H * nqb;
  const RelativePositions<float>& rel = masks.relative;
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
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const std::int64_t b = bh / d.H, h = bh % d.H;
    k_heads[bh] = HeadOperand::lay_out(k_use, k_packed.data<BF16>() + bh * k_size, k.at(b, h), k.row_stride, d.S, d.D);
    v_heads[bh] =
        HeadOperand::lay_out(v_use, v_packed.data<BF16>() + bh * v_size, v.at(b, h), v.row_stride, d.S, d.Dv);
  }

#pragma omp parallel
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
              bucket_sums(wv + r * nb, x, masked_keys(geo, run.j0, run.n), run.j0, masks.query_offset + i0 + r, rel);
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

void attention_bf16_backward(HeadsView<float> dq, HeadsView<float> dk, HeadsView<float> dv, const float* lse,
                             HeadsView<const BF16> out, HeadsView<const float> dout, HeadsView<const BF16> q,
                             HeadsView<const BF16> k, HeadsView<const BF16> v, const AttentionMasks<float>& masks,
                             const AttentionDims& d, float scale, const AttentionDropout& dropout,
                             const AttentionTiles& tiles) {
  const StepProfileScope profile(StepPart::kAttention);
  check_tiles(tiles);
  const MaskGeometry geo(masks, d);
  const std::int64_t Br = query_block(tiles, masks), Bc = tiles.k_block;
  const RelativePositions<float>& rel = masks.relative;
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
  const std::int64_t Lp = ceil_div(d.L, 64) * 64 + 32;                     // bf16: the same
  const std::int64_t packed_run = kv_on_tiles ? amx::packed_size(Br, Sr) : 0;
  const std::int64_t transposed_qdo = kv_on_tiles ? (d.D + d.Dv) * Lp : 0;
  const std::int64_t per_thread =
      (dropout.active() ? 3 : 2) * C::padded(Br * Sr) + C::padded(C::bf16_floats(Br * Sr)) +
      C::padded(C::bf16_floats(k_size)) + C::padded(C::bf16_floats(v_size)) + C::padded(Sp * d.D) +
      C::padded(Sp * d.Dv) + C::padded(C::bf16_floats(Br * d.D)) + C::padded(C::bf16_floats(d.L * d.Dv)) +
      C::padded(Br * d.D) + C::padded(d.L) + 2 * C::padded(d.Dv) + C::padded(Br * d.D) + 2 * C::padded(d.L * nb) +
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
    BF16* pp = carve.bf16(packed_run);  // tiles: dropout(P) packed
    BF16* sp = carve.bf16(packed_run);  // tiles: dS packed
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
              bucket_sums(gbv + r * nb, x, masked_keys(geo, run.j0, run.n), run.j0, masks.query_offset + i0 + r, rel);
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
            const std::int64_t qpos = masks.query_offset + i0 + r, jm = masked_keys(geo, run.j0, run.n);
            if (rel.rel_v) add_bucket_terms(x, jm, run.j0, qpos, da + (i0 + r) * nb, rel);
            if (dropout.active())
              simd::dropout_softmax_grad_row(x, run.row(p, r), run.row(pd, r), run.n, delta[i0 + r]);
            else
              simd::softmax_grad_row(x, run.row(p, r), run.n, delta[i0 + r]);
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
  if (rel.active()) add_relative_grads(rel, rel_grads.f32(), d.B * d.H, d.D, d.Dv);
}

}  // namespace multihead
