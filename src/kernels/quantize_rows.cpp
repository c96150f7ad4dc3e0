// SPDX-License-Identifier: Apache-2.0
// The activations' per-row quantization of the int8 products in float
// vectors, once for each Highway target: a pass for the row's range (and
// whether it is finite), a pass that scales, rounds, clamps and narrows to
// bytes; and the products' rescaling to fp32. The scalar twins in
// gemm_int8.cpp are what the tests hold them to.
#include "quantize_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quantize_rows.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// The quantized values of one vector: clamp(round(v inv) + zero, 0, top) as bytes.
template <typename DU8>
hn::Vec<DU8> quantized(DF d, DU8 du8, VF v, VF inv, VF zero, VF top) {
  const hn::Rebind<std::int32_t, DF> di;
  const VF r = hn::Min(hn::Max(hn::Add(hn::Round(hn::Mul(v, inv)), zero), hn::Zero(d)), top);
  return hn::DemoteTo(du8, hn::ConvertTo(di, r));
}

void quantize_row(const float* x, std::int64_t n, float top, std::uint8_t* q, float* scale_out,
                  std::int32_t* zero_out) {
  const DF d;
  const hn::Rebind<std::uint8_t, DF> du8;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  // The last elements through the same vector code, from a copy padded with zeros (which widen
  // no range and are finite).
  HWY_ALIGN float tail[hn::MaxLanes(DF())] = {};
  const std::int64_t full = n - n % N;
  std::copy(x + full, x + n, tail);
  VF lo = hn::Zero(d), hi = hn::Zero(d), probe = hn::Zero(d);  // probe: NaN where x holds a NaN or an infinity
  auto range = [&](VF v) {
    lo = hn::Min(lo, v), hi = hn::Max(hi, v);
    probe = hn::MulAdd(v, hn::Zero(d), probe);
  };
  for (std::int64_t i = 0; i < full; i += N) range(hn::LoadU(d, x + i));
  if (full < n) range(hn::Load(d, tail));
  const float low = hn::GetLane(hn::MinOfLanes(d, lo)), high = hn::GetLane(hn::MaxOfLanes(d, hi));
  if (std::isnan(hn::GetLane(hn::SumOfLanes(d, probe))) || !std::isfinite(high - low)) {
    std::fill(q, q + n, std::uint8_t{0});
    *scale_out = std::numeric_limits<float>::quiet_NaN();
    *zero_out = 0;
    return;
  }
  float scale = (high - low) / top;
  if (!(scale > 0.0f)) scale = 1.0f;  // a zero row
  const float zero = std::clamp(std::nearbyint(-low / scale), 0.0f, top);
  const VF inv = hn::Set(d, 1.0f / scale), vzero = hn::Set(d, zero), vtop = hn::Set(d, top);
  for (std::int64_t i = 0; i < full; i += N)
    hn::StoreU(quantized(d, du8, hn::LoadU(d, x + i), inv, vzero, vtop), du8, q + i);
  if (full < n) {
    HWY_ALIGN std::uint8_t bytes[hn::MaxLanes(DF())] = {};
    hn::Store(quantized(d, du8, hn::Load(d, tail), inv, vzero, vtop), du8, bytes);
    std::copy(bytes, bytes + (n - full), q + full);
  }
  *scale_out = scale;
  *zero_out = static_cast<std::int32_t>(zero);
}

// One row of y = sx sw (acc - zx row_sum) + b, in the scalar twin's order of operations (no fused
// multiply-add), so that both give the same floats.
void rescale_row(float* y, const std::int32_t* acc, std::int64_t n, float sx, std::int32_t zx, const float* sw,
                 const std::int32_t* row_sum, const float* b) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  const auto vzx = hn::Set(di, zx);
  const VF vsx = hn::Set(d, sx);
  std::int64_t o = 0;
  for (; o + N <= n; o += N) {
    const auto sum = hn::Sub(hn::LoadU(di, acc + o), hn::Mul(vzx, hn::LoadU(di, row_sum + o)));
    VF v = hn::Mul(hn::Mul(vsx, hn::LoadU(d, sw + o)), hn::ConvertTo(d, sum));
    if (b != nullptr) v = hn::Add(v, hn::LoadU(d, b + o));
    hn::StoreU(v, d, y + o);
  }
  for (; o < n; ++o) {
    const float v = sx * sw[o] * static_cast<float>(acc[o] - zx * row_sum[o]);
    y[o] = b != nullptr ? v + b[o] : v;
  }
}

}  // namespace

void rescale_rows_simd(float* y, std::int64_t ldy, const std::int32_t* acc, std::int64_t N, std::int64_t out,
                       const float* sx, const std::int32_t* zx, const float* sw, const std::int32_t* row_sum,
                       const float* b) {
#pragma omp parallel for schedule(static) if (N * out > (1 << 16))
  for (std::int64_t i = 0; i < N; ++i) rescale_row(y + i * ldy, acc + i * out, out, sx[i], zx[i], sw, row_sum, b);
}

void quantize_rows_u8_simd(const float* x, std::int64_t ldx, std::int64_t N, std::int64_t in, float top,
                           std::uint8_t* q, float* scale, std::int32_t* zero) {
  // Rows in parallel from a few thousand values on: a pass over memory, cheap beside the product.
#pragma omp parallel for schedule(static) if (N * in > (1 << 14))
  for (std::int64_t i = 0; i < N; ++i) quantize_row(x + i * ldx, in, top, q + i * in, scale + i, zero + i);
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(quantize_rows_u8_simd);
HWY_EXPORT(rescale_rows_simd);

void rescale_rows(float* y, std::int64_t ldy, const std::int32_t* acc, std::int64_t N, std::int64_t out,
                  const float* sx, const std::int32_t* zx, const float* sw, const std::int32_t* row_sum,
                  const float* b) {
  MULTIHEAD_DISPATCH(rescale_rows_simd)(y, ldy, acc, N, out, sx, zx, sw, row_sum, b);
}

void quantize_rows_u8(const float* x, std::int64_t ldx, std::int64_t N, std::int64_t in, float top, std::uint8_t* q,
                      float* scale, std::int32_t* zero) {
  MULTIHEAD_DISPATCH(quantize_rows_u8_simd)(x, ldx, N, in, top, q, scale, zero);
}

}  // namespace multihead
#endif  // HWY_ONCE
