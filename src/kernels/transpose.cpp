// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/transpose.h"

#include <hwy/highway.h>

#include <algorithm>

namespace multihead {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// 4 x 4 blocks in 128-bit vectors, which every Highway target has: rows
// a, b, c, d become columns with two rounds of interleaving.
//   t0 = a0 b0 a1 b1   t1 = c0 d0 c1 d1   t2 = a2 b2 a3 b3   t3 = c2 d2 c3 d3
//   out0 = a0 b0 c0 d0 (low halves of t0, t1)   out1 = a1 b1 c1 d1 (high halves)
//   out2, out3 the same from t2, t3.
inline void transpose4x4(float* dst, std::int64_t ldd, const float* src, std::int64_t lds) {
  const hn::Full128<float> d;
  const auto a = hn::LoadU(d, src), b = hn::LoadU(d, src + lds);
  const auto c = hn::LoadU(d, src + 2 * lds), e = hn::LoadU(d, src + 3 * lds);
  const auto t0 = hn::InterleaveLower(d, a, b), t1 = hn::InterleaveLower(d, c, e);
  const auto t2 = hn::InterleaveUpper(d, a, b), t3 = hn::InterleaveUpper(d, c, e);
  hn::StoreU(hn::ConcatLowerLower(d, t1, t0), d, dst);
  hn::StoreU(hn::ConcatUpperUpper(d, t1, t0), d, dst + ldd);
  hn::StoreU(hn::ConcatLowerLower(d, t3, t2), d, dst + 2 * ldd);
  hn::StoreU(hn::ConcatUpperUpper(d, t3, t2), d, dst + 3 * ldd);
}

// Source rows are taken a chunk at a time and each chunk is written out one
// strip of 4 destination rows after another, so each destination cache line
// is filled by a few stores in a row while the chunk's source lines stay in
// L1. The best chunk depends on the destination's row stride (power-of-two
// strides crowd few cache sets). Measured with 64 heads' K blocks (64 columns,
// source rows 6 KiB apart; AMD EPYC, AVX-512): rows 2 KiB apart, 512 rows:
// 0.35 ms with chunks of 32 rows, 1.0 ms with 16, 0.67 ms with 64, 2.6 ms
// going across whole source rows; rows 1 KiB apart, 256 rows: 0.13 ms with
// 16, 0.16 ms with 32; 512 B apart, 128 rows: 0.051 ms with 16, 0.072 with 32.
std::int64_t row_chunk(std::int64_t ldd) { return ldd <= 256 ? 16 : 32; }

}  // namespace

void transpose(float* dst, std::int64_t ldd, const float* src, std::int64_t lds, std::int64_t rows, std::int64_t cols) {
  const std::int64_t r4 = rows / 4 * 4, c4 = cols / 4 * 4;
  const std::int64_t chunk = row_chunk(ldd);
  for (std::int64_t r0 = 0; r0 < r4; r0 += chunk) {
    const std::int64_t r1 = std::min(r0 + chunk, r4);
    for (std::int64_t c = 0; c < c4; c += 4)
      for (std::int64_t r = r0; r < r1; r += 4) transpose4x4(dst + c * ldd + r, ldd, src + r * lds + c, lds);
    for (std::int64_t c = c4; c < cols; ++c)
      for (std::int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
  }
  for (std::int64_t r = r4; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

void transpose_ref(float* dst, std::int64_t ldd, const float* src, std::int64_t lds, std::int64_t rows,
                   std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

}  // namespace multihead
