// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "column_ranges.h"
#include "multihead/core/error.h"
#include "multihead/kernels/half.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/layer_norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "dispatch.h"

// The rows, once for each Highway target.
HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// float rows in vectors: a row's sums then add in every lane at once instead
// of one long chain of dependent additions (the double path, for the
// gradient checks, stays scalar).

// Sum over i < d of f(vector at i) and of f_tail(i) for the scalar tail.
template <typename V, typename S>
float row_sum(std::int64_t d, V&& f, S&& f_tail) {
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  auto acc = hn::Zero(df);
  std::int64_t i = 0;
  for (; i + N <= d; i += N) acc = hn::Add(acc, f(i));
  float s = hn::GetLane(hn::SumOfLanes(df, acc));
  for (; i < d; ++i) s += f_tail(i);
  return s;
}

void forward_row(float* y, float& mean, float& rstd, const float* x, const float* gamma, const float* beta,
                 std::int64_t d, float eps) {
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  // Two passes (mean, then variance around it) for accuracy with large means.
  const float m = row_sum(
                      d, [&](std::int64_t i) { return hn::LoadU(df, x + i); }, [&](std::int64_t i) { return x[i]; }) /
                  static_cast<float>(d);
  const auto vm = hn::Set(df, m);
  const float v = row_sum(
                      d,
                      [&](std::int64_t i) {
                        const auto c = hn::Sub(hn::LoadU(df, x + i), vm);
                        return hn::Mul(c, c);
                      },
                      [&](std::int64_t i) { return (x[i] - m) * (x[i] - m); }) /
                  static_cast<float>(d);
  const float rs = 1.0f / std::sqrt(v + eps);
  mean = m, rstd = rs;
  const auto vrs = hn::Set(df, rs);
  std::int64_t i = 0;
  for (; i + N <= d; i += N) {
    auto xh = hn::Mul(hn::Sub(hn::LoadU(df, x + i), vm), vrs);
    if (gamma) xh = hn::Mul(xh, hn::LoadU(df, gamma + i));
    if (gamma && beta) xh = hn::Add(xh, hn::LoadU(df, beta + i));
    hn::StoreU(xh, df, y + i);
  }
  for (; i < d; ++i) {
    const float xh = (x[i] - m) * rs;
    y[i] = gamma ? xh * gamma[i] + (beta ? beta[i] : 0.0f) : xh;
  }
}

void backward_row(float* dx, const float* dy, const float* x, float m, float rs, const float* gamma, std::int64_t d) {
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const auto vm = hn::Set(df, m), vrs = hn::Set(df, rs);
  auto g_at = [&](std::int64_t i) {
    const auto g = hn::LoadU(df, dy + i);
    return gamma ? hn::Mul(g, hn::LoadU(df, gamma + i)) : g;
  };
  auto xh_at = [&](std::int64_t i) { return hn::Mul(hn::Sub(hn::LoadU(df, x + i), vm), vrs); };
  auto g_tail = [&](std::int64_t i) { return gamma ? dy[i] * gamma[i] : dy[i]; };
  const float sum_g = row_sum(d, g_at, g_tail);
  const float sum_gx = row_sum(
      d, [&](std::int64_t i) { return hn::Mul(g_at(i), xh_at(i)); },
      [&](std::int64_t i) { return g_tail(i) * ((x[i] - m) * rs); });
  const float inv_d = 1.0f / static_cast<float>(d);
  const auto mg = hn::Set(df, sum_g * inv_d), mgx = hn::Set(df, sum_gx * inv_d);
  std::int64_t i = 0;
  for (; i + N <= d; i += N)
    hn::StoreU(hn::Mul(vrs, hn::Sub(hn::Sub(g_at(i), mg), hn::Mul(xh_at(i), mgx))), df, dx + i);
  for (; i < d; ++i) dx[i] = rs * (g_tail(i) - sum_g * inv_d - (x[i] - m) * rs * sum_gx * inv_d);
}

}  // namespace
}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(forward_row);
HWY_EXPORT(backward_row);

namespace {

// Parameter gradients reduce over rows: dgamma += sum_n g * xhat, dbeta +=
// sum_n g, with x_at(i) and g_at(i) reading element i = n * d + j. Each
// column's sum runs over the rows in order (for_column_ranges), so the
// result does not depend on the thread count.
template <typename T, typename X, typename G>
void parameter_grads(T* dgamma, T* dbeta, const T* mean, const T* rstd, std::int64_t N, std::int64_t d, X&& x_at,
                     G&& g_at) {
  for_column_ranges(N, d, [&](std::int64_t i0, std::int64_t w) {
    std::vector<T> sg(static_cast<std::size_t>(w)), sb(static_cast<std::size_t>(w));
    T* __restrict psg = sg.data();
    T* __restrict psb = sb.data();
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int64_t at = n * d + i0;
      const T m = mean[n], r = rstd[n];
      for (std::int64_t j = 0; j < w; ++j) {
        const T g = g_at(at + j);
        psg[j] += g * ((x_at(at + j) - m) * r), psb[j] += g;
      }
    }
    for (std::int64_t j = 0; j < w; ++j) {
      if (dgamma) dgamma[i0 + j] += psg[j];
      if (dbeta) dbeta[i0 + j] += psb[j];
    }
  });
}

// A stored value as fp32: the column sums read one at a time.
inline float stored_value(float v) { return v; }
inline float stored_value(BF16 v) { return bf16_to_float(v.bits); }
inline float stored_value(F16 v) { return f16_to_float(v.bits); }

}  // namespace

// Values (N * d) from which a pass over the rows is shared between the
// threads: from 2^16, a 384 x 128 one (a long input to a small model) ran on
// one thread while the others waited for the next product.
constexpr std::int64_t kThreadedFrom = std::int64_t{1} << 14;

template <typename T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, std::int64_t N,
                        std::int64_t d, T eps) {
#pragma omp parallel for schedule(static) if (N * d > kThreadedFrom)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * d;
    T* yr = y + n * d;
    if constexpr (std::is_same_v<T, float>) {
      MULTIHEAD_DISPATCH(forward_row)(yr, mean[n], rstd[n], xr, gamma, beta, d, eps);
      continue;
    }
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
#pragma omp parallel for schedule(static) if (N * d > kThreadedFrom)
  for (std::int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * d;
    const T* dyr = dy + n * d;
    T* dxr = dx + n * d;
    if constexpr (std::is_same_v<T, float>) {
      MULTIHEAD_DISPATCH(backward_row)(dxr, dyr, xr, mean[n], rstd[n], gamma, d);
      continue;
    }
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
  if (dgamma || dbeta)
    parameter_grads(
        dgamma, dbeta, mean, rstd, N, d, [&](std::int64_t at) { return x[at]; },
        [&](std::int64_t at) { return dy[at]; });
}

template <typename T>
void residual_layer_norm_forward(float* y, float* mean, float* rstd, float* s, T* saved, const float* x,
                                 const float* gamma, const float* beta, std::int64_t N, std::int64_t d, float eps,
                                 const DropoutSpec& drop, bool write_sum) {
  check(saved != nullptr || write_sum, "residual_layer_norm_forward: the sum must go somewhere for backward");
#pragma omp parallel if (N * d > kThreadedFrom)
  {
    std::vector<float> row(write_sum ? 0 : static_cast<std::size_t>(d));  // h, when it is not written over s
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      float* h = write_sum ? s + n * d : row.data();
      if (!write_sum) std::copy_n(s + n * d, d, h);
      // The mask's stream index is the element's index in the tensor, as
      // dropout over the whole tensor draws it.
      if (drop.active()) dropout_inplace(h, d, static_cast<std::uint64_t>(n * d), drop);
      const float* xr = x + n * d;
      for (std::int64_t i = 0; i < d; ++i) h[i] += xr[i];
      MULTIHEAD_DISPATCH(forward_row)(y + n * d, mean[n], rstd[n], h, gamma, beta, d, eps);
      if (saved) narrow(saved + n * d, h, d);
    }
  }
}

template <typename T>
void residual_layer_norm_backward(float* dh, float* ds, float* dgamma, float* dbeta, const float* dy,
                                  const float* dy_extra, const float* dh_extra, const T* h, const float* mean,
                                  const float* rstd, const float* gamma, std::int64_t N, std::int64_t d,
                                  const DropoutSpec& drop) {
  constexpr bool kStoredF32 = std::is_same_v<T, float>;
#pragma omp parallel if (N * d > kThreadedFrom)
  {
    // One row of the summed gradient and of h widened, in L1.
    std::vector<float> g_row(dy_extra ? static_cast<std::size_t>(d) : 0);
    std::vector<float> h_row(kStoredF32 ? 0 : static_cast<std::size_t>(d));
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const float* g = dy + n * d;
      if (dy_extra) {
        const float* e = dy_extra + n * d;
        for (std::int64_t i = 0; i < d; ++i) g_row[i] = g[i] + e[i];
        g = g_row.data();
      }
      const float* hr;
      if constexpr (kStoredF32) {
        hr = h + n * d;
      } else {
        widen(h_row.data(), h + n * d, d);
        hr = h_row.data();
      }
      float* dhr = dh + n * d;
      MULTIHEAD_DISPATCH(backward_row)(dhr, g, hr, mean[n], rstd[n], gamma, d);
      if (dh_extra) {
        const float* e = dh_extra + n * d;
        for (std::int64_t i = 0; i < d; ++i) dhr[i] += e[i];
      }
      if (ds) {
        std::copy_n(dhr, d, ds + n * d);
        if (drop.active()) dropout_inplace(ds + n * d, d, static_cast<std::uint64_t>(n * d), drop);
      }
    }
  }
  if (dgamma || dbeta) {
    if (dy_extra) {
      parameter_grads(
          dgamma, dbeta, mean, rstd, N, d, [&](std::int64_t at) { return stored_value(h[at]); },
          [&](std::int64_t at) { return dy[at] + dy_extra[at]; });
    } else {
      parameter_grads(
          dgamma, dbeta, mean, rstd, N, d, [&](std::int64_t at) { return stored_value(h[at]); },
          [&](std::int64_t at) { return dy[at]; });
    }
  }
}

template void layer_norm_forward<float>(float*, float*, float*, const float*, const float*, const float*, std::int64_t,
                                        std::int64_t, float);
template void layer_norm_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         std::int64_t, std::int64_t, double);
template void layer_norm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                         const float*, std::int64_t, std::int64_t);
template void layer_norm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                          const double*, const double*, std::int64_t, std::int64_t);

// A type argument cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define MULTIHEAD_INSTANTIATE(T)                                                                                    \
  template void residual_layer_norm_forward<T>(float*, float*, float*, float*, T*, const float*, const float*,      \
                                               const float*, std::int64_t, std::int64_t, float, const DropoutSpec&, \
                                               bool);                                                               \
  template void residual_layer_norm_backward<T>(float*, float*, float*, float*, const float*, const float*,         \
                                                const float*, const T*, const float*, const float*, const float*,   \
                                                std::int64_t, std::int64_t, const DropoutSpec&);
// NOLINTEND(bugprone-macro-parentheses)
MULTIHEAD_INSTANTIATE(float)
MULTIHEAD_INSTANTIATE(BF16)
MULTIHEAD_INSTANTIATE(F16)
#undef MULTIHEAD_INSTANTIATE

}  // namespace multihead
#endif  // HWY_ONCE
