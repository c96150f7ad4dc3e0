// SPDX-License-Identifier: Apache-2.0
// The precision activations are stored in. Master weights, gradients and
// optimizer state are always fp32, and kernels accumulate in fp32; bf16 and
// fp16 change what is kept between kernels (activations, the attention
// inputs Q, K, V, O, and what forward saves for backward). bf16 also changes
// what the matrix products read where the CPU has bf16 units
// (kernels/gemm_bf16.h): bf16 operands, as autocast gives them.
//
// int8 is for inference only: activations stay fp32 (a forward runs as in
// fp32), and the products with weights run in int8 (kernels/gemm_int8.h:
// weights quantized once per output channel, activations per row at each
// product), as dynamic quantization does in PyTorch and ONNX Runtime.
#pragma once

#include <cstdint>
#include <string_view>

#include "multihead/core/error.h"
#include "multihead/core/tensor.h"

namespace multihead {

enum class Precision : std::uint8_t { kF32, kBF16, kF16, kInt8 };

// What each precision computes in, for --help: the tail of every --precision flag.
inline constexpr const char* kPrecisionCompute =
    "bf16 also multiplies in bf16 where the CPU has bf16 units (AMX, AVX512-BF16); fp16 computes in fp32";
// The same for commands that only run a trained model.
inline constexpr const char* kInferencePrecisionCompute =
    "bf16 also multiplies in bf16 where the CPU has bf16 units (AMX, AVX512-BF16); fp16 computes in fp32; int8 "
    "multiplies by int8 weights (per output channel) and activations (per row, at each product)";

// "fp32" | "bf16" | "fp16" | "int8"; throws ConfigError otherwise.
Precision parse_precision(std::string_view name);
// The same, refusing int8 (which only inference runs) in a ConfigError that names `what`.
Precision training_precision(Precision p, std::string_view what);
// What a forward pass keeps its activations in: kF32 for int8.
inline Precision activation_precision(Precision p) { return p == Precision::kInt8 ? Precision::kF32 : p; }
std::string_view precision_name(Precision p);
// The tensor dtype activations are stored in: F32, BF16 or F16.
DType storage_dtype(Precision p);

// Calls f with a value of the C++ element type of a float storage dtype
// (float, BF16 or F16), so one generic lambda serves all three.
template <typename F>
decltype(auto) visit_float_storage(DType dt, F&& f) {
  switch (dt) {
    case DType::kBF16: return f(BF16{});
    case DType::kF16: return f(F16{});
    case DType::kF32: return f(float{});
    default: break;
  }
  throw Error(fmt::format("{} is not a floating-point storage type", dtype_name(dt)));
}

}  // namespace multihead
