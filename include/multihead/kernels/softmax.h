// SPDX-License-Identifier: Apache-2.0
// Row softmax that treats a row of all -inf as "nothing to attend to".
#pragma once

#include <cstdint>

namespace multihead {

// In place over x (n). A row whose entries are all -inf becomes all zeros
// (not NaN, as exp(-inf - -inf) would give): a query with every key masked
// attends to nothing. Returns false for such a row.
template <typename T>
bool softmax_row(T* x, std::int64_t n);

// dx = y * (dy - sum(y * dy)) for y = softmax(x); a zero row y gives dx = 0.
// dx may alias dy.
template <typename T>
void softmax_row_backward(T* dx, const T* y, const T* dy, std::int64_t n);

}  // namespace multihead
