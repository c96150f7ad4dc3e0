// SPDX-License-Identifier: Apache-2.0
// The small modules layers are made of: Linear, LayerNorm, Dropout, Embedding.
// Each names its parameters as the PyTorch module of the same name does.
#pragma once

#include <cstdint>
#include <string>

#include "multihead/core/tensor.h"
#include "multihead/kernels/dropout.h"
#include "multihead/nn/module.h"
#include "multihead/nn/saved_tensor.h"

namespace multihead {

// y (N, out) = x W^T + b for a parameter W of the store from row `row0` on
// ((out, in) rows of a matrix parameter whose rows are `in` long), x stored
// as X: float, or BF16 / F16 (linear_forward_stored, with the store's bf16
// copy of W where it has one). fp32 x multiplies the store's int8 copy of W
// where it has one (a store frozen for int8 inference), else W itself. The
// one place a layer's product with its weights picks its kernel.
template <typename X>
void linear_forward_param(float* y, std::int64_t ldy, const X* x, std::int64_t ldx, const ParamStore& store,
                          ParamStore::Handle w, std::int64_t row0, const float* b, std::int64_t N, std::int64_t in,
                          std::int64_t out);

// torch.nn.Linear: y = x W^T + b over the last dimension. "weight" (out, in), "bias" (out).
class Linear : public Module {
 public:
  Linear(ParamStore& store, const std::string& prefix, std::int64_t in, std::int64_t out, bool bias = true);
  // nn.Linear's default: weight and bias uniform in +-1/sqrt(in).
  void init(Rng& rng) override;
  void release_saved() override { x_.clear(); }
  // (..., in) -> (..., out). In fp32 x must outlive backward; in bf16 / fp16
  // a 16-bit copy is kept instead.
  Tensor forward(const Tensor& x, Precision p = Precision::kF32);
  Tensor backward(const Tensor& dy);  // (..., out) -> (..., in)
  ParamStore::Handle weight() const { return w_; }
  std::int64_t in() const { return in_; }
  std::int64_t out() const { return out_; }
  const float* bias_data() const { return bias_ ? store_->data(b_) : nullptr; }
  float* bias_grad() const { return bias_ ? store_->grad(b_) : nullptr; }

 private:
  ParamStore* store_;
  std::int64_t in_, out_;
  ParamStore::Handle w_, b_;
  bool bias_;
  SavedTensor x_;
};

// torch.nn.LayerNorm over the last dimension. "weight" (d) = 1, "bias" (d) = 0.
class LayerNorm : public Module {
 public:
  LayerNorm(ParamStore& store, const std::string& prefix, std::int64_t d, double eps = 1e-5);
  void init(Rng& rng) override;
  void release_saved() override;
  Tensor forward(const Tensor& x, Precision p = Precision::kF32);  // as Linear::forward
  Tensor backward(const Tensor& dy);

  // The step after a sublayer in one pass: y = LayerNorm(x + dropout(s)),
  // the dropout drawn from `drop` over s as a whole (Dropout::begin). s
  // becomes the sum h = x + dropout(s) when keep_sum or in fp32, where
  // backward reads it (the caller then keeps s alive until backward, as
  // forward's x); otherwise s is left as it was.
  Tensor forward_residual(Tensor& s, const Tensor& x, const DropoutSpec& drop, Precision p, bool keep_sum);
  // Its backward: h, the gradient of the sum, LayerNorm'(dy + dy_extra) +
  // dh_extra (the extras may be null, see residual_layer_norm_backward); s,
  // the gradient of the sublayer's output, dropout(h) with the same mask, or
  // h itself when nothing was dropped.
  struct ResidualGrads {
    Tensor h, dropped;  // dropped: undefined when nothing was dropped
    const Tensor& s() const { return dropped.defined() ? dropped : h; }
  };
  ResidualGrads backward_residual(const Tensor& dy, const Tensor* dy_extra, const Tensor* dh_extra,
                                  const DropoutSpec& drop);
  // The gradient of the norm's input for dy (..., d), LayerNorm'(dy), with
  // no parameter gradients and what forward saved kept: for gradients that
  // are not the loss's (the gradient probe's, nn/gradient_probe.h). fp32 only.
  Tensor input_gradient(const Tensor& dy) const;

 private:
  ParamStore* store_;
  std::int64_t d_;
  float eps_;
  ParamStore::Handle w_, b_;
  SavedTensor x_;
  Tensor mean_, rstd_;  // (N)
};

// torch.nn.Dropout, in place, with masks from the counter-based generator.
class Dropout {
 public:
  Dropout(ParamStore& store, double p);
  void forward_inplace(Tensor& x, const ForwardContext& ctx);
  // Starts a forward whose caller applies the mask itself (by parts, with
  // dropout_inplace's element offsets); backward_inplace then undoes it whole.
  const DropoutSpec& begin(const ForwardContext& ctx);
  const DropoutSpec& spec() const { return last_; }
  void backward_inplace(Tensor& dy) const;  // same mask as the last forward
  // The gradient through the last forward: g itself when nothing was dropped,
  // else a masked copy made in scratch.
  const Tensor& backward(const Tensor& g, Tensor& scratch) const;
  bool active() const { return last_.active(); }
  double p() const { return p_; }

 private:
  double p_;
  std::uint32_t site_;
  DropoutSpec last_;
};

// a += b, element-wise; shapes must match.
void add_inplace(Tensor& a, const Tensor& b);

// torch.nn.Embedding: rows of "weight" (num, dim), initialised N(0, 1).
class Embedding : public Module {
 public:
  Embedding(ParamStore& store, const std::string& prefix, std::int64_t num, std::int64_t dim);
  void init(Rng& rng) override;
  void release_saved() override { ids_ = nullptr; }
  // ids: I64 of any shape, each in [0, num); returns (..., dim). ids must outlive backward.
  Tensor forward(const Tensor& ids);
  void backward(const Tensor& dy);  // adds into the weight gradient
  ParamStore::Handle weight() const { return w_; }
  std::int64_t num() const { return num_; }

 private:
  ParamStore* store_;
  std::int64_t num_, dim_;
  ParamStore::Handle w_;
  const Tensor* ids_ = nullptr;
};

}  // namespace multihead
