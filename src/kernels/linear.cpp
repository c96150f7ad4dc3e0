#include "multihead/kernels/linear.h"

#include "multihead/kernels/gemm.h"

namespace multihead {

template <typename T>
void linear_forward(T* y, std::int64_t ldy, const T* x, std::int64_t ldx, const T* W, const T* b, std::int64_t N,
                    std::int64_t in, std::int64_t out) {
  // Seed y with the bias so the GEMM adds onto it (beta = 1): one pass over y.
  T beta = T(0);
  if (b != nullptr) {
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
