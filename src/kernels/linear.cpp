#include "multihead/kernels/linear.h"

#include <algorithm>
#include <type_traits>

#include "multihead/core/tensor.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/half.h"

namespace multihead {

template <typename T>
void linear_forward(T* y, std::int64_t ldy, const T* x, std::int64_t ldx, const T* W, const T* b, std::int64_t N,
                    std::int64_t in, std::int64_t out) {
  // Seed y with the bias so the GEMM adds onto it (beta = 1): one pass over
  // y, shared between the threads when y is large (a 4096 x 1536 output
  // takes about a millisecond to write on one core).
  T beta = T(0);
  if (b != nullptr) {
#pragma omp parallel for schedule(static) if (N * out >= (std::int64_t{1} << 18))
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < out; ++o) y[n * ldy + o] = b[o];
    beta = T(1);
  }
  gemm(Trans::kNo, Trans::kYes, N, out, in, T(1), x, ldx, W, in, beta, y, ldy);
}

template <typename T>
void linear_backward(T* dx, std::int64_t lddx, bool accumulate_dx, T* dW, T* db, const T* dy, std::int64_t lddy,
                     const T* x, std::int64_t ldx, const T* W, std::int64_t N, std::int64_t in, std::int64_t out) {
  if (dx != nullptr) gemm(Trans::kNo, Trans::kNo, N, in, out, T(1), dy, lddy, W, in, accumulate_dx ? T(1) : T(0), dx, lddx);
  // dW (out, in) += dy^T (out, N) x (N, in)
  if (dW != nullptr) gemm(Trans::kYes, Trans::kNo, out, in, N, T(1), dy, lddy, x, ldx, T(1), dW, in);
  if (db != nullptr)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < out; ++o) db[o] += dy[n * lddy + o];
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
                           std::int64_t N, std::int64_t in, std::int64_t out) {
  for_widened_blocks(x, ldx, N, in, [&](const float* xb, std::int64_t ld, std::int64_t r0, std::int64_t n) {
    linear_forward(y + r0 * ldy, ldy, xb, ld, W, b, n, in, out);
  });
}

template <typename X>
void linear_backward_stored(float* dx, std::int64_t lddx, bool accumulate_dx, float* dW, float* db, const float* dy,
                            std::int64_t lddy, const X* x, std::int64_t ldx, const float* W, std::int64_t N,
                            std::int64_t in, std::int64_t out) {
  // dx and db do not read x: one call for all rows; dW block by block.
  linear_backward<float>(dx, lddx, accumulate_dx, nullptr, db, dy, lddy, nullptr, ldx, W, N, in, out);
  if (dW == nullptr) return;
  for_widened_blocks(x, ldx, N, in, [&](const float* xb, std::int64_t ld, std::int64_t r0, std::int64_t n) {
    linear_backward<float>(nullptr, lddx, false, dW, nullptr, dy + r0 * lddy, lddy, xb, ld, W, n, in, out);
  });
}

#define MULTIHEAD_INSTANTIATE(X)                                                                                  \
  template void linear_forward_stored<X>(float*, std::int64_t, const X*, std::int64_t, const float*, const float*, \
                                         std::int64_t, std::int64_t, std::int64_t);                                \
  template void linear_backward_stored<X>(float*, std::int64_t, bool, float*, float*, const float*, std::int64_t,  \
                                          const X*, std::int64_t, const float*, std::int64_t, std::int64_t,        \
                                          std::int64_t);
MULTIHEAD_INSTANTIATE(float)
MULTIHEAD_INSTANTIATE(BF16)
MULTIHEAD_INSTANTIATE(F16)
#undef MULTIHEAD_INSTANTIATE

template void linear_forward<float>(float*, std::int64_t, const float*, std::int64_t, const float*, const float*,
                                    std::int64_t, std::int64_t, std::int64_t);
template void linear_forward<double>(double*, std::int64_t, const double*, std::int64_t, const double*,
                                     const double*, std::int64_t, std::int64_t, std::int64_t);
template void linear_backward<float>(float*, std::int64_t, bool, float*, float*, const float*, std::int64_t,
                                     const float*, std::int64_t, const float*, std::int64_t, std::int64_t,
                                     std::int64_t);
template void linear_backward<double>(double*, std::int64_t, bool, double*, double*, const double*, std::int64_t,
                                      const double*, std::int64_t, const double*, std::int64_t, std::int64_t,
                                      std::int64_t);

}  // namespace multihead
