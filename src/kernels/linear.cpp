// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/linear.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "column_ranges.h"
#include "multihead/core/tensor.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"

namespace multihead {
namespace {

// y (N, out) = b, each row: the GEMM then adds onto it (beta = 1). One pass
// over y, shared between the threads from 2^15 values (a 4096 x 1536 output
// takes about a millisecond to write on one core; one 384-token e-mail's
// projections, 384 x 128 to 384 x 384, made a twentieth of its classification
// serial on one thread: 2.75 against 2.6 ms on 2 Xeon cores).
template <typename T>
void seed_bias(T* y, std::int64_t ldy, const T* b, std::int64_t N, std::int64_t out) {
#pragma omp parallel for schedule(static) if (N * out >= (std::int64_t{1} << 15))
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < out; ++o) y[n * ldy + o] = b[o];
}

// db (out) += the column sums of dy (N, out): each thread sums its range of
// columns in a local array (db may alias nothing the compiler can see, and
// the loop vectorises), from db's values, in row order.
template <typename T>
void add_column_sums(T* db, const T* dy, std::int64_t lddy, std::int64_t N, std::int64_t out) {
  for_column_ranges(N, out, [&](std::int64_t o0, std::int64_t w) {
    std::vector<T> acc(db + o0, db + o0 + w);
    for (std::int64_t n = 0; n < N; ++n) {
      const T* row = dy + n * lddy + o0;
      for (std::int64_t o = 0; o < w; ++o) acc[o] += row[o];
    }
    std::copy_n(acc.data(), w, db + o0);
  });
}

// dyb (N, out) = dy rounded to bf16 as an operand of the products, packed,
// and db (out) += the column sums of dy (db may be null): one pass over dy
// instead of two.
void round_with_column_sums(BF16* dyb, float* db, const float* dy, std::int64_t lddy, std::int64_t N,
                            std::int64_t out) {
  for_column_ranges(N, out, [&](std::int64_t o0, std::int64_t w) {
    if (db == nullptr) {
      for (std::int64_t n = 0; n < N; ++n) round_operand(dyb + n * out + o0, dy + n * lddy + o0, w);
      return;
    }
    std::vector<float> acc(db + o0, db + o0 + w);
    for (std::int64_t n = 0; n < N; ++n) round_operand_adding(dyb + n * out + o0, acc.data(), dy + n * lddy + o0, w);
    std::copy_n(acc.data(), w, db + o0);
  });
}

}  // namespace

template <typename T>
void linear_forward(T* y, std::int64_t ldy, const T* x, std::int64_t ldx, const T* W, const T* b, std::int64_t N,
                    std::int64_t in, std::int64_t out) {
  if (b != nullptr) seed_bias(y, ldy, b, N, out);
  gemm(Trans::kNo, Trans::kYes, N, out, in, T(1), x, ldx, W, in, b != nullptr ? T(1) : T(0), y, ldy);
}

template <typename T>
void linear_forward_t(T* y, std::int64_t ldy, const T* x, std::int64_t ldx, const T* Wt, const T* b, std::int64_t N,
                      std::int64_t in, std::int64_t out) {
  if (b != nullptr) seed_bias(y, ldy, b, N, out);
  gemm(Trans::kNo, Trans::kNo, N, out, in, T(1), x, ldx, Wt, out, b != nullptr ? T(1) : T(0), y, ldy);
}

template <typename T>
void linear_backward(T* dx, std::int64_t lddx, bool accumulate_dx, T* dW, T* db, const T* dy, std::int64_t lddy,
                     const T* x, std::int64_t ldx, const T* W, std::int64_t N, std::int64_t in, std::int64_t out) {
  if (dx != nullptr)
    gemm(Trans::kNo, Trans::kNo, N, in, out, T(1), dy, lddy, W, in, accumulate_dx ? T(1) : T(0), dx, lddx);
  // dW (out, in) += dy^T (out, N) x (N, in)
  if (dW != nullptr) gemm(Trans::kYes, Trans::kNo, out, in, N, T(1), dy, lddy, x, ldx, T(1), dW, in);
  if (db != nullptr) add_column_sums(db, dy, lddy, N, out);
}

Tensor bf16_weights(const float* W, std::int64_t rows, std::int64_t cols) {
  Tensor w = Tensor::empty({rows, cols}, DType::kBF16);
  to_bf16(w.data<BF16>(), W, rows * cols);
  return w;
}

void linear_forward_bf16(float* y, std::int64_t ldy, const BF16* x, std::int64_t ldx, const BF16* W, const float* b,
                         std::int64_t N, std::int64_t in, std::int64_t out) {
  if (b != nullptr) return gemm_bf16_bias(Trans::kNo, Trans::kYes, N, out, in, x, ldx, W, in, b, y, ldy);
  gemm_bf16(Trans::kNo, Trans::kYes, N, out, in, 1.0f, x, ldx, W, in, 0.0f, y, ldy);
}

void linear_forward_bf16(BF16* y, std::int64_t ldy, const BF16* x, std::int64_t ldx, const BF16* W, const float* b,
                         std::int64_t N, std::int64_t in, std::int64_t out) {
  gemm_bf16_bias(Trans::kNo, Trans::kYes, N, out, in, x, ldx, W, in, b, y, ldy);
}

void linear_backward_bf16(float* dx, std::int64_t lddx, bool accumulate_dx, float* dW, float* db, const float* dy,
                          std::int64_t lddy, const BF16* x, std::int64_t ldx, const BF16* W, std::int64_t N,
                          std::int64_t in, std::int64_t out) {
  if (dx == nullptr && dW == nullptr) {
    if (db != nullptr) add_column_sums(db, dy, lddy, N, out);
    return;
  }
  Tensor dyb = Tensor::empty({N, out}, DType::kBF16);  // dy rounded, packed
  round_with_column_sums(dyb.data<BF16>(), db, dy, lddy, N, out);
  linear_backward_bf16_rounded(dx, lddx, accumulate_dx, dW, dyb.data<BF16>(), x, ldx, W, N, in, out);
}

void linear_backward_bf16_rounded(float* dx, std::int64_t lddx, bool accumulate_dx, float* dW, const BF16* dy,
                                  const BF16* x, std::int64_t ldx, const BF16* W, std::int64_t N, std::int64_t in,
                                  std::int64_t out) {
  // dx (N, in) = dy (N, out) W (out, in); dW (out, in) += dy^T x.
  if (dx != nullptr)
    gemm_bf16(Trans::kNo, Trans::kNo, N, in, out, 1.0f, dy, out, W, in, accumulate_dx ? 1.0f : 0.0f, dx, lddx);
  if (dW != nullptr) gemm_bf16(Trans::kYes, Trans::kNo, out, in, N, 1.0f, dy, out, x, ldx, 1.0f, dW, in);
}

namespace {

// Rows per widened block of a 16-bit x: about 1 MiB of fp32, and at least
// 256 rows so each block's GEMM stays efficient.
std::int64_t stored_block_rows(std::int64_t in) { return std::max<std::int64_t>(256, (std::int64_t{1} << 18) / in); }

// Calls f(x0, ld, r0, n) per block of rows, x0 pointing at fp32 rows.
template <typename X, typename F>
void for_widened_blocks(const X* x, std::int64_t ldx, std::int64_t N, std::int64_t in, F&& f) {
  if constexpr (std::is_same_v<X, float>) {
    f(x, ldx, std::int64_t{0}, N);
  } else {
    const std::int64_t rows = stored_block_rows(in);
    Tensor buf = Tensor::empty({std::min(rows, N), in});
    for (std::int64_t r0 = 0; r0 < N; r0 += rows) {
      const std::int64_t n = std::min(rows, N - r0);
      std::int64_t ld = 0;
      const float* xb = rows_as_f32(x + r0 * ldx, ldx, n, in, buf.f32(), ld);
      f(xb, ld, r0, n);
    }
  }
}

}  // namespace

template <typename X>
void linear_forward_stored(float* y, std::int64_t ldy, const X* x, std::int64_t ldx, const float* W, const float* b,
                           std::int64_t N, std::int64_t in, std::int64_t out, const BF16* W16) {
  if constexpr (std::is_same_v<X, BF16>) {
    if (computes_in_bf16(DType::kBF16)) {
      if (W16 != nullptr) return linear_forward_bf16(y, ldy, x, ldx, W16, b, N, in, out);
      const Tensor wb = bf16_weights(W, out, in);
      return linear_forward_bf16(y, ldy, x, ldx, wb.data<BF16>(), b, N, in, out);
    }
  }
  for_widened_blocks(x, ldx, N, in, [&](const float* xb, std::int64_t ld, std::int64_t r0, std::int64_t n) {
    linear_forward(y + r0 * ldy, ldy, xb, ld, W, b, n, in, out);
  });
}

template <typename X>
void linear_backward_stored(float* dx, std::int64_t lddx, bool accumulate_dx, float* dW, float* db, const float* dy,
                            std::int64_t lddy, const X* x, std::int64_t ldx, const float* W, std::int64_t N,
                            std::int64_t in, std::int64_t out) {
  if constexpr (std::is_same_v<X, BF16>) {
    if (computes_in_bf16(DType::kBF16)) {
      const Tensor wb = bf16_weights(W, out, in);
      return linear_backward_bf16(dx, lddx, accumulate_dx, dW, db, dy, lddy, x, ldx, wb.data<BF16>(), N, in, out);
    }
  }
  // dx and db do not read x: one call for all rows; dW block by block.
  linear_backward<float>(dx, lddx, accumulate_dx, nullptr, db, dy, lddy, nullptr, ldx, W, N, in, out);
  if (dW == nullptr) return;
  for_widened_blocks(x, ldx, N, in, [&](const float* xb, std::int64_t ld, std::int64_t r0, std::int64_t n) {
    linear_backward<float>(nullptr, lddx, false, dW, nullptr, dy + r0 * lddy, lddy, xb, ld, W, n, in, out);
  });
}

#define MULTIHEAD_INSTANTIATE(X)                                                                                   \
  template void linear_forward_stored<X>(float*, std::int64_t, const X*, std::int64_t, const float*, const float*, \
                                         std::int64_t, std::int64_t, std::int64_t, const BF16*);                   \
  template void linear_backward_stored<X>(float*, std::int64_t, bool, float*, float*, const float*, std::int64_t,  \
                                          const X*, std::int64_t, const float*, std::int64_t, std::int64_t,        \
                                          std::int64_t);
MULTIHEAD_INSTANTIATE(float)
MULTIHEAD_INSTANTIATE(BF16)
MULTIHEAD_INSTANTIATE(F16)
#undef MULTIHEAD_INSTANTIATE

template void linear_forward<float>(float*, std::int64_t, const float*, std::int64_t, const float*, const float*,
                                    std::int64_t, std::int64_t, std::int64_t);
template void linear_forward<double>(double*, std::int64_t, const double*, std::int64_t, const double*, const double*,
                                     std::int64_t, std::int64_t, std::int64_t);
template void linear_forward_t<float>(float*, std::int64_t, const float*, std::int64_t, const float*, const float*,
                                      std::int64_t, std::int64_t, std::int64_t);
template void linear_backward<float>(float*, std::int64_t, bool, float*, float*, const float*, std::int64_t,
                                     const float*, std::int64_t, const float*, std::int64_t, std::int64_t,
                                     std::int64_t);
template void linear_backward<double>(double*, std::int64_t, bool, double*, double*, const double*, std::int64_t,
                                      const double*, std::int64_t, const double*, std::int64_t, std::int64_t,
                                      std::int64_t);

}  // namespace multihead
