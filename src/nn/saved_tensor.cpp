// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/saved_tensor.h"

#include "multihead/kernels/half.h"

namespace multihead {

void SavedTensor::save(const Tensor& x, DType storage) {
  clear();
  if (storage == DType::kF32 && x.dtype() == DType::kF32) ref_ = &x;
  else own_ = narrow_tensor(x, storage);
}

void SavedTensor::keep(Tensor stored) {
  clear();
  own_ = std::move(stored);
}

void SavedTensor::clear() {
  ref_ = nullptr;
  own_ = Tensor();
}

const Tensor& SavedTensor::f32(Tensor& scratch) const {
  const Tensor& s = stored();
  if (s.dtype() == DType::kF32) return s;
  scratch = widen_tensor(s);
  return scratch;
}

const Tensor& SavedTensor::stored() const {
  check(defined(), "a saved tensor was read before forward saved it");
  return ref_ ? *ref_ : own_;
}

}  // namespace multihead
