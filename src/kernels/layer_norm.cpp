#include "multihead/kernels/layer_norm.h"

#include <cmath>

namespace multihead {

template <typename T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, std::int64_t N,
                        std::int64_t d, T eps) {
#pragma omp parallel for schedule(static) if (N * d > (1 << 16))
  for (std::int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * d;
    T* yr = y + n * d;
    // Two passes (mean, then variance around it) for accuracy with large means.
    T m = T(0);
    for (std::int64_t i = 0; i < d; ++i) m += xr[i];
    m /= static_cast<T>(d);
    T v = T(0);
    for (std::int64_t i = 0; i < d; ++i) v += (xr[i] - m) * (xr[i] - m);
    v /= static_cast<T>(d);
    const T rs = T(1) / std::sqrt(v + eps);
    mean[n] = m;
    rstd[n] = rs;
    for (std::int64_t i = 0; i < d; ++i) {
      T xh = (xr[i] - m) * rs;
      yr[i] = gamma ? xh * gamma[i] + (beta ? beta[i] : T(0)) : xh;
    }
  }
}

// With xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
template <typename T>
void layer_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                         const T* gamma, std::int64_t N, std::int64_t d) {
#pragma omp parallel for schedule(static) if (N * d > (1 << 16))
  for (std::int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * d;
    const T* dyr = dy + n * d;
    T* dxr = dx + n * d;
    T sum_g = T(0), sum_gx = T(0);
    for (std::int64_t i = 0; i < d; ++i) {
      T g = gamma ? dyr[i] * gamma[i] : dyr[i];
      T xh = (xr[i] - mean[n]) * rstd[n];
      sum_g += g;
      sum_gx += g * xh;
    }
    const T inv_d = T(1) / static_cast<T>(d);
    for (std::int64_t i = 0; i < d; ++i) {
      T g = gamma ? dyr[i] * gamma[i] : dyr[i];
      T xh = (xr[i] - mean[n]) * rstd[n];
      dxr[i] = rstd[n] * (g - sum_g * inv_d - xh * sum_gx * inv_d);
    }
  }
  // Parameter gradients reduce over rows: one pass per column block keeps the
  // result independent of the thread count.
  if (dgamma || dbeta) {
#pragma omp parallel for schedule(static) if (N * d > (1 << 16))
    for (std::int64_t i = 0; i < d; ++i) {
      T sg = T(0), sb = T(0);
      for (std::int64_t n = 0; n < N; ++n) {
        T xh = (x[n * d + i] - mean[n]) * rstd[n];
        sg += dy[n * d + i] * xh;
        sb += dy[n * d + i];
      }
      if (dgamma) dgamma[i] += sg;
      if (dbeta) dbeta[i] += sb;
    }
  }
}

template void layer_norm_forward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        std::int64_t, std::int64_t, float);
template void layer_norm_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         std::int64_t, std::int64_t, double);
template void layer_norm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                         const float*, const float*, std::int64_t, std::int64_t);
template void layer_norm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                          const double*, const double*, std::int64_t, std::int64_t);

}  // namespace multihead
