// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/state_dict.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace multihead {

TensorMap state_dict(const ParamStore& store) {
  TensorMap m;
  for (std::size_t h = 0; h < store.entries().size(); ++h) {
    const auto& e = store.entry(h);
    Tensor t = Tensor::empty(e.shape);
    std::memcpy(t.f32(), store.data(h), sizeof(float) * static_cast<std::size_t>(e.numel));
    m.emplace(e.name, std::move(t));
  }
  return m;
}

void check_finite_weights(const Tensor& t, const std::string& what, const std::string& name) {
  const float* v = t.f32();
  const auto bad = std::find_if(v, v + t.numel(), [](float x) { return !std::isfinite(x); });
  if (bad != v + t.numel()) throw IoError(fmt::format("{}: '{}' holds {} at element {}", what, name, *bad, bad - v));
}

void load_state_dict(ParamStore& store, const TensorMap& tensors, const std::string& what, bool allow_extra) {
  for (std::size_t h = 0; h < store.entries().size(); ++h) {
    const auto& e = store.entry(h);
    auto it = tensors.find(e.name);
    check<ShapeError>(it != tensors.end(), "{}: missing tensor '{}' of shape {}", what, e.name, shape_text(e.shape));
    const Tensor& t = it->second;
    check<ShapeError>(t.dtype() == DType::kF32, "{}: '{}' must be F32, got {}", what, e.name, dtype_name(t.dtype()));
    check<ShapeError>(t.shape() == e.shape, "{}: '{}' has shape {}, expected {}", what, e.name, shape_text(t.shape()),
                      shape_text(e.shape));
    check_finite_weights(t, what, e.name);
  }
  if (!allow_extra)
    for (const auto& [name, t] : tensors)
      check<ShapeError>(store.find(name).has_value(), "{}: unexpected tensor '{}'", what, clip_text(name));
  // Only after every check: a failed load leaves the store untouched.
  for (std::size_t h = 0; h < store.entries().size(); ++h) {
    const auto& e = store.entry(h);
    std::memcpy(store.data(h), tensors.at(e.name).f32(), sizeof(float) * static_cast<std::size_t>(e.numel));
  }
}

void load_state_dict_file(ParamStore& store, const std::string& path, bool allow_extra) {
  load_state_dict(store, SafetensorsFile::read(path).all_tensors(), path, allow_extra);
}

}  // namespace multihead
