// SPDX-License-Identifier: Apache-2.0
// Dynamic int8 products for inference, as a deployer quantizes a Linear:
//
//   y (N, out) = x (N, in) W^T + b,
//
// W quantized once, symmetric per output channel (a row of W: int8 in
// [-127, 127] and one fp32 scale); x quantized at each call, asymmetric per
// row (uint8 with a scale and a zero point a row, so that an outlier in one
// token costs no other token its resolution); the product accumulated in
// int32 by oneDNN's u8 x s8 GEMM, which takes the CPU's VNNI dot products
// (AVX512-VNNI, AVX-VNNI) where it has them, or its matmul primitive on AMX
// (AMX-INT8 tiles); the result rescaled to fp32:
//
//   y[r][o] = sx[r] sw[o] (sum_k qx[r][k] qw[o][k] - zx[r] sum_k qw[o][k]) + b[o].
//
// Without VNNI, oneDNN multiplies u8 by s8 with pairwise 16-bit sums that
// saturate past 2^15 (oneDNN's "int8 computations" guide), so there x is
// quantized to 7 bits, [0, 127], as PyTorch's reduce_range does on such
// CPUs; with VNNI to the full [0, 255]. ONEDNN_MAX_CPU_ISA, read when oneDNN
// starts, pins the 7-bit path for tests.
#pragma once

#include <cstdint>
#include <memory>

namespace multihead {

// Copies of int8 weights in the layout the CPU's int8 kernels read (oneDNN's
// AMX tiles), each made at its weight's first product and kept with the
// weights' owner: on AMX, reordering a plain weight at every call costs more
// than the product of a few rows. Thread-safe; a weight's packs live as long
// as this object.
class Int8Packs;
std::shared_ptr<Int8Packs> make_int8_packs();

// A weight (out, in) quantized by quantize_weight_rows: its rows from q on
// (row stride `in`), their scales and the sums of their int8 values; packs:
// where its packed copies are kept (null: reordered at each product where the
// kernels want another layout).
struct Int8Weight {
  const std::int8_t* q = nullptr;
  const float* scale = nullptr;
  const std::int32_t* row_sum = nullptr;
  Int8Packs* packs = nullptr;
  // The weight from row r on (a part of a packed projection).
  Int8Weight rows_from(std::int64_t r, std::int64_t in) const { return {q + r * in, scale + r, row_sum + r, packs}; }
};

// W (out, in) fp32 to q (out, in), scale (out) and row_sum (out): scale =
// max|row| / 127 (1 for a zero row), q = round(W / scale); a row holding a
// NaN or an infinity gets zeros and a NaN scale (its outputs are NaN).
void quantize_weight_rows(const float* W, std::int64_t out, std::int64_t in, std::int8_t* q, float* scale,
                          std::int32_t* row_sum);

// The levels an activation row is quantized to here: 255 where oneDNN's
// int8 products run on VNNI dot products or AMX-INT8 tiles, else 127.
int int8_activation_levels();
// "amx-int8 (8-bit activations)", "vnni (8-bit activations)" or "7-bit
// activations (no VNNI)".
const char* int8_path_name();

// y: (N, out) row stride ldy; x: (N, in) row stride ldx; b: (out) or null.
// A row of x holding a NaN or an infinity gives a row of NaN (no scale holds it).
void linear_forward_int8(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, const Int8Weight& W,
                         const float* b, std::int64_t N, std::int64_t in, std::int64_t out);

// The same computation with the integer product in plain int32 loops and
// the activations quantized to `levels` (127 or 255): the twin that
// linear_forward_int8 is tested against, exactly.
void linear_forward_int8_reference(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, const Int8Weight& W,
                                   const float* b, std::int64_t N, std::int64_t in, std::int64_t out, int levels);

}  // namespace multihead
