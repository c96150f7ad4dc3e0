#include "multihead/core/precision.h"

namespace multihead {

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kF32;
  if (name == "bf16") return Precision::kBF16;
  if (name == "fp16") return Precision::kF16;
  throw ConfigError(fmt::format("precision must be \"fp32\", \"bf16\" or \"fp16\", got \"{}\"", name));
}

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kF32: return "fp32";
    case Precision::kBF16: return "bf16";
    case Precision::kF16: return "fp16";
  }
  return "?";
}

DType storage_dtype(Precision p) {
  switch (p) {
    case Precision::kBF16: return DType::kBF16;
    case Precision::kF16: return DType::kF16;
    case Precision::kF32: break;
  }
  return DType::kF32;
}

}  // namespace multihead
