// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "multihead/core/error.h"

namespace multihead {

template <typename T>
CrossEntropyResult cross_entropy(T* dlogits, const T* logits, const std::int64_t* targets, std::int64_t N,
                                 std::int64_t C, std::int64_t ignore_index, double label_smoothing, double grad_scale,
                                 const double* weight) {
  check<ConfigError>(label_smoothing >= 0.0 && label_smoothing <= 1.0, "label_smoothing must be in [0, 1], got {}",
                     label_smoothing);
  CrossEntropyResult r;
  double weights = 0;  // sum of w[y] over the rows scored: the mean's denominator
  for (std::int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore_index) continue;
    check<ShapeError>(targets[n] >= 0 && targets[n] < C, "target {} at row {} is outside [0, {})", targets[n], n, C);
    ++r.count;
    weights += weight ? weight[targets[n]] : 1.0;
  }
  double weight_sum = static_cast<double>(C);  // sum of w[c] over the classes
  if (weight) {
    weight_sum = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      check<ConfigError>(std::isfinite(weight[c]) && weight[c] >= 0,
                         "class weight {} is {}: weights are finite and >= 0", c, weight[c]);
      weight_sum += weight[c];
    }
  }
  const double eps = label_smoothing;
  const double inv = weights > 0 ? 1.0 / weights : 0.0;
  double total = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * C;
    T* dz = dlogits ? dlogits + n * C : nullptr;
    if (targets[n] == ignore_index) {
      if (dz) std::fill(dz, dz + C, T(0));
      continue;
    }
    // log p = z - (max + log sum exp(z - max)), in double for the sum.
    double mx = static_cast<double>(*std::max_element(z, z + C));
    double sum = 0, sum_z = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      sum += std::exp(static_cast<double>(z[c]) - mx);
      sum_z += static_cast<double>(z[c]);
    }
    const double lse = mx + std::log(sum);
    const double nll = lse - static_cast<double>(z[targets[n]]);
    const double wy = weight ? weight[targets[n]] : 1.0;
    // sum_c w_c (-log p_c) / C; without weights mean_c(-log p_c).
    double smooth = lse - sum_z / static_cast<double>(C);
    if (weight) {
      smooth = 0;
      for (std::int64_t c = 0; c < C; ++c) smooth += weight[c] * (lse - static_cast<double>(z[c]));
      smooth /= static_cast<double>(C);
    }
    total += (1.0 - eps) * wy * nll + eps * smooth;
    if (dz) {
      // d/dz_c: (1 - eps) w_y (p_c - [c = y]) + eps/C (sum_k w_k p_c - w_c).
      const double s = grad_scale * inv;
      for (std::int64_t c = 0; c < C; ++c) {
        const double p = std::exp(static_cast<double>(z[c]) - lse);
        const double wc = weight ? weight[c] : 1.0;
        const double g = (1.0 - eps) * wy * (p - (c == targets[n] ? 1.0 : 0.0)) +
                         eps / static_cast<double>(C) * (weight_sum * p - wc);
        dz[c] = static_cast<T>(g * s);
      }
    }
  }
  r.loss = total * inv;
  return r;
}

template CrossEntropyResult cross_entropy<float>(float*, const float*, const std::int64_t*, std::int64_t, std::int64_t,
                                                 std::int64_t, double, double, const double*);
template CrossEntropyResult cross_entropy<double>(double*, const double*, const std::int64_t*, std::int64_t,
                                                  std::int64_t, std::int64_t, double, double, const double*);

}  // namespace multihead
