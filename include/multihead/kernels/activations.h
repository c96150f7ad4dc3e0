// SPDX-License-Identifier: Apache-2.0
// Element-wise activations of the feed-forward block, as torch.nn.functional:
// relu, gelu in its exact form 0.5 x (1 + erf(x / sqrt 2)), and gelu_tanh,
// F.gelu(approximate="tanh") (GPT-2's gelu_new).
#pragma once

#include <cstdint>
#include <string_view>

#include "multihead/kernels/dropout.h"
#include "multihead/kernels/half.h"

namespace multihead {

enum class Activation : std::uint8_t { kRelu, kGelu, kGeluTanh };

// Parses "relu", "gelu" or "gelu_tanh"; throws ConfigError otherwise.
Activation parse_activation(std::string_view name);
std::string_view activation_name(Activation a);

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

// relu followed by dropout, differentiated from its output alone: with
// hid = dropout(relu(pre)), hid > 0 exactly where the unit was kept and pre
// > 0 (a positive pre times 1/(1-p) >= 1 stays positive), so
//   dpre = hid > 0 ? dhid / (1 - p) : 0     (dhid where nothing is dropped)
// with the same rounding as dropout then relu's backward. pre need not be
// kept. As torch's relu backward, which reads relu's result. dx may alias dy.
template <typename T>
void relu_dropout_backward(T* dx, const T* dy, const T* hid, std::int64_t n, const DropoutSpec& drop);

// The feed-forward block's hidden layer when its activations are kept in 16
// bits (H: BF16 or F16): bias_activation_dropout on the fp32 rows pre (n, F)
// as the first product left them, then pre and hid rounded to H into pre_out
// and hid_out (n, F), a row at a time, so the unrounded fp32 hid never
// reaches memory. pre_out may be null (relu's backward reads hid). Where the
// second product runs in fp32 (no bf16 units, or fp16), hid_rounded (n, F)
// receives the stored hid widened back, the values backward will read; null
// where the product reads hid_out itself. Equal to bias_activation_dropout,
// narrow and widen.
template <typename H>
void bias_activation_dropout_stored(Activation a, H* hid_out, H* pre_out, float* pre, const float* bias, std::int64_t n,
                                    std::int64_t F, const DropoutSpec& drop, std::uint64_t base,
                                    float* hid_rounded = nullptr);

// Its backward in one pass over memory: dh (n, F), the fp32 gradient of hid,
// becomes that of pre (dropout's mask, times f' at pre, read in bf16); db (F)
// gets its column sums added (in row order; db may be null); dpre (n, F) is
// it rounded to bf16 for the products. Equal to dropout_inplace,
// activation_backward on the widened pre, the column sums and narrow; dh
// holds the fp32 gradient of pre afterwards. For relu, `saved` is hid (as
// relu_dropout_backward, no mask drawn); for gelu it is pre.
void activation_dropout_backward_bf16(Activation a, BF16* dpre, float* dh, const BF16* saved, float* db, std::int64_t n,
                                      std::int64_t F, const DropoutSpec& drop, std::uint64_t base);

}  // namespace multihead
