// The precision activations are stored in. Master weights, gradients and
// optimizer state are always fp32, and kernels accumulate in fp32; bf16 and
// fp16 change what is kept between kernels (activations, the attention
// inputs Q, K, V, O, and what forward saves for backward). bf16 also changes
// what the matrix products read where the CPU has bf16 units
// (kernels/gemm_bf16.h): bf16 operands, as autocast gives them.
#pragma once

#include <cstdint>
#include <string_view>

#include "multihead/core/error.h"
#include "multihead/core/tensor.h"

namespace multihead {

enum class Precision : std::uint8_t { kF32, kBF16, kF16 };

// What each precision computes in, for --help: the tail of every --precision flag.
inline constexpr const char* kPrecisionCompute =
    "bf16 also multiplies in bf16 where the CPU has bf16 units (AMX, AVX512-BF16); fp16 computes in fp32";

// "fp32" | "bf16" | "fp16"; throws ConfigError otherwise.
Precision parse_precision(std::string_view name);
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
