// SPDX-License-Identifier: Apache-2.0
// A tensor a module keeps from forward for backward, in the activation
// precision. In fp32 it is the caller's own tensor, held by pointer (the
// caller keeps it alive until backward, as every module's contract says); in
// bf16 or fp16 it is an owned 16-bit copy, so the caller may free its fp32
// tensor as soon as forward returns.
#pragma once

#include "multihead/core/precision.h"
#include "multihead/core/tensor.h"

namespace multihead {

class SavedTensor {
 public:
  void save(const Tensor& x, DType storage);
  // Keeps a copy a kernel already wrote in the storage type.
  void keep(Tensor stored);
  void clear();
  bool defined() const { return ref_ != nullptr || own_.defined(); }
  // The values as F32: the tensor itself, or a conversion made into scratch.
  const Tensor& f32(Tensor& scratch) const;
  // What is stored (F32, BF16 or F16).
  const Tensor& stored() const;

 private:
  const Tensor* ref_ = nullptr;
  Tensor own_;
};

}  // namespace multihead
