// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/gemm_int8.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "multihead/core/error.h"
#include "multihead/core/threading.h"
#include "multihead/core/step_profile.h"
#include "few_rows.h"
#include "onednn_matmul.h"
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

// y = sx sw (acc - zx row_sum) + b, over acc (N, out) dense: the scalar twin
// of rescale_rows (kernels/quantize_rows.cpp), which the product runs.
void rescale_reference(float* y, std::int64_t ldy, const std::int32_t* acc, const QuantizedRows& x, const Int8Weight& W,
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
  check<Error>(st == dnnl_success, "oneDNN int8 gemm failed (status {}) for M={} N={} K={}", static_cast<int>(st), M, N,
               K);
}

enum class Int8Isa { kAmx, kVnni, kNone };

Int8Isa int8_isa() {
  // Read once: oneDNN fixes its ISA when it first dispatches.
  static const Int8Isa isa = [] {
    const auto bits = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto has = [&](dnnl_cpu_isa_t level) { return (bits & level) == static_cast<unsigned>(level); };
    if (has(dnnl_cpu_isa_avx512_core_amx)) return Int8Isa::kAmx;
    return has(dnnl_cpu_isa_avx512_core_vnni) || has(dnnl_cpu_isa_avx2_vnni) ? Int8Isa::kVnni : Int8Isa::kNone;
  }();
  return isa;
}

// On AMX the products run on oneDNN's matmul primitive (its AMX-INT8
// kernels; gemm_u8s8s32 was 2-7x slower there at a layer's shapes), the rows
// in blocks of kAmxRows, each block quantized, multiplied and rescaled by one
// thread while its rows are in that core's cache. The last block is rounded up
// to whole tiles of 16 rows (zero rows, products no one reads): a few shapes a
// weight, each primitive made once (about 0.5 ms), where exact row counts
// would make one for every length of input.
constexpr std::int64_t kAmxRows = 64;

}  // namespace

class Int8Packs {
 public:
  // B (k.N rows of k.K int8 values) in the layout of k's primitive (k
  // packed_b), reordered on its first use and kept.
  const void* packed(const MatmulKey& k, const std::int8_t* B) {
    const dnnl_memory_desc_t layout = onednn_packed_b_layout(k);
    const std::lock_guard lock(mutex_);
    std::vector<Pack>& packs = packs_[Source{B, k.N, k.K}];
    for (const Pack& p : packs)  // a layout per weight, unless blocks of other heights want another
      if (dnnl_memory_desc_equal(&p.layout, &layout)) return p.bytes.get();
    Pack p{layout, std::unique_ptr<std::uint8_t[]>(new std::uint8_t[onednn_packed_b_bytes(k)])};
    onednn_pack_b(k, B, p.bytes.get());
    packs.push_back(std::move(p));
    return packs.back().bytes.get();
  }

 private:
  struct Source {
    const std::int8_t* B;
    std::int64_t N, K;
    bool operator==(const Source&) const = default;
  };
  struct SourceHash {
    std::size_t operator()(const Source& s) const noexcept {
      return std::hash<const void*>{}(s.B) ^ (std::hash<std::int64_t>{}(s.N * 1000003 + s.K) << 1);
    }
  };
  struct Pack {
    dnnl_memory_desc_t layout;
    std::unique_ptr<std::uint8_t[]> bytes;
  };
  std::mutex mutex_;
  std::unordered_map<Source, std::vector<Pack>, SourceHash> packs_;
};

std::shared_ptr<Int8Packs> make_int8_packs() { return std::make_shared<Int8Packs>(); }

namespace {

// Rows [0, m <= kAmxRows) of the product on AMX, on the calling thread; B
// from W's packs where it has them.
void amx_block(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, const Int8Weight& W, const float* b,
               std::int64_t m, std::int64_t in, std::int64_t out) {
  const std::int64_t rows = (m + 15) / 16 * 16;
  thread_local std::vector<std::uint8_t> q;
  thread_local std::vector<float> scale;
  thread_local std::vector<std::int32_t> zero, acc;
  q.resize(static_cast<std::size_t>(rows * in));
  scale.resize(static_cast<std::size_t>(m));
  zero.resize(static_cast<std::size_t>(m));
  acc.resize(static_cast<std::size_t>(rows * out));
  quantize_rows_u8(x, ldx, m, in, static_cast<float>(int8_activation_levels()), q.data(), scale.data(), zero.data());
  std::fill(q.begin() + m * in, q.end(), std::uint8_t{0});
  MatmulKey k{rows, out, in, in, in, out, false, true};
  k.a_type = dnnl_u8, k.b_type = dnnl_s8, k.c_type = dnnl_s32;
  k.packed_b = W.packs != nullptr;
  onednn_matmul(k, q.data(), k.packed_b ? W.packs->packed(k, W.q) : W.q, acc.data());
  rescale_rows(y, ldy, acc.data(), m, out, scale.data(), zero.data(), W.scale, W.row_sum, b);
}

void amx_forward(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, const Int8Weight& W, const float* b,
                 std::int64_t N, std::int64_t in, std::int64_t out) {
  const std::int64_t blocks = (N + kAmxRows - 1) / kAmxRows;
  if (blocks == 1) {
    // One block on one thread: oneDNN's own threading of a few rows on AMX,
    // and the columns shared out between the threads, were both 2-3x slower
    // at 20-64 rows (measured with the weights reordered at each call).
    const OnThisThreadOnly alone;
    return amx_block(y, ldy, x, ldx, W, b, N, in, out);
  }
  std::exception_ptr error;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < blocks; ++i) {
    const std::int64_t r0 = i * kAmxRows;
    try {
      amx_block(y + r0 * ldy, ldy, x + r0 * ldx, ldx, W, b, std::min(kAmxRows, N - r0), in, out);
    } catch (...) {
#pragma omp critical(multihead_int8_blocks)
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
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

int int8_activation_levels() { return int8_isa() == Int8Isa::kNone ? 127 : 255; }

const char* int8_path_name() {
  switch (int8_isa()) {
    case Int8Isa::kAmx: return "amx-int8 (8-bit activations)";
    case Int8Isa::kVnni: return "vnni (8-bit activations)";
    case Int8Isa::kNone: break;
  }
  return "7-bit activations (no VNNI)";
}

void linear_forward_int8(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, const Int8Weight& W,
                         const float* b, std::int64_t N, std::int64_t in, std::int64_t out) {
  const StepProfileScope profile(StepPart::kGemm);
  if (N == 0 || out == 0) return;
  if (int8_isa() == Int8Isa::kAmx) return amx_forward(y, ldy, x, ldx, W, b, N, in, out);
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
  rescale_rows(y, ldy, acc.get(), N, out, qx.scale.data(), qx.zero.data(), W.scale, W.row_sum, b);
}

void linear_forward_int8_reference(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, const Int8Weight& W,
                                   const float* b, std::int64_t N, std::int64_t in, std::int64_t out, int levels) {
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
  rescale_reference(y, ldy, acc.data(), qx, W, b, N, out);
}

}  // namespace multihead
