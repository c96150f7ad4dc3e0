#include "multihead/kernels/gemm_int8.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "multihead/core/error.h"
#include "multihead/core/step_profile.h"
#include "few_rows.h"
#include "quantize_rows.h"

namespace multihead {
namespace {

// Rows of x quantized: q (N, in) dense, a scale and a zero point a row.
struct QuantizedRows {
  std::unique_ptr<std::uint8_t[]> q;  // left uninitialised: every value is written
  std::vector<float> scale;
  std::vector<std::int32_t> zero;
};

QuantizedRows rows_for(std::int64_t N, std::int64_t in) {
  QuantizedRows r;
  r.q.reset(new std::uint8_t[static_cast<std::size_t>(N * in)]);
  r.scale.resize(static_cast<std::size_t>(N));
  r.zero.resize(static_cast<std::size_t>(N));
  return r;
}

// Asymmetric per row over [min(0, row), max(0, row)] (zero exactly
// representable, as PyTorch's dynamic quantization chooses its range), to
// `levels` + 1 values; rounding half to even, as torch.quantize_per_tensor.
// The scalar twin of quantize_rows_u8 (kernels/quantize_rows.cpp), which the
// product runs: the reference product quantizes with this one.
QuantizedRows quantize_activation_rows_reference(const float* x, std::int64_t ldx, std::int64_t N, std::int64_t in,
                                                 int levels) {
  QuantizedRows r = rows_for(N, in);
  const float top = static_cast<float>(levels);
  for (std::int64_t i = 0; i < N; ++i) {
    const float* row = x + i * ldx;
    float lo = 0.0f, hi = 0.0f, probe = 0.0f;  // probe: NaN where the row holds a NaN or an infinity
    for (std::int64_t k = 0; k < in; ++k) lo = std::min(lo, row[k]), hi = std::max(hi, row[k]), probe += row[k] * 0.0f;
    std::uint8_t* q = r.q.get() + i * in;
    if (std::isnan(probe) || !std::isfinite(hi - lo)) {
      // No scale holds the row: its outputs are NaN, as an fp32 product's would be.
      std::fill(q, q + in, std::uint8_t{0});
      r.scale[static_cast<std::size_t>(i)] = std::numeric_limits<float>::quiet_NaN();
      r.zero[static_cast<std::size_t>(i)] = 0;
      continue;
    }
    float scale = (hi - lo) / top;
    if (!(scale > 0.0f)) scale = 1.0f;  // a zero row
    const float zero = std::clamp(std::nearbyint(-lo / scale), 0.0f, top);
    const float inv = 1.0f / scale;
    for (std::int64_t k = 0; k < in; ++k)
      q[k] = static_cast<std::uint8_t>(std::clamp(std::nearbyint(row[k] * inv) + zero, 0.0f, top));
    r.scale[static_cast<std::size_t>(i)] = scale;
    r.zero[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(zero);
  }
  return r;
}

// y = sx sw (acc - zx row_sum) + b, over acc (N, out) dense.
void rescale(float* y, std::int64_t ldy, const std::int32_t* acc, const QuantizedRows& x, const Int8Weight& W,
             const float* b, std::int64_t N, std::int64_t out) {
#pragma omp parallel for schedule(static) if (N * out > (1 << 16))
  for (std::int64_t i = 0; i < N; ++i) {
    const float sx = x.scale[static_cast<std::size_t>(i)];
    const std::int32_t zx = x.zero[static_cast<std::size_t>(i)];
    const std::int32_t* a = acc + i * out;
    float* yi = y + i * ldy;
    for (std::int64_t o = 0; o < out; ++o) {
      const float v = sx * W.scale[o] * static_cast<float>(a[o] - zx * W.row_sum[o]);
      yi[o] = b != nullptr ? v + b[o] : v;
    }
  }
}

void onednn_u8s8s32(const std::uint8_t* A, std::int64_t M, std::int64_t K, const std::int8_t* B, std::int64_t N,
                    std::int32_t* C, std::int64_t ldc) {
  const std::int32_t no_offset = 0;
  const dnnl_status_t st = dnnl_gemm_u8s8s32('N', 'T', 'F', M, N, K, 1.0f, A, K, 0, B, K, 0, 0.0f, C, ldc, &no_offset);
  check<Error>(st == dnnl_success, "oneDNN int8 gemm failed (status {}) for M={} N={} K={}", static_cast<int>(st), M,
               N, K);
}

int levels_of_this_cpu() {
  // Read once: oneDNN fixes its ISA when it first dispatches.
  static const int levels = [] {
    const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto has = [&](dnnl_cpu_isa_t level) { return (isa & level) == static_cast<unsigned>(level); };
    return has(dnnl_cpu_isa_avx512_core_vnni) || has(dnnl_cpu_isa_avx2_vnni) ? 255 : 127;
  }();
  return levels;
}

}  // namespace

void quantize_weight_rows(const float* W, std::int64_t out, std::int64_t in, std::int8_t* q, float* scale,
                          std::int32_t* row_sum) {
#pragma omp parallel for schedule(static) if (out * in > (1 << 16))
  for (std::int64_t o = 0; o < out; ++o) {
    const float* row = W + o * in;
    float top = 0.0f, probe = 0.0f;  // probe: NaN where the row holds a NaN or an infinity
    for (std::int64_t k = 0; k < in; ++k) top = std::max(top, std::abs(row[k])), probe += row[k] * 0.0f;
    if (std::isnan(probe)) {  // no scale holds the row: its outputs are NaN, as an fp32 product's would be
      std::fill(q + o * in, q + (o + 1) * in, std::int8_t{0});
      scale[o] = std::numeric_limits<float>::quiet_NaN();
      row_sum[o] = 0;
      continue;
    }
    const float s = top > 0.0f ? top / 127.0f : 1.0f;
    std::int32_t sum = 0;
    for (std::int64_t k = 0; k < in; ++k) {
      const auto v = static_cast<std::int8_t>(std::clamp(std::nearbyint(row[k] / s), -127.0f, 127.0f));
      q[o * in + k] = v;
      sum += v;
    }
    scale[o] = s;
    row_sum[o] = sum;
  }
}

int int8_activation_levels() { return levels_of_this_cpu(); }

const char* int8_path_name() {
  return int8_activation_levels() == 255 ? "vnni (8-bit activations)" : "7-bit activations (no VNNI)";
}

void linear_forward_int8(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, const Int8Weight& W,
                         const float* b, std::int64_t N, std::int64_t in, std::int64_t out) {
  const StepProfileScope profile(StepPart::kGemm);
  if (N == 0 || out == 0) return;
  QuantizedRows qx = rows_for(N, in);
  quantize_rows_u8(x, ldx, N, in, static_cast<float>(int8_activation_levels()), qx.q.get(), qx.scale.data(),
                   qx.zero.data());
  const std::unique_ptr<std::int32_t[]> acc(new std::int32_t[static_cast<std::size_t>(N * out)]);
  // oneDNN keeps a product of few rows (a decoding step) on one thread:
  // there each thread takes a share of the output columns.
  const bool shared = for_column_shares(N, out, [&](std::int64_t c0, std::int64_t n) {
    onednn_u8s8s32(qx.q.get(), N, in, W.q + c0 * in, n, acc.get() + c0, out);
  });
  if (!shared) onednn_u8s8s32(qx.q.get(), N, in, W.q, out, acc.get(), out);
  rescale(y, ldy, acc.get(), qx, W, b, N, out);
}

void linear_forward_int8_reference(float* y, std::int64_t ldy, const float* x, std::int64_t ldx,
                                   const Int8Weight& W, const float* b, std::int64_t N, std::int64_t in,
                                   std::int64_t out, int levels) {
  check<ConfigError>(levels == 127 || levels == 255, "int8 activation levels must be 127 or 255, got {}", levels);
  const QuantizedRows qx = quantize_activation_rows_reference(x, ldx, N, in, levels);
  std::vector<std::int32_t> acc(static_cast<std::size_t>(N * out));
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t o = 0; o < out; ++o) {
      std::int32_t s = 0;
      for (std::int64_t k = 0; k < in; ++k)
        s += static_cast<std::int32_t>(qx.q[static_cast<std::size_t>(i * in + k)]) * W.q[o * in + k];
      acc[static_cast<std::size_t>(i * out + o)] = s;
    }
  rescale(y, ldy, acc.data(), qx, W, b, N, out);
}

}  // namespace multihead
