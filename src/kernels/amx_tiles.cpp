// SPDX-License-Identifier: Apache-2.0
#include "amx_tiles.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "multihead/core/error.h"
#include "multihead/kernels/gemm_bf16.h"

namespace multihead::amx {
namespace {

constexpr std::int64_t kTileRows = 16;     // rows of every tile
constexpr std::int64_t kTileK = 32;        // bf16 values along K in an A tile (64 bytes)
constexpr std::int64_t kTileValues = 512;  // a packed B tile: 16 rows of 32 bf16

// Linux hands a process the 8 KiB of tile state only on request.
bool tile_state_granted() {
  static const bool granted = [] {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

// The GCC tile intrinsics are asm statements without a memory clobber: this
// keeps stores to the buffers they read before them, and reads of what they
// stored after them.
inline void memory_barrier() { asm volatile("" ::: "memory"); }

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// Eight tiles of 16 rows x 64 bytes: tmm0-3 accumulate a 2 x 2 block of C,
// tmm4-5 hold A's two row tiles, tmm6-7 B's two column tiles. oneDNN
// configures tiles its own way, so every product loads this again. A static
// object: the intrinsic's asm names only the first 8 bytes as read, so the
// stores to a local's other fields could be dropped as dead.
__attribute__((target("amx-tile"))) void configure_tiles() {
  static const TileConfig config = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = kTileRows;
    return c;
  }();
  _tile_loadconfig(&config);
}

// MT x NT tiles of C (16 x 16 each) over kchunks steps of 32 along K. Tile
// (i, j) starts at c + i * 16 rows + j * 16 columns (row stride ldc_bytes);
// with load, the products add onto what is there.
template <int MT, int NT>
__attribute__((target("amx-tile,amx-bf16"))) void tile_block(const BF16* a0, std::int64_t lda0_bytes, const BF16* a1,
                                                             std::int64_t lda1_bytes, const BF16* b0, const BF16* b1,
                                                             std::int64_t kchunks, float* c, std::int64_t ldc_bytes,
                                                             bool load) {
  char* const c00 = reinterpret_cast<char*>(c);
  char* const c01 = c00 + 64;
  char* const c10 = c00 + kTileRows * ldc_bytes;
  char* const c11 = c10 + 64;
  if (load) {
    _tile_loadd(0, c00, ldc_bytes);
    if constexpr (NT == 2) _tile_loadd(1, c01, ldc_bytes);
    if constexpr (MT == 2) _tile_loadd(2, c10, ldc_bytes);
    if constexpr (MT == 2 && NT == 2) _tile_loadd(3, c11, ldc_bytes);
  } else {
    _tile_zero(0);
    if constexpr (NT == 2) _tile_zero(1);
    if constexpr (MT == 2) _tile_zero(2);
    if constexpr (MT == 2 && NT == 2) _tile_zero(3);
  }
  for (std::int64_t k = 0; k < kchunks; ++k) {
    _tile_loadd(4, a0 + k * kTileK, lda0_bytes);
    if constexpr (MT == 2) _tile_loadd(5, a1 + k * kTileK, lda1_bytes);
    _tile_loadd(6, b0 + k * kTileValues, 64);
    if constexpr (NT == 2) _tile_loadd(7, b1 + k * kTileValues, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MT == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c00, ldc_bytes);
  if constexpr (NT == 2) _tile_stored(1, c01, ldc_bytes);
  if constexpr (MT == 2) _tile_stored(2, c10, ldc_bytes);
  if constexpr (MT == 2 && NT == 2) _tile_stored(3, c11, ldc_bytes);
}

using TileBlock = void (*)(const BF16*, std::int64_t, const BF16*, std::int64_t, const BF16*, const BF16*, std::int64_t,
                           float*, std::int64_t, bool);
constexpr TileBlock kBlocks[2][2] = {{tile_block<1, 1>, tile_block<1, 2>}, {tile_block<2, 1>, tile_block<2, 2>}};

// Row tile i of A (rows m0.., 16 of them, K values each) as the tiles read
// it: in place where all 16 rows and whole 32-value chunks exist, otherwise
// copied zero-padded into pad (16 x Kp).
const BF16* a_tile(const BF16* A, std::int64_t lda, std::int64_t M, std::int64_t K, std::int64_t Kp, std::int64_t m0,
                   BF16* pad, std::int64_t& ld_out) {
  if (m0 + kTileRows <= M && K == Kp) {
    ld_out = lda;
    return A + m0 * lda;
  }
  std::fill_n(pad, kTileRows * Kp, BF16{});
  for (std::int64_t r = 0; r < std::min(kTileRows, M - m0); ++r) std::copy_n(A + (m0 + r) * lda, K, pad + r * Kp);
  ld_out = Kp;
  return pad;
}

}  // namespace

bool usable() {
  static const bool tiles = [] {
    const char* env = std::getenv("MULTIHEAD_AMX_TILES");
    const bool off = env != nullptr && std::string_view(env) == "off";
    return !off && bf16_path() == Bf16Path::kAmx && tile_state_granted();
  }();
  return tiles;
}

std::int64_t packed_size(std::int64_t K, std::int64_t N) {
  return (K + kTileK - 1) / kTileK * kTileK * ((N + kTileRows - 1) / kTileRows * kTileRows);
}

namespace {

// Packs B (K, N): tile (kb, nb) holds B[32 kb + 2 r + e][16 nb + c] at
// r * 32 + 2 c + e. Whole tiles copy row pairs (pack) or rows of pairs
// (pack_transposed) without bounds checks; edge tiles take value(k, n), with
// zeros beyond K and N.
template <typename WholeTile, typename Value>
void pack_tiles(BF16* dst, std::int64_t K, std::int64_t N, WholeTile whole, Value value) {
  const std::int64_t kb_count = (K + kTileK - 1) / kTileK, nb_count = (N + kTileRows - 1) / kTileRows;
  for (std::int64_t nb = 0; nb < nb_count; ++nb)
    for (std::int64_t kb = 0; kb < kb_count; ++kb) {
      BF16* t = dst + (nb * kb_count + kb) * kTileValues;
      const std::int64_t k0 = kb * kTileK, n0 = nb * kTileRows;
      if (k0 + kTileK <= K && n0 + kTileRows <= N) {
        whole(t, k0, n0);
        continue;
      }
      for (std::int64_t r = 0; r < kTileRows; ++r)
        for (std::int64_t c = 0; c < kTileRows; ++c)
          for (std::int64_t e = 0; e < 2; ++e) {
            const std::int64_t k = k0 + 2 * r + e, n = n0 + c;
            t[r * kTileK + c * 2 + e] = k < K && n < N ? value(k, n) : BF16{};
          }
    }
}

}  // namespace

void pack(BF16* dst, const BF16* src, std::int64_t ld, std::int64_t K, std::int64_t N) {
  pack_tiles(
      dst, K, N,
      [&](BF16* t, std::int64_t k0, std::int64_t n0) {
        for (std::int64_t r = 0; r < kTileRows; ++r) {
          const BF16* even = src + (k0 + 2 * r) * ld + n0;
          const BF16* odd = even + ld;
          BF16* out = t + r * kTileK;
          for (std::int64_t c = 0; c < kTileRows; ++c) out[2 * c] = even[c], out[2 * c + 1] = odd[c];
        }
      },
      [&](std::int64_t k, std::int64_t n) { return src[k * ld + n]; });
}

void pack_transposed(BF16* dst, const BF16* src, std::int64_t ld, std::int64_t N, std::int64_t K) {
  pack_tiles(
      dst, K, N,
      [&](BF16* t, std::int64_t k0, std::int64_t n0) {
        // A 16 x 16 transpose of value pairs (32 bits each), pair by pair. (Staged
        // through two local arrays instead, GCC 12 at -O3 -march=x86-64-v3
        // vectorised it into zeros: tests/kernels/test_amx_tiles.cpp.)
        for (std::int64_t c = 0; c < kTileRows; ++c) {
          const BF16* row = src + (n0 + c) * ld + k0;
          for (std::int64_t r = 0; r < kTileRows; ++r)
            std::memcpy(t + r * kTileK + 2 * c, row + 2 * r, 2 * sizeof(BF16));
        }
      },
      [&](std::int64_t k, std::int64_t n) { return src[n * ld + k]; });
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void pack_row_pair(BF16* packed, std::int64_t K,
                                                                                   std::int64_t N, std::int64_t k,
                                                                                   const float* row0,
                                                                                   const float* row1) {
  // VCVTNE2PS2BF16 puts row0's 16 values in the low half and row1's in the
  // high half; the permutation interleaves them, a tile row of the packing.
  alignas(64) static constexpr std::uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                                21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                                11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i order = _mm512_load_si512(kInterleave);
  const std::int64_t block_stride = (K + kTileK - 1) / kTileK * kTileValues;
  BF16* at = packed + (k / kTileK) * kTileValues + (k % kTileK) / 2 * kTileK;
  for (std::int64_t n0 = 0; n0 < N; n0 += kTileRows, at += block_stride) {
    const __mmask16 m = N - n0 >= kTileRows ? 0xFFFF : static_cast<__mmask16>((1u << (N - n0)) - 1);
    const __m512 a = row0 ? _mm512_maskz_loadu_ps(m, row0 + n0) : _mm512_setzero_ps();
    const __m512 b = row1 ? _mm512_maskz_loadu_ps(m, row1 + n0) : _mm512_setzero_ps();
    const __m512i pair = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
    _mm512_storeu_si512(at, _mm512_permutexvar_epi16(order, pair));
  }
}

void zero_rows_from(BF16* packed, std::int64_t K, std::int64_t N, std::int64_t k) {
  for (std::int64_t r = k; r < (K + kTileK - 1) / kTileK * kTileK; r += 2)
    pack_row_pair(packed, K, N, r, nullptr, nullptr);
}

PackedPart part(const BF16* packed, std::int64_t K_total, std::int64_t k0, std::int64_t n0) {
  const std::int64_t stride = (K_total + kTileK - 1) / kTileK * kTileValues;
  return {packed + (n0 / kTileRows) * stride + (k0 / kTileK) * kTileValues, stride};
}

void gemm(float* C, std::int64_t ldc, const BF16* A, std::int64_t lda, PackedPart B, std::int64_t M, std::int64_t N,
          std::int64_t K, float alpha, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  check<Error>(!accumulate || alpha == 1.0f, "amx::gemm accumulates unscaled products only");
  const std::int64_t Kp = (K + kTileK - 1) / kTileK * kTileK, kchunks = Kp / kTileK;
  const std::int64_t b_block = B.block_stride;
  thread_local std::vector<BF16> pads;
  pads.resize(static_cast<std::size_t>(2 * kTileRows * Kp));
  alignas(64) float edge[4 * 256];  // a block with a partial tile goes through here
  check<Error>(tile_state_granted(), "AMX tiles used without the tile state Linux grants");
  configure_tiles();
  std::int64_t waiting = -1;  // the band (first row) alpha has yet to scale
  auto scale_rows = [&](std::int64_t r0, std::int64_t rows) {
    memory_barrier();
    for (std::int64_t r = r0; r < r0 + rows; ++r)
      for (std::int64_t q = 0; q < N; ++q) C[r * ldc + q] *= alpha;
  };
  for (std::int64_t m0 = 0; m0 < M; m0 += 2 * kTileRows) {
    const int mt = m0 + kTileRows < M ? 2 : 1;
    std::int64_t lda0 = 0, lda1 = 0;
    const BF16* a0 = a_tile(A, lda, M, K, Kp, m0, pads.data(), lda0);
    const BF16* a1 = mt == 2 ? a_tile(A, lda, M, K, Kp, m0 + kTileRows, pads.data() + kTileRows * Kp, lda1) : a0;
    const std::int64_t rows = std::min(mt * kTileRows, M - m0);
    memory_barrier();
    for (std::int64_t n0 = 0; n0 < N; n0 += 2 * kTileRows) {
      const int nt = n0 + kTileRows < N ? 2 : 1;
      const std::int64_t cols = std::min(nt * kTileRows, N - n0);
      const BF16* b0 = B.at + (n0 / kTileRows) * b_block;
      const TileBlock block = kBlocks[mt - 1][nt - 1];
      float* c = C + m0 * ldc + n0;
      if (rows == mt * kTileRows && cols == nt * kTileRows) {  // whole tiles: C itself
        block(a0, lda0 * 2, a1, lda1 * 2, b0, b0 + b_block, kchunks, c, ldc * 4, accumulate);
        continue;
      }
      // Edge: the tiles in `edge` (row stride 32 floats), then the part that exists.
      block(a0, lda0 * 2, a1, lda1 * 2, b0, b0 + b_block, kchunks, edge, 2 * kTileRows * 4, false);
      memory_barrier();
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t q = 0; q < cols; ++q)
          c[r * ldc + q] = accumulate ? c[r * ldc + q] + edge[r * 2 * kTileRows + q] : edge[r * 2 * kTileRows + q];
    }
    // alpha scales a band once the next one is computed: read straight
    // after the tile stores, its rows would wait for them to land.
    if (alpha != 1.0f) {
      if (waiting >= 0) scale_rows(waiting, 2 * kTileRows);
      waiting = m0;
    }
  }
  if (waiting >= 0) scale_rows(waiting, M - waiting);
  memory_barrier();  // C as the tile stores left it, for whatever reads it next
}

}  // namespace multihead::amx
