// SPDX-License-Identifier: Apache-2.0
#include "multihead/kernels/softmax.h"

#include <cmath>
#include <limits>

namespace multihead {

template <typename T>
bool softmax_row(T* x, std::int64_t n) {
  T mx = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
  if (mx == -std::numeric_limits<T>::infinity()) {
    for (std::int64_t j = 0; j < n; ++j) x[j] = T(0);
    return false;
  }
  T sum = T(0);
  for (std::int64_t j = 0; j < n; ++j) {
    x[j] = std::exp(x[j] - mx);
    sum += x[j];
  }
  T inv = T(1) / sum;
  for (std::int64_t j = 0; j < n; ++j) x[j] *= inv;
  return true;
}

template <typename T>
void softmax_row_backward(T* dx, const T* y, const T* dy, std::int64_t n) {
  T dot = T(0);
  for (std::int64_t j = 0; j < n; ++j) dot += y[j] * dy[j];
  for (std::int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - dot);
}

template bool softmax_row<float>(float*, std::int64_t);
template bool softmax_row<double>(double*, std::int64_t);
template void softmax_row_backward<float>(float*, const float*, const float*, std::int64_t);
template void softmax_row_backward<double>(double*, const double*, const double*, std::int64_t);

}  // namespace multihead
