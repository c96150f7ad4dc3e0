// Element-wise activations of the feed-forward block, as torch.nn.functional:
// relu, and gelu in its exact form 0.5 x (1 + erf(x / sqrt 2)).
#pragma once

#include <cstdint>
#include <string_view>

namespace multihead {

enum class Activation : std::uint8_t { kRelu, kGelu };

// Parses "relu" / "gelu"; throws ConfigError otherwise.
Activation parse_activation(std::string_view name);

// y = f(x), (n). y may alias x.
template <typename T>
void activation_forward(Activation a, T* y, const T* x, std::int64_t n);

// dx = f'(x) * dy, (n). dx may alias dy.
template <typename T>
void activation_backward(Activation a, T* dx, const T* dy, const T* x, std::int64_t n);

}  // namespace multihead
