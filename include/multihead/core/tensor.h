// SPDX-License-Identifier: Apache-2.0
// Contiguous row-major tensors. A Tensor owns its buffer (allocated through
// the counting allocator) and is move-only: copies are explicit (clone), so
// a hidden O(n) copy never slips into a hot path.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "multihead/core/error.h"

namespace multihead {

// kBF16 and kF16 are storage types: 16-bit floats that kernels widen to fp32
// to compute (kernels/half.h converts).
enum class DType : std::uint8_t { kF32, kBool, kI64, kBF16, kF16 };

// The 16-bit float element types, as raw bit patterns.
struct BF16 {
  std::uint16_t bits;
};
struct F16 {
  std::uint16_t bits;
};

std::string_view dtype_name(DType dt) noexcept;
std::size_t dtype_size(DType dt) noexcept;

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::kBool;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType dtype_of<BF16>() {
  return DType::kBF16;
}
template <>
constexpr DType dtype_of<F16>() {
  return DType::kF16;
}

using Shape = std::vector<std::int64_t>;

std::string shape_str(const Shape& shape);  // "(2, 3, 4)"; past 8 dimensions "(1, 2, 3, 4, ..., 9) [N dimensions]"
// A shape as a check's message names it, formatted only when the check fails:
// check(ok, "... {}", shape_text(x.shape())) costs no string on every call.
struct ShapeText {
  const Shape& shape;
};
inline ShapeText shape_text(const Shape& shape) { return {shape}; }
// Number of elements; throws ShapeError on a negative dimension or overflow.
std::int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Zero-initialised tensor.
  explicit Tensor(Shape shape, DType dtype = DType::kF32);
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  static Tensor zeros(Shape shape, DType dtype = DType::kF32) { return Tensor(std::move(shape), dtype); }
  // Uninitialised, for buffers a kernel overwrites entirely (skips a memset
  // pass). Where the thread's context poisons them, the bytes are 0xFF (NaN
  // for F32), so a kernel that reads what it never wrote fails loudly in tests.
  static Tensor empty(Shape shape, DType dtype = DType::kF32);
  static Tensor from(Shape shape, std::span<const float> values);
  static Tensor from_bool(Shape shape, std::span<const std::uint8_t> values);
  static Tensor from_i64(Shape shape, std::span<const std::int64_t> values);

  Tensor clone() const;

  bool defined() const noexcept { return !shape_.empty() || data_ != nullptr; }
  const Shape& shape() const noexcept { return shape_; }
  int ndim() const noexcept { return static_cast<int>(shape_.size()); }
  // Size of dimension i; negative i counts from the end, as in PyTorch.
  std::int64_t dim(int i) const;
  std::int64_t numel() const noexcept { return numel_; }
  DType dtype() const noexcept { return dtype_; }
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }

  // Typed access; throws Error if T does not match the dtype.
  template <typename T>
  T* data() {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<const T*>(data_);
  }
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }
  std::span<float> span_f32() { return {f32(), static_cast<std::size_t>(numel_)}; }
  std::span<const float> span_f32() const { return {f32(), static_cast<std::size_t>(numel_)}; }
  void* raw() noexcept { return data_; }
  const void* raw() const noexcept { return data_; }

  // Same buffer, new shape with the same number of elements.
  void reshape(Shape shape);
  void fill(float value);
  void zero();

 private:
  struct Uninit {};
  Tensor(Shape shape, DType dtype, Uninit);
  void check_dtype(DType want) const;
  void release() noexcept;

  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  void* data_ = nullptr;
};

// Throws ShapeError naming `what` unless t has exactly `want` as its shape.
void expect_shape(const Tensor& t, const Shape& want, std::string_view what);

// Rows rows[0], rows[1], ... of t along its first dimension, any dtype:
// (n, ...) from (B, ...). A row outside [0, B) is a ShapeError.
Tensor gather_rows(const Tensor& t, std::span<const std::int64_t> rows);

}  // namespace multihead

template <>
struct fmt::formatter<multihead::ShapeText> : fmt::formatter<std::string_view> {
  auto format(const multihead::ShapeText& t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(multihead::shape_str(t.shape), ctx);
  }
};
