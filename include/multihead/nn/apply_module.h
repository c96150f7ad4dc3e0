// SPDX-License-Identifier: Apache-2.0
// Runs one module described in PyTorch's terms on given weights and inputs:
// the library side of `multihead apply`, and what the golden tests call.
//
// Module JSON: {"type": "MultiheadAttention", the constructor arguments by
// their PyTorch names (embed_dim, num_heads, bias, add_bias_kv, add_zero_attn,
// kdim, vdim, dropout, batch_first), and the call options need_weights,
// average_attn_weights, is_causal, causal_alignment ("top_left" or
// "bottom_right"), training (dropout on; default false) and seed}.
//
// Weights: the module's state_dict names. Inputs: query, and key and value
// (both absent means self-attention on query, with the fused QKV projection);
// optional key_padding_mask, attn_mask and grad_output.
//
// Outputs: output; attn_weights when need_weights; with grad_output also
// grad_query (grad_key, grad_value for cross-attention) and "grad." + each
// parameter name.
#pragma once

#include <string>
#include <string_view>

#include "multihead/io/safetensors.h"

namespace multihead {

// Throws ConfigError / ShapeError / IoError with a message naming the problem.
// `module_source` names the module config in messages.
TensorMap apply_module(std::string_view module_json, const std::string& module_source, const TensorMap& weights,
                       const TensorMap& inputs);

}  // namespace multihead
