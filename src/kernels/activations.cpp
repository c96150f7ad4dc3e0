// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/activations.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <type_traits>
#include <vector>

#include "column_ranges.h"
#include "gelu.h"
#include "multihead/core/error.h"
#include "multihead/core/suggest.h"
#include "multihead/kernels/gemm_bf16.h"

namespace multihead {

Activation parse_activation(std::string_view name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  if (name == "gelu_tanh") return Activation::kGeluTanh;
  throw ConfigError(fmt::format("activation must be \"relu\", \"gelu\" or \"gelu_tanh\", got \"{}\"{}", name,
                                did_you_mean(name, {"relu", "gelu", "gelu_tanh"})));
}

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kRelu: break;
  }
  return "relu";
}

namespace {

// Whether a stored value is above zero: for bf16, the bits of a positive
// number (sign clear, not zero) without widening.
inline bool is_positive(float v) { return v > 0.0f; }
inline bool is_positive(double v) { return v > 0.0; }
// Bits 1 to 0x7F80 (up to +inf; not zero, not NaN, not negative) in one unsigned comparison.
inline bool is_positive(BF16 v) { return static_cast<std::uint16_t>(v.bits - 1u) < 0x7F80u; }

// The element loops, without OpenMP: the fused kernels call them on rows and
// segments inside their own parallel regions, where even a parallel construct
// whose if clause is false would cost a team setup per call.
// The tanh form of gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// as F.gelu(approximate="tanh") and GPT-2's gelu_new.
template <typename T>
constexpr T kGeluTanhScale = T(0.7978845608028654);  // sqrt(2 / pi)
template <typename T>
constexpr T kGeluTanhCubic = T(0.044715);

// The float path of both GELUs runs in vectors (gelu.cpp); the double path here, with std::erf and
// std::tanh, is their reference and the gradient checks' arithmetic.
template <typename T>
void forward_range(Activation a, T* y, const T* x, std::int64_t n) {
  const T inv_sqrt2 = T(1) / std::numbers::sqrt2_v<T>;
  if constexpr (std::is_same_v<T, float>) {
    if (a != Activation::kRelu) return gelu_forward(y, x, n, a == Activation::kGeluTanh);
  }
  if (a == Activation::kRelu) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
  } else if (a == Activation::kGeluTanh) {
    for (std::int64_t i = 0; i < n; ++i) {
      const T v = x[i];
      y[i] = T(0.5) * v * (T(1) + std::tanh(kGeluTanhScale<T> * (v + kGeluTanhCubic<T> * v * v * v)));
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * inv_sqrt2));
  }
}

// gelu'(x) = Phi(x) + x phi(x); the tanh form's, with t = tanh(u(x)),
// 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x).
template <typename T>
void backward_range(Activation a, T* dx, const T* dy, const T* x, std::int64_t n) {
  const T inv_sqrt2 = T(1) / std::numbers::sqrt2_v<T>;
  const T inv_sqrt2pi = T(1) / std::sqrt(T(2) * std::numbers::pi_v<T>);
  if constexpr (std::is_same_v<T, float>) {
    if (a != Activation::kRelu) return gelu_backward(dx, dy, x, n, a == Activation::kGeluTanh);
  }
  if (a == Activation::kRelu) {
    for (std::int64_t i = 0; i < n; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
  } else if (a == Activation::kGeluTanh) {
    for (std::int64_t i = 0; i < n; ++i) {
      const T v = x[i];
      const T t = std::tanh(kGeluTanhScale<T> * (v + kGeluTanhCubic<T> * v * v * v));
      const T du = kGeluTanhScale<T> * (T(1) + T(3) * kGeluTanhCubic<T> * v * v);
      dx[i] = dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      T cdf = T(0.5) * (T(1) + std::erf(x[i] * inv_sqrt2));
      T pdf = std::exp(T(-0.5) * x[i] * x[i]) * inv_sqrt2pi;
      dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
  }
}

// relu_dropout_backward on n elements, without OpenMP. dy is read whatever
// hid holds: a read under the condition is not vectorised without masked
// loads (AVX-512), and the scalar loop's branch on dropout's random mask is
// mispredicted half the time (25 times slower at AVX2).
template <typename T, typename H>
void relu_dropout_backward_range(T* dx, const T* dy, const H* hid, std::int64_t n, T ks) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = dy[i] * ks;
    dx[i] = is_positive(hid[i]) ? g : T(0);
  }
}

// One row of bias_activation_dropout.
template <typename T>
void bias_activation_dropout_row(Activation a, T* h, T* p, const T* bias, std::int64_t F, const DropoutSpec& drop,
                                 std::uint64_t base) {
  if (bias)
    for (std::int64_t j = 0; j < F; ++j) p[j] += bias[j];
  forward_range(a, h, p, F);
  if (drop.active()) dropout_inplace(h, F, base, drop);
}

// Elements per task of the element-wise passes over whole tensors.
constexpr std::int64_t kChunk = std::int64_t{1} << 14;
constexpr std::int64_t kParallelFrom = std::int64_t{1} << 16;

}  // namespace

template <typename T>
void activation_forward(Activation a, T* y, const T* x, std::int64_t n) {
  if (n < kParallelFrom) return forward_range(a, y, x, n);
#pragma omp parallel for schedule(static)
  for (std::int64_t lo = 0; lo < n; lo += kChunk) forward_range(a, y + lo, x + lo, std::min(kChunk, n - lo));
}

template <typename T>
void bias_activation_dropout(Activation a, T* hid, T* pre, const T* bias, std::int64_t n, std::int64_t F,
                             const DropoutSpec& drop, std::uint64_t base) {
#pragma omp parallel for schedule(static) if (n * F > kParallelFrom)
  for (std::int64_t r = 0; r < n; ++r)
    bias_activation_dropout_row(a, hid + r * F, pre + r * F, bias, F, drop, base + static_cast<std::uint64_t>(r * F));
}

template <typename T>
void relu_dropout_backward(T* dx, const T* dy, const T* hid, std::int64_t n, const DropoutSpec& drop) {
  const T ks = dropout_scale<T>(drop);
  if (n < kParallelFrom) return relu_dropout_backward_range(dx, dy, hid, n, ks);
#pragma omp parallel for schedule(static)
  for (std::int64_t lo = 0; lo < n; lo += kChunk)
    relu_dropout_backward_range(dx + lo, dy + lo, hid + lo, std::min(kChunk, n - lo), ks);
}

template <typename T>
void activation_backward(Activation a, T* dx, const T* dy, const T* x, std::int64_t n) {
  if (n < kParallelFrom) return backward_range(a, dx, dy, x, n);
#pragma omp parallel for schedule(static)
  for (std::int64_t lo = 0; lo < n; lo += kChunk) backward_range(a, dx + lo, dy + lo, x + lo, std::min(kChunk, n - lo));
}

template <typename H>
void bias_activation_dropout_stored(Activation a, H* hid_out, H* pre_out, float* pre, const float* bias, std::int64_t n,
                                    std::int64_t F, const DropoutSpec& drop, std::uint64_t base, float* hid_rounded) {
#pragma omp parallel if (n * F > kParallelFrom)
  {
    std::vector<float> hid(static_cast<std::size_t>(F));  // one row, in L1
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      float* p = pre + r * F;
      bias_activation_dropout_row(a, hid.data(), p, bias, F, drop, base + static_cast<std::uint64_t>(r * F));
      if (pre_out) narrow(pre_out + r * F, p, F);
      narrow(hid_out + r * F, hid.data(), F);
      if (hid_rounded) widen(hid_rounded + r * F, hid_out + r * F, F);  // the stored row, still in L1
    }
  }
}

void activation_dropout_backward_bf16(Activation a, BF16* dpre, float* dh, const BF16* saved, float* db, std::int64_t n,
                                      std::int64_t F, const DropoutSpec& drop, std::uint64_t base) {
  const float ks = dropout_scale<float>(drop);
  // Each thread takes a range of columns down every row, so each column's
  // sum runs in row order, as a separate pass over the rows would.
  for_column_ranges(n, F, [&](std::int64_t c0, std::int64_t w) {
    std::vector<float> x(static_cast<std::size_t>(a == Activation::kRelu ? 0 : w));
    std::vector<float> sums;  // db's range, summed here
    if (db != nullptr) sums.assign(db + c0, db + c0 + w);
    for (std::int64_t r = 0; r < n; ++r) {
      float* g = dh + r * F + c0;
      if (a == Activation::kRelu) {
        relu_dropout_backward_range(g, g, saved + r * F + c0, w, ks);  // saved: hid
      } else {
        if (drop.active()) dropout_row(g, g, w, base + static_cast<std::uint64_t>(r * F + c0), drop);
        widen(x.data(), saved + r * F + c0, w);  // saved: pre
        backward_range(a, g, g, x.data(), w);
      }
      // dpre is an operand of linear1's backward products alone.
      if (db != nullptr) round_operand_adding(dpre + r * F + c0, sums.data(), g, w);
      else round_operand(dpre + r * F + c0, g, w);
    }
    if (db != nullptr) std::copy_n(sums.data(), w, db + c0);
  });
}

template void activation_forward<float>(Activation, float*, const float*, std::int64_t);
template void activation_forward<double>(Activation, double*, const double*, std::int64_t);
template void bias_activation_dropout<float>(Activation, float*, float*, const float*, std::int64_t, std::int64_t,
                                             const DropoutSpec&, std::uint64_t);
template void bias_activation_dropout<double>(Activation, double*, double*, const double*, std::int64_t, std::int64_t,
                                              const DropoutSpec&, std::uint64_t);
template void bias_activation_dropout_stored<BF16>(Activation, BF16*, BF16*, float*, const float*, std::int64_t,
                                                   std::int64_t, const DropoutSpec&, std::uint64_t, float*);
template void bias_activation_dropout_stored<F16>(Activation, F16*, F16*, float*, const float*, std::int64_t,
                                                  std::int64_t, const DropoutSpec&, std::uint64_t, float*);
template void relu_dropout_backward<float>(float*, const float*, const float*, std::int64_t, const DropoutSpec&);
template void relu_dropout_backward<double>(double*, const double*, const double*, std::int64_t, const DropoutSpec&);
template void activation_backward<float>(Activation, float*, const float*, const float*, std::int64_t);
template void activation_backward<double>(Activation, double*, const double*, const double*, std::int64_t);

}  // namespace multihead
