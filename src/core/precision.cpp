// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/suggest.h"
#include "multihead/core/precision.h"

namespace multihead {

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kF32;
  if (name == "bf16") return Precision::kBF16;
  if (name == "fp16") return Precision::kF16;
  if (name == "int8") return Precision::kInt8;
  throw ConfigError(fmt::format("precision must be \"fp32\", \"bf16\", \"fp16\" or \"int8\", got \"{}\"{}", name,
                                did_you_mean(name, {"fp32", "bf16", "fp16", "int8"})));
}

Precision training_precision(Precision p, std::string_view what) {
  check<ConfigError>(p != Precision::kInt8,
                     "{}: int8 is a precision for inference (predict, eval, serve); train in "
                     "fp32, bf16 or fp16",
                     what);
  return p;
}

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kF32: return "fp32";
    case Precision::kBF16: return "bf16";
    case Precision::kF16: return "fp16";
    case Precision::kInt8: return "int8";
  }
  return "?";
}

DType storage_dtype(Precision p) {
  switch (p) {
    case Precision::kBF16: return DType::kBF16;
    case Precision::kF16: return DType::kF16;
    case Precision::kF32:
    case Precision::kInt8: break;
  }
  return DType::kF32;
}

}  // namespace multihead
