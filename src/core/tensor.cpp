// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/tensor.h"

#include <cstring>
#include <limits>

#include "multihead/core/allocator.h"
#include "multihead/core/context.h"

namespace multihead {

std::string_view dtype_name(DType dt) noexcept {
  switch (dt) {
    case DType::kF32: return "F32";
    case DType::kBool: return "BOOL";
    case DType::kI64: return "I64";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "?";
}

std::size_t dtype_size(DType dt) noexcept {
  switch (dt) {
    case DType::kF32: return 4;
    case DType::kBool: return 1;
    case DType::kI64: return 8;
    case DType::kBF16:
    case DType::kF16: return 2;
  }
  return 0;
}

std::string shape_str(const Shape& shape) {
  // A message names a shape of any length in one short line: the first and
  // last dimensions of a long one, and how many there are.
  constexpr std::size_t kShown = 8;
  const bool cut = shape.size() > kShown;
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (cut && i >= kShown / 2 && i < shape.size() - kShown / 2) {
      if (i == kShown / 2) s += ", ...";
      continue;
    }
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")" + (cut ? fmt::format(" [{} dimensions]", shape.size()) : "");
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    check<ShapeError>(d >= 0, "negative dimension in shape {}", shape_text(shape));
    check<ShapeError>(d == 0 || n <= std::numeric_limits<std::int64_t>::max() / d, "shape {} is too large",
                      shape_text(shape));
    n *= d;
  }
  return n;
}

Tensor::Tensor(Shape shape, DType dtype, Uninit)
    : shape_(std::move(shape)), numel_(shape_numel(shape_)), dtype_(dtype) {
  check<MemoryError>(static_cast<std::uint64_t>(numel_) <= kMaxAllocationBytes / dtype_size(dtype_),
                     "a tensor of shape {} would need more than {} bytes", shape_text(shape_), kMaxAllocationBytes);
  data_ = tracked_alloc(nbytes());
}

Tensor::Tensor(Shape shape, DType dtype) : Tensor(std::move(shape), dtype, Uninit{}) {
  if (nbytes()) std::memset(data_, 0, nbytes());
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  Tensor t(std::move(shape), dtype, Uninit{});
  if (context().poison_uninitialized && t.nbytes()) std::memset(t.data_, 0xFF, t.nbytes());
  return t;
}

Tensor::Tensor(Tensor&& o) noexcept : shape_(std::move(o.shape_)), numel_(o.numel_), dtype_(o.dtype_), data_(o.data_) {
  o.shape_.clear();
  o.numel_ = 0;
  o.data_ = nullptr;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    release();
    shape_ = std::move(o.shape_);
    numel_ = o.numel_;
    dtype_ = o.dtype_;
    data_ = o.data_;
    o.shape_.clear();
    o.numel_ = 0;
    o.data_ = nullptr;
  }
  return *this;
}

Tensor::~Tensor() { release(); }

void Tensor::release() noexcept {
  tracked_free(data_, nbytes());
  data_ = nullptr;
}

Tensor Tensor::from(Shape shape, std::span<const float> values) {
  Tensor t(std::move(shape), DType::kF32);
  check<ShapeError>(static_cast<std::int64_t>(values.size()) == t.numel(), "{} values given for shape {}",
                    values.size(), shape_text(t.shape()));
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size_bytes());
  return t;
}

Tensor Tensor::from_bool(Shape shape, std::span<const std::uint8_t> values) {
  Tensor t(std::move(shape), DType::kBool);
  check<ShapeError>(static_cast<std::int64_t>(values.size()) == t.numel(), "{} values given for shape {}",
                    values.size(), shape_text(t.shape()));
  auto* d = t.data<std::uint8_t>();
  for (std::size_t i = 0; i < values.size(); ++i) d[i] = values[i] ? 1 : 0;
  return t;
}

Tensor Tensor::from_i64(Shape shape, std::span<const std::int64_t> values) {
  Tensor t(std::move(shape), DType::kI64);
  check<ShapeError>(static_cast<std::int64_t>(values.size()) == t.numel(), "{} values given for shape {}",
                    values.size(), shape_text(t.shape()));
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size_bytes());
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

std::int64_t Tensor::dim(int i) const {
  int n = ndim();
  int j = i < 0 ? i + n : i;
  check<ShapeError>(j >= 0 && j < n, "dimension {} out of range for shape {}", i, shape_text(shape_));
  return shape_[static_cast<std::size_t>(j)];
}

void Tensor::reshape(Shape shape) {
  check<ShapeError>(shape_numel(shape) == numel_, "cannot reshape {} to {}", shape_text(shape_), shape_text(shape));
  shape_ = std::move(shape);
}

void Tensor::fill(float value) {
  float* d = f32();
  for (std::int64_t i = 0; i < numel_; ++i) d[i] = value;
}

void Tensor::zero() {
  if (nbytes()) std::memset(data_, 0, nbytes());
}

void Tensor::check_dtype(DType want) const {
  check(want == dtype_, "tensor has dtype {}, expected {}", dtype_name(dtype_), dtype_name(want));
}

void expect_shape(const Tensor& t, const Shape& want, std::string_view what) {
  check<ShapeError>(t.shape() == want, "{} has shape {}, expected {}", what, shape_text(t.shape()), shape_text(want));
}

Tensor gather_rows(const Tensor& t, std::span<const std::int64_t> rows) {
  check<ShapeError>(t.ndim() >= 1, "cannot take rows of a scalar");
  Shape shape = t.shape();
  const std::int64_t B = shape[0];
  shape[0] = static_cast<std::int64_t>(rows.size());
  Tensor out = Tensor::empty(shape, t.dtype());
  const std::size_t row_bytes = B > 0 ? t.nbytes() / static_cast<std::size_t>(B) : 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    check<ShapeError>(rows[i] >= 0 && rows[i] < B, "row {} is outside the {} rows", rows[i], B);
    std::memcpy(static_cast<char*>(out.raw()) + i * row_bytes,
                static_cast<const char*>(t.raw()) + static_cast<std::size_t>(rows[i]) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace multihead
