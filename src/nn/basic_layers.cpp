// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/basic_layers.h"

#include <cmath>
#include <cstring>

#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/gemm_int8.h"
#include "multihead/kernels/layer_norm.h"
#include "multihead/kernels/linear.h"
#include "multihead/nn/init.h"

namespace multihead {
namespace {

// Rows of x viewed as (N, last): N = numel / last.
std::int64_t rows_of(const Tensor& x, std::int64_t last, const char* what) {
  check<ShapeError>(x.ndim() >= 1 && x.dim(-1) == last, "{} input has shape {}, expected (..., {})", what,
                    shape_text(x.shape()), last);
  return x.numel() / last;
}

Shape with_last(const Shape& s, std::int64_t last) {
  Shape out = s;
  out.back() = last;
  return out;
}

}  // namespace

template <typename X>
void linear_forward_param(float* y, std::int64_t ldy, const X* x, std::int64_t ldx, const ParamStore& store,
                          ParamStore::Handle w, std::int64_t row0, const float* b, std::int64_t N, std::int64_t in,
                          std::int64_t out) {
  const float* W = store.data(w) + row0 * in;
  if constexpr (std::is_same_v<X, float>) {
    if (const Int8Weight* q = store.int8(w)) linear_forward_int8(y, ldy, x, ldx, q->rows_from(row0, in), b, N, in, out);
    else linear_forward(y, ldy, x, ldx, W, b, N, in, out);
  } else {
    const BF16* W16 = store.bf16(w);
    linear_forward_stored<X>(y, ldy, x, ldx, W, b, N, in, out, W16 != nullptr ? W16 + row0 * in : nullptr);
  }
}
template void linear_forward_param<float>(float*, std::int64_t, const float*, std::int64_t, const ParamStore&,
                                          ParamStore::Handle, std::int64_t, const float*, std::int64_t, std::int64_t,
                                          std::int64_t);
template void linear_forward_param<BF16>(float*, std::int64_t, const BF16*, std::int64_t, const ParamStore&,
                                         ParamStore::Handle, std::int64_t, const float*, std::int64_t, std::int64_t,
                                         std::int64_t);
template void linear_forward_param<F16>(float*, std::int64_t, const F16*, std::int64_t, const ParamStore&,
                                        ParamStore::Handle, std::int64_t, const float*, std::int64_t, std::int64_t,
                                        std::int64_t);

Linear::Linear(ParamStore& store, const std::string& prefix, std::int64_t in, std::int64_t out, bool bias)
    : store_(&store), in_(in), out_(out), bias_(bias) {
  check<ConfigError>(in > 0 && out > 0, "Linear sizes must be positive, got {} -> {}", in, out);
  w_ = store.add(prefix + "weight", {out, in});
  b_ = bias ? store.add(prefix + "bias", {out}) : w_;
}

void Linear::init(Rng& rng) {
  linear_default_uniform(store_->data_span(w_), in_, rng);
  if (bias_) linear_default_uniform(store_->data_span(b_), in_, rng);
}

Tensor Linear::forward(const Tensor& x, Precision p) {
  const std::int64_t N = rows_of(x, in_, "Linear");
  Tensor y = Tensor::empty(with_last(x.shape(), out_));
  const DType st = storage_dtype(p);
  x_.save(x, st);
  const float* b = bias_ ? store_->data(b_) : nullptr;
  // In bf16 the product reads the rounded copy kept for backward.
  if (computes_in_bf16(st))
    linear_forward_param<BF16>(y.f32(), out_, x_.stored().data<BF16>(), in_, *store_, w_, 0, b, N, in_, out_);
  else linear_forward_param<float>(y.f32(), out_, x.f32(), in_, *store_, w_, 0, b, N, in_, out_);
  return y;
}

Tensor Linear::backward(const Tensor& dy) {
  check(x_.defined(), "Linear::backward called without a preceding forward");
  const std::int64_t N = rows_of(dy, out_, "Linear gradient");
  Tensor dx = Tensor::empty(with_last(dy.shape(), in_));
  const Tensor& x = x_.stored();
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    linear_backward_stored<T>(dx.f32(), in_, false, store_->grad(w_), bias_ ? store_->grad(b_) : nullptr, dy.f32(),
                              out_, x.template data<T>(), in_, store_->data(w_), N, in_, out_);
  });
  release_saved();  // backward consumes what forward saved
  return dx;
}

LayerNorm::LayerNorm(ParamStore& store, const std::string& prefix, std::int64_t d, double eps)
    : store_(&store), d_(d), eps_(static_cast<float>(eps)) {
  check<ConfigError>(d > 0, "LayerNorm size must be positive, got {}", d);
  check<ConfigError>(eps > 0, "layer_norm_eps must be positive, got {}", eps);
  w_ = store.add(prefix + "weight", {d});
  b_ = store.add(prefix + "bias", {d});
}

void LayerNorm::init(Rng&) {
  std::ranges::fill(store_->data_span(w_), 1.0f);
  std::ranges::fill(store_->data_span(b_), 0.0f);
}

void LayerNorm::release_saved() {
  x_.clear();
  mean_ = Tensor();
  rstd_ = Tensor();
}

Tensor LayerNorm::forward(const Tensor& x, Precision p) {
  const std::int64_t N = rows_of(x, d_, "LayerNorm");
  Tensor y = Tensor::empty(x.shape());
  mean_ = Tensor::empty({N});
  rstd_ = Tensor::empty({N});
  layer_norm_forward(y.f32(), mean_.f32(), rstd_.f32(), x.f32(), store_->data(w_), store_->data(b_), N, d_, eps_);
  x_.save(x, storage_dtype(p));
  return y;
}

Tensor LayerNorm::backward(const Tensor& dy) {
  check(x_.defined(), "LayerNorm::backward called without a preceding forward");
  const std::int64_t N = rows_of(dy, d_, "LayerNorm gradient");
  Tensor dx = Tensor::empty(dy.shape());
  Tensor scratch;
  layer_norm_backward(dx.f32(), store_->grad(w_), store_->grad(b_), dy.f32(), x_.f32(scratch).f32(), mean_.f32(),
                      rstd_.f32(), store_->data(w_), N, d_);
  release_saved();  // backward consumes what forward saved
  return dx;
}

Tensor LayerNorm::input_gradient(const Tensor& dy) const {
  check(x_.defined(), "LayerNorm::input_gradient called without a preceding forward");
  const std::int64_t N = rows_of(dy, d_, "LayerNorm gradient");
  Tensor dx = Tensor::empty(dy.shape());
  Tensor scratch;
  layer_norm_backward<float>(dx.f32(), nullptr, nullptr, dy.f32(), x_.f32(scratch).f32(), mean_.f32(), rstd_.f32(),
                             store_->data(w_), N, d_);
  return dx;
}

Tensor LayerNorm::forward_residual(Tensor& s, const Tensor& x, const DropoutSpec& drop, Precision p, bool keep_sum) {
  const std::int64_t N = rows_of(s, d_, "LayerNorm");
  expect_shape(x, s.shape(), "residual");
  Tensor y = Tensor::empty(s.shape());
  mean_ = Tensor::empty({N});
  rstd_ = Tensor::empty({N});
  const DType st = storage_dtype(p);
  const bool write_sum = keep_sum || st == DType::kF32;
  Tensor saved = st == DType::kF32 ? Tensor() : Tensor::empty(s.shape(), st);
  visit_float_storage(st, [&](auto tag) {
    using T = decltype(tag);
    T* copy = saved.defined() ? saved.template data<T>() : nullptr;
    residual_layer_norm_forward<T>(y.f32(), mean_.f32(), rstd_.f32(), s.f32(), copy, x.f32(), store_->data(w_),
                                   store_->data(b_), N, d_, eps_, drop, write_sum);
  });
  if (saved.defined()) x_.keep(std::move(saved));
  else x_.save(s, DType::kF32);
  return y;
}

LayerNorm::ResidualGrads LayerNorm::backward_residual(const Tensor& dy, const Tensor* dy_extra, const Tensor* dh_extra,
                                                      const DropoutSpec& drop) {
  check(x_.defined(), "LayerNorm::backward_residual called without a preceding forward");
  const std::int64_t N = rows_of(dy, d_, "LayerNorm gradient");
  for (const Tensor* e : {dy_extra, dh_extra})
    if (e) expect_shape(*e, dy.shape(), "LayerNorm gradient");
  ResidualGrads g{Tensor::empty(dy.shape()), drop.active() ? Tensor::empty(dy.shape()) : Tensor()};
  const Tensor& h = x_.stored();
  visit_float_storage(h.dtype(), [&](auto tag) {
    using T = decltype(tag);
    residual_layer_norm_backward<T>(g.h.f32(), g.dropped.defined() ? g.dropped.f32() : nullptr, store_->grad(w_),
                                    store_->grad(b_), dy.f32(), dy_extra ? dy_extra->f32() : nullptr,
                                    dh_extra ? dh_extra->f32() : nullptr, h.template data<T>(), mean_.f32(),
                                    rstd_.f32(), store_->data(w_), N, d_, drop);
  });
  release_saved();  // backward consumes what forward saved
  return g;
}

Dropout::Dropout(ParamStore& store, double p) : p_(p), site_(store.new_random_site()) {
  check<ConfigError>(p >= 0.0 && p <= 1.0, "dropout must be in [0, 1], got {}", p);
}

void Dropout::forward_inplace(Tensor& x, const ForwardContext& ctx) {
  if (begin(ctx).active()) dropout_inplace(x.f32(), x.numel(), 0, last_);
}

const DropoutSpec& Dropout::begin(const ForwardContext& ctx) {
  last_ = DropoutSpec{ctx.training ? static_cast<float>(p_) : 0.0f, ctx.seed, ctx.stream(site_)};
  return last_;
}

void Dropout::backward_inplace(Tensor& dy) const {
  if (last_.active()) dropout_inplace(dy.f32(), dy.numel(), 0, last_);
}

const Tensor& Dropout::backward(const Tensor& g, Tensor& scratch) const {
  if (!last_.active()) return g;
  scratch = g.clone();
  backward_inplace(scratch);
  return scratch;
}

void add_inplace(Tensor& a, const Tensor& b) {
  check<ShapeError>(a.shape() == b.shape(), "cannot add {} to {}", shape_text(b.shape()), shape_text(a.shape()));
  float* pa = a.f32();
  const float* pb = b.f32();
  const std::int64_t n = a.numel();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (std::int64_t i = 0; i < n; ++i) pa[i] += pb[i];
}

Embedding::Embedding(ParamStore& store, const std::string& prefix, std::int64_t num, std::int64_t dim)
    : store_(&store), num_(num), dim_(dim) {
  check<ConfigError>(num > 0 && dim > 0, "Embedding sizes must be positive, got {} x {}", num, dim);
  w_ = store.add(prefix + "weight", {num, dim});
}

void Embedding::init(Rng& rng) {
  for (float& v : store_->data_span(w_)) v = rng.normal();
}

Tensor Embedding::forward(const Tensor& ids) {
  const std::int64_t* id = ids.data<std::int64_t>();
  Shape s = ids.shape();
  s.push_back(dim_);
  Tensor y = Tensor::empty(s);
  const float* w = store_->data(w_);
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    check<ShapeError>(id[i] >= 0 && id[i] < num_, "token id {} at position {} is outside the vocabulary [0, {})", id[i],
                      i, num_);
    std::memcpy(y.f32() + i * dim_, w + id[i] * dim_, sizeof(float) * static_cast<std::size_t>(dim_));
  }
  ids_ = &ids;
  return y;
}

void Embedding::backward(const Tensor& dy) {
  check(ids_ != nullptr, "Embedding::backward called without a preceding forward");
  expect_shape(
      dy,
      [&] {
        Shape s = ids_->shape();
        s.push_back(dim_);
        return s;
      }(),
      "Embedding gradient");
  const std::int64_t* id = ids_->data<std::int64_t>();
  float* g = store_->grad(w_);
  // Sequential: repeated ids accumulate in a fixed order, so the result does
  // not depend on the thread count.
  for (std::int64_t i = 0; i < ids_->numel(); ++i) {
    const float* src = dy.f32() + i * dim_;
    float* dst = g + id[i] * dim_;
    for (std::int64_t e = 0; e < dim_; ++e) dst[e] += src[e];
  }
}

}  // namespace multihead
