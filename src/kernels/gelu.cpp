// SPDX-License-Identifier: Apache-2.0
// GELU and its gradient in float vectors, both forms (exact erf and tanh),
// once for each Highway target. The erf is Abramowitz and Stegun's 7.1.26
// (absolute error below 1.5e-7), as PyTorch's vectorised CPU GELU computes
// it; the scalar twin in activations.cpp (std::erf, in double for the
// gradient checks) is the reference the tests hold this to.
#include "gelu.h"

#include <algorithm>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gelu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace multihead::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// 0.5 (1 + erf(x / sqrt 2)), the normal CDF, and e = exp(-x^2 / 2), which the gradient reuses.
VF normal_cdf(DF d, VF x, VF& e) {
  const VF z = hn::Mul(hn::Abs(x), hn::Set(d, 0.70710678118654752f));
  const VF t = hn::Div(hn::Set(d, 1.0f), hn::MulAdd(hn::Set(d, 0.3275911f), z, hn::Set(d, 1.0f)));
  VF poly = hn::Set(d, 1.061405429f);
  poly = hn::MulAdd(poly, t, hn::Set(d, -1.453152027f));
  poly = hn::MulAdd(poly, t, hn::Set(d, 1.421413741f));
  poly = hn::MulAdd(poly, t, hn::Set(d, -0.284496736f));
  poly = hn::MulAdd(poly, t, hn::Set(d, 0.254829592f));
  poly = hn::Mul(poly, t);
  e = hn::CallExp(d, hn::Neg(hn::Mul(z, z)));
  const VF erf_abs = hn::NegMulAdd(poly, e, hn::Set(d, 1.0f));  // 1 - poly e
  const VF erf = hn::CopySign(erf_abs, x);
  return hn::Mul(hn::Set(d, 0.5f), hn::Add(hn::Set(d, 1.0f), erf));
}

// tanh(sqrt(2/pi) (x + 0.044715 x^3)), and its argument's derivative in du.
VF tanh_form(DF d, VF x, VF& du) {
  const VF x2 = hn::Mul(x, x);
  const VF k = hn::Set(d, 0.7978845608028654f), c = hn::Set(d, 0.044715f);
  const VF u = hn::Mul(k, hn::MulAdd(hn::Mul(c, x2), x, x));
  du = hn::Mul(k, hn::MulAdd(hn::Mul(hn::Set(d, 3.0f), c), x2, hn::Set(d, 1.0f)));
  return hn::CallTanh(d, u);
}

VF forward_vec(DF d, VF x, bool tanh_approx) {
  if (tanh_approx) {
    VF du;
    const VF t = tanh_form(d, x, du);
    return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.0f), t));
  }
  VF e;
  return hn::Mul(x, normal_cdf(d, x, e));
}

// gelu'(x) dy: Phi(x) + x phi(x); the tanh form's 0.5 (1 + t) + 0.5 x (1 - t^2) u'.
VF backward_vec(DF d, VF dy, VF x, bool tanh_approx) {
  if (tanh_approx) {
    VF du;
    const VF t = tanh_form(d, x, du);
    const VF half = hn::Set(d, 0.5f);
    const VF one_minus_t2 = hn::NegMulAdd(t, t, hn::Set(d, 1.0f));
    const VF g = hn::MulAdd(hn::Mul(hn::Mul(half, x), one_minus_t2), du, hn::Mul(half, hn::Add(hn::Set(d, 1.0f), t)));
    return hn::Mul(dy, g);
  }
  VF e;
  const VF cdf = normal_cdf(d, x, e);
  const VF pdf = hn::Mul(e, hn::Set(d, 0.3989422804014327f));  // exp(-x^2 / 2) / sqrt(2 pi)
  return hn::Mul(dy, hn::MulAdd(x, pdf, cdf));
}

}  // namespace

void gelu_forward_f32(float* y, const float* x, std::int64_t n, bool tanh_approx) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(forward_vec(d, hn::LoadU(d, x + i), tanh_approx), d, y + i);
  if (i == n) return;
  // The last elements through the same vector code, from and into a padded copy: an element's
  // result does not depend on where a row or a chunk ends.
  HWY_ALIGN float buf[hn::MaxLanes(DF())] = {};
  std::copy(x + i, x + n, buf);
  hn::Store(forward_vec(d, hn::Load(d, buf), tanh_approx), d, buf);
  std::copy(buf, buf + (n - i), y + i);
}

void gelu_backward_f32(float* dx, const float* dy, const float* x, std::int64_t n, bool tanh_approx) {
  const DF d;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(backward_vec(d, hn::LoadU(d, dy + i), hn::LoadU(d, x + i), tanh_approx), d, dx + i);
  if (i == n) return;
  HWY_ALIGN float bx[hn::MaxLanes(DF())] = {};
  HWY_ALIGN float bdy[hn::MaxLanes(DF())] = {};
  std::copy(x + i, x + n, bx);
  std::copy(dy + i, dy + n, bdy);
  hn::Store(backward_vec(d, hn::Load(d, bdy), hn::Load(d, bx), tanh_approx), d, bx);
  std::copy(bx, bx + (n - i), dx + i);
}

}  // namespace multihead::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace multihead {

HWY_EXPORT(gelu_forward_f32);
HWY_EXPORT(gelu_backward_f32);

void gelu_forward(float* y, const float* x, std::int64_t n, bool tanh_approx) {
  MULTIHEAD_DISPATCH(gelu_forward_f32)(y, x, n, tanh_approx);
}

void gelu_backward(float* dx, const float* dy, const float* x, std::int64_t n, bool tanh_approx) {
  MULTIHEAD_DISPATCH(gelu_backward_f32)(dx, dy, x, n, tanh_approx);
}

}  // namespace multihead
#endif  // HWY_ONCE
