// Element-wise activations of the feed-forward block, as torch.nn.functional:
// relu, and gelu in its exact form 0.5 x (1 + erf(x / sqrt 2)).
#pragma once

#include <cstdint>
#include <string_view>

#include "multihead/kernels/dropout.h"

namespace multihead {

enum class Activation : std::uint8_t { kRelu, kGelu };

// Parses "relu" / "gelu"; throws ConfigError otherwise.
Activation parse_activation(std::string_view name);

// y = f(x), (n). y may alias x.
template <typename T>
void activation_forward(Activation a, T* y, const T* x, std::int64_t n);

// The feed-forward block's hidden layer in one pass over memory, a row at a
// time: pre (n, F) += bias (F) on every row (bias may be null), hid (n, F) =
// f(pre), then dropout of hid, element (r, j) having index base + r F + j in
// the dropout stream, while the row is still in L1. Equal to the separate
// bias add, activation_forward and dropout_inplace.
template <typename T>
void bias_activation_dropout(Activation a, T* hid, T* pre, const T* bias, std::int64_t n, std::int64_t F,
                             const DropoutSpec& drop, std::uint64_t base);

// dx = f'(x) * dy, (n). dx may alias dy.
template <typename T>
void activation_backward(Activation a, T* dx, const T* dy, const T* x, std::int64_t n);

}  // namespace multihead
