#include "multihead/kernels/activations.h"

#include <cmath>
#include <numbers>

#include "multihead/core/error.h"

namespace multihead {

Activation parse_activation(std::string_view name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  throw ConfigError(fmt::format("activation must be \"relu\" or \"gelu\", got \"{}\"", name));
}

template <typename T>
void activation_forward(Activation a, T* y, const T* x, std::int64_t n) {
  const T inv_sqrt2 = T(1) / std::numbers::sqrt2_v<T>;
  if (a == Activation::kRelu) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
  } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * inv_sqrt2));
  }
}

template <typename T>
void bias_activation_dropout(Activation a, T* hid, T* pre, const T* bias, std::int64_t n, std::int64_t F,
                             const DropoutSpec& drop, std::uint64_t base) {
  const T inv_sqrt2 = T(1) / std::numbers::sqrt2_v<T>;
#pragma omp parallel for schedule(static) if (n * F > (1 << 16))
  for (std::int64_t r = 0; r < n; ++r) {
    T* p = pre + r * F;
    T* h = hid + r * F;
    if (bias)
      for (std::int64_t j = 0; j < F; ++j) p[j] += bias[j];
    if (a == Activation::kRelu) {
      for (std::int64_t j = 0; j < F; ++j) h[j] = p[j] > T(0) ? p[j] : T(0);
    } else {
      for (std::int64_t j = 0; j < F; ++j) h[j] = T(0.5) * p[j] * (T(1) + std::erf(p[j] * inv_sqrt2));
    }
    if (drop.active()) dropout_inplace(h, F, base + static_cast<std::uint64_t>(r * F), drop);
  }
}

// gelu'(x) = Phi(x) + x phi(x)
template <typename T>
void activation_backward(Activation a, T* dx, const T* dy, const T* x, std::int64_t n) {
  const T inv_sqrt2 = T(1) / std::numbers::sqrt2_v<T>;
  const T inv_sqrt2pi = T(1) / std::sqrt(T(2) * std::numbers::pi_v<T>);
  if (a == Activation::kRelu) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
  } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) {
      T cdf = T(0.5) * (T(1) + std::erf(x[i] * inv_sqrt2));
      T pdf = std::exp(T(-0.5) * x[i] * x[i]) * inv_sqrt2pi;
      dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
  }
}

template void activation_forward<float>(Activation, float*, const float*, std::int64_t);
template void activation_forward<double>(Activation, double*, const double*, std::int64_t);
template void bias_activation_dropout<float>(Activation, float*, float*, const float*, std::int64_t, std::int64_t,
                                             const DropoutSpec&, std::uint64_t);
template void bias_activation_dropout<double>(Activation, double*, double*, const double*, std::int64_t, std::int64_t,
                                              const DropoutSpec&, std::uint64_t);
template void activation_backward<float>(Activation, float*, const float*, const float*, std::int64_t);
template void activation_backward<double>(Activation, double*, const double*, const double*, std::int64_t);

}  // namespace multihead
