// SPDX-License-Identifier: Apache-2.0
// Rows of fp32 activations quantized to uint8, and int32 products rescaled to
// fp32, in vectors (src/kernels/quantize_rows.cpp), dispatched to the CPU's
// Highway target: what the int8 products (gemm_int8.cpp) run at every call.
// Internal header of src/kernels.
#pragma once

#include <cstdint>

namespace multihead {

// Each row i of x (N rows of `in`, stride ldx) over [min(0, row), max(0, row)]
// to top + 1 levels: scale[i] = (max - min) / top (1 for a zero row),
// zero[i] = round(-min / scale) in [0, top], q (N, in) dense = clamp(round(x /
// scale) + zero, 0, top), rounding half to even. A row holding a NaN or an
// infinity gets zeros and a NaN scale. Equal, value for value, to the scalar
// twin in gemm_int8.cpp (the reference product's quantizer).
void quantize_rows_u8(const float* x, std::int64_t ldx, std::int64_t N, std::int64_t in, float top, std::uint8_t* q,
                      float* scale, std::int32_t* zero);

// y (N, out) row stride ldy = sx[i] sw[o] (acc[i][o] - zx[i] row_sum[o]) (+ b[o]), acc (N, out)
// dense: the int32 products rescaled, equal, value for value, to the scalar twin in gemm_int8.cpp.
void rescale_rows(float* y, std::int64_t ldy, const std::int32_t* acc, std::int64_t N, std::int64_t out,
                  const float* sx, const std::int32_t* zx, const float* sw, const std::int32_t* row_sum,
                  const float* b);

}  // namespace multihead
