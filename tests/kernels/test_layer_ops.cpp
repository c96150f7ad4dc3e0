// SPDX-License-Identifier: Apache-2.0
// LayerNorm, activations and dropout: definitions and finite-difference gradients in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "multihead/core/threading.h"
#include "multihead/kernels/activations.h"
#include "multihead/kernels/dropout.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/layer_norm.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close_v;
using test::kFdAtol;
using test::kFdRtol;
using test::numeric_grad;
using test::random_vector;

double weighted_sum(const std::vector<double>& y, const std::vector<double>& g) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * g[i];
  return s;
}

TEST(LayerNorm, NormalisesRows) {
  Rng rng(1);
  const std::int64_t N = 3, d = 7;
  auto x = random_vector(N * d, rng, 3.0);
  for (double& v : x) v += 100.0;  // a large mean must not cost accuracy
  std::vector<double> y(N * d), mean(N), rstd(N);
  layer_norm_forward<double>(y.data(), mean.data(), rstd.data(), x.data(), nullptr, nullptr, N, d, 1e-5);
  for (std::int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (std::int64_t i = 0; i < d; ++i) m += y[n * d + i];
    for (std::int64_t i = 0; i < d; ++i) v += y[n * d + i] * y[n * d + i];
    EXPECT_NEAR(m / d, 0.0, 1e-12);
    EXPECT_NEAR(v / d, 1.0, 1e-5);  // var / (var + eps)
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  Rng rng(2);
  const std::int64_t N = 4, d = 6;
  auto x = random_vector(N * d, rng), gamma = random_vector(d, rng), beta = random_vector(d, rng);
  auto G = random_vector(N * d, rng);
  auto loss = [&] {
    std::vector<double> y(N * d), mean(N), rstd(N);
    layer_norm_forward<double>(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), N, d, 1e-5);
    return weighted_sum(y, G);
  };
  std::vector<double> y(N * d), mean(N), rstd(N), dx(N * d), dgamma(d, 0.0), dbeta(d, 0.0);
  layer_norm_forward<double>(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), N, d, 1e-5);
  layer_norm_backward<double>(dx.data(), dgamma.data(), dbeta.data(), G.data(), x.data(), mean.data(), rstd.data(),
                              gamma.data(), N, d);
  EXPECT_TRUE(all_close_v(dx, numeric_grad(loss, x), kFdAtol, kFdRtol));
  EXPECT_TRUE(all_close_v(dgamma, numeric_grad(loss, gamma), kFdAtol, kFdRtol));
  EXPECT_TRUE(all_close_v(dbeta, numeric_grad(loss, beta), kFdAtol, kFdRtol));
}

// dgamma and dbeta go through the columns a cache line at a time, at full
// blocks of 16 columns and remainders: each equals its column's sum over the
// rows (computed here in double) to float rounding.
TEST(LayerNorm, ParameterGradientsSumEveryColumnOverTheRows) {
  Rng rng(4);
  for (std::int64_t d : {6, 16, 37}) {
    const std::int64_t N = 300;
    std::vector<float> x(N * d), dy(N * d), mean(N), rstd(N), y(N * d), dx(N * d);
    for (float& v : x) v = rng.normal();
    for (float& v : dy) v = rng.normal();
    layer_norm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), nullptr, nullptr, N, d, 1e-5f);
    std::vector<float> dgamma(d, 0.5f), dbeta(d, -0.5f);
    layer_norm_backward<float>(dx.data(), dgamma.data(), dbeta.data(), dy.data(), x.data(), mean.data(), rstd.data(),
                               nullptr, N, d);
    for (std::int64_t i = 0; i < d; ++i) {
      double sg = 0.5, sb = -0.5;
      for (std::int64_t n = 0; n < N; ++n)
        sg += double(dy[n * d + i]) * ((double(x[n * d + i]) - mean[n]) * rstd[n]), sb += dy[n * d + i];
      EXPECT_NEAR(dgamma[i], sg, 1e-4) << d << " " << i;
      EXPECT_NEAR(dbeta[i], sb, 1e-4) << d << " " << i;
    }
  }
}

// The fused feed-forward pass equals its three steps done one after another,
// bit for bit: with and without bias and dropout, small and threaded sizes.
TEST(BiasActivationDropout, EqualsTheSeparateSteps) {
  Rng rng(5);
  for (Activation a : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh})
    for (auto [n, F] : {std::pair<std::int64_t, std::int64_t>{5, 37}, {300, 301}})
      for (float p : {0.0f, 0.2f})
        for (bool with_bias : {false, true}) {
          std::vector<float> pre(n * F), bias(F), want_pre, want_hid(n * F), hid(n * F);
          for (float& v : pre) v = rng.normal();
          for (float& v : bias) v = rng.normal();
          const DropoutSpec drop{p, 3, 4};
          const std::uint64_t base = 11;
          want_pre = pre;
          if (with_bias)
            for (std::int64_t r = 0; r < n; ++r)
              for (std::int64_t j = 0; j < F; ++j) want_pre[r * F + j] += bias[j];
          activation_forward(a, want_hid.data(), want_pre.data(), n * F);
          if (drop.active()) dropout_inplace(want_hid.data(), n * F, base, drop);
          bias_activation_dropout(a, hid.data(), pre.data(), with_bias ? bias.data() : nullptr, n, F, drop, base);
          ASSERT_EQ(pre, want_pre) << n << "x" << F;
          ASSERT_EQ(hid, want_hid) << n << "x" << F << " p " << p;
        }
}

template <typename H>
std::vector<std::uint16_t> bits(const std::vector<H>& v) {
  std::vector<std::uint16_t> out(v.size());
  std::memcpy(out.data(), v.data(), sizeof(std::uint16_t) * v.size());
  return out;
}

// In 16-bit storage the same pass writes pre and hid rounded, and hid's
// stored values widened back where asked: equal to the fp32 pass, narrow and
// widen, bit for bit.
template <typename H>
void expect_stored_pass_equals_fp32_pass_rounded() {
  Rng rng(6);
  for (Activation a : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh})
    for (auto [n, F] : {std::pair<std::int64_t, std::int64_t>{5, 37}, {300, 301}})
      for (float p : {0.0f, 0.2f})
        for (bool rounded : {false, true}) {
          std::vector<float> pre(n * F), bias(F), want_hid(n * F);
          for (float& v : pre) v = rng.normal();
          for (float& v : bias) v = rng.normal();
          const DropoutSpec drop{p, 3, 4};
          std::vector<float> want_pre = pre;
          bias_activation_dropout(a, want_hid.data(), want_pre.data(), bias.data(), n, F, drop, 17);
          std::vector<H> want_pre_h(n * F), want_hid_h(n * F), pre_h(n * F), hid_h(n * F);
          narrow(want_pre_h.data(), want_pre.data(), n * F);
          narrow(want_hid_h.data(), want_hid.data(), n * F);
          std::vector<float> want_wide(n * F), wide(n * F, -1.0f);
          widen(want_wide.data(), want_hid_h.data(), n * F);
          bias_activation_dropout_stored(a, hid_h.data(), pre_h.data(), pre.data(), bias.data(), n, F, drop, 17,
                                         rounded ? wide.data() : nullptr);
          ASSERT_EQ(bits(pre_h), bits(want_pre_h)) << n << "x" << F;
          ASSERT_EQ(bits(hid_h), bits(want_hid_h)) << n << "x" << F << " p " << p;
          if (rounded) ASSERT_EQ(wide, want_wide) << n << "x" << F << " p " << p;
          else ASSERT_EQ(wide, std::vector<float>(n * F, -1.0f)) << "hid_rounded null: nothing written";
        }
}

TEST(BiasActivationDropout, InBf16EqualsTheFp32PassRounded) { expect_stored_pass_equals_fp32_pass_rounded<BF16>(); }
TEST(BiasActivationDropout, InFp16EqualsTheFp32PassRounded) { expect_stored_pass_equals_fp32_pass_rounded<F16>(); }

// Its backward in one pass equals dropout, the activation's gradient at the
// widened pre, the bias's column sums (same order: bit for bit) and rounding.
// relu reads hid instead of pre: a (pre, hid) pair from the forward pass.
TEST(BiasActivationDropout, Bf16BackwardEqualsTheSeparateSteps) {
  Rng rng(7);
  for (Activation a : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh})
    for (auto [n, F] : {std::pair<std::int64_t, std::int64_t>{5, 37}, {300, 301}, {64, 256}})
      for (float p : {0.0f, 0.2f}) {
        std::vector<float> dh(n * F), pre_f(n * F), hid_f(n * F), db(F);
        for (float& v : dh) v = rng.normal();
        for (float& v : pre_f) v = rng.normal();
        for (float& v : db) v = rng.normal();
        const DropoutSpec drop{p, 5, 6};
        const std::uint64_t base = 29;
        bias_activation_dropout(a, hid_f.data(), pre_f.data(), static_cast<const float*>(nullptr), n, F, drop, base);
        std::vector<BF16> pre(n * F), hid(n * F);
        narrow(pre.data(), pre_f.data(), n * F);
        narrow(hid.data(), hid_f.data(), n * F);
        std::vector<float> want = dh, want_db = db, wide(n * F);
        if (drop.active()) dropout_inplace(want.data(), n * F, base, drop);
        widen(wide.data(), pre.data(), n * F);
        activation_backward(a, want.data(), want.data(), wide.data(), n * F);
        for (std::int64_t r = 0; r < n; ++r)
          for (std::int64_t j = 0; j < F; ++j) want_db[j] += want[r * F + j];
        std::vector<BF16> want_b(n * F), got_b(n * F);
        narrow(want_b.data(), want.data(), n * F);
        const BF16* saved = a == Activation::kRelu ? hid.data() : pre.data();
        activation_dropout_backward_bf16(a, got_b.data(), dh.data(), saved, db.data(), n, F, drop, base);
        ASSERT_EQ(dh, want) << n << "x" << F << " p " << p;
        ASSERT_EQ(db, want_db) << n << "x" << F;
        ASSERT_EQ(bits(got_b), bits(want_b)) << n << "x" << F;
      }
}

// relu's backward from its output (dropout(relu(pre))) equals dropout then
// relu's backward at pre, bit for bit, zeros, NaN and infinities included.
TEST(ReluDropoutBackward, FromTheOutputEqualsDropoutThenReluAtPre) {
  Rng rng(8);
  for (std::int64_t n : {37, 100000})
    for (float p : {0.0f, 0.3f}) {
      std::vector<float> pre(n), hid(n), dy(n);
      for (float& v : pre) v = rng.normal();
      for (float& v : dy) v = rng.normal();
      const float special[] = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min(),
                               -std::numeric_limits<float>::denorm_min()};
      for (std::size_t i = 0; i < std::size(special); ++i) pre[i * 3] = special[i];
      const DropoutSpec drop{p, 12, 13};
      bias_activation_dropout(Activation::kRelu, hid.data(), pre.data(), static_cast<const float*>(nullptr), 1, n, drop,
                              0);
      std::vector<float> want = dy, got(n);
      if (drop.active()) dropout_inplace(want.data(), n, 0, drop);
      activation_backward(Activation::kRelu, want.data(), want.data(), pre.data(), n);
      relu_dropout_backward(got.data(), dy.data(), hid.data(), n, drop);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * n)) << n << " p " << p;
    }
}

// The residual step after a sublayer in one pass (dropout, residual add,
// LayerNorm) equals the three kernels one after another, bit for bit, with
// the sum saved in every storage type, written over s or not, small and
// threaded sizes.
template <typename T>
void check_residual_forward(std::int64_t N, std::int64_t d, float p, bool write_sum, Rng& rng) {
  std::vector<float> s(N * d), x(N * d), gamma(d), beta(d);
  for (auto* v : {&s, &x, &gamma, &beta})
    for (float& e : *v) e = rng.normal();
  const DropoutSpec drop{p, 7, 8};
  // The steps: s dropped in place, x added to it, the norm over the sum.
  std::vector<float> h = s, want_y(N * d), want_mean(N), want_rstd(N);
  if (drop.active()) dropout_inplace(h.data(), N * d, 0, drop);
  for (std::int64_t i = 0; i < N * d; ++i) h[i] += x[i];
  layer_norm_forward<float>(want_y.data(), want_mean.data(), want_rstd.data(), h.data(), gamma.data(), beta.data(), N,
                            d, 1e-5f);
  std::vector<T> want_saved(N * d), saved(N * d);
  narrow(want_saved.data(), h.data(), N * d);

  std::vector<float> y(N * d), mean(N), rstd(N), s_in = s;
  residual_layer_norm_forward<T>(y.data(), mean.data(), rstd.data(), s_in.data(), saved.data(), x.data(), gamma.data(),
                                 beta.data(), N, d, 1e-5f, drop, write_sum);
  ASSERT_EQ(y, want_y) << N << "x" << d << " p " << p;
  ASSERT_EQ(mean, want_mean);
  ASSERT_EQ(rstd, want_rstd);
  ASSERT_EQ(s_in, write_sum ? h : s) << "s holds the sum only when asked";
  ASSERT_EQ(0, std::memcmp(saved.data(), want_saved.data(), sizeof(T) * saved.size()));
}

TEST(ResidualLayerNorm, ForwardEqualsDropoutAddAndNormBitForBit) {
  Rng rng(8);
  for (auto [N, d] : {std::pair<std::int64_t, std::int64_t>{5, 37}, {300, 301}, {64, 256}})
    for (float p : {0.0f, 0.2f})
      for (bool write_sum : {false, true}) {
        check_residual_forward<float>(N, d, p, write_sum, rng);
        check_residual_forward<BF16>(N, d, p, write_sum, rng);
        check_residual_forward<F16>(N, d, p, write_sum, rng);
      }
}

// Its backward equals the steps: the gradients summed at the norm's output
// (post-norm) or input (pre-norm), the norm's backward on the saved sum
// widened, and the same dropout mask on a copy.
template <typename T>
void check_residual_backward(std::int64_t N, std::int64_t d, float p, int extra, Rng& rng) {
  std::vector<float> h32(N * d), dy(N * d), e(N * d), gamma(d), mean(N), rstd(N), y(N * d);
  for (auto* v : {&h32, &dy, &e, &gamma})
    for (float& v2 : *v) v2 = rng.normal();
  std::vector<T> h(N * d);
  narrow(h.data(), h32.data(), N * d);
  std::vector<float> hw(N * d);
  widen(hw.data(), h.data(), N * d);
  layer_norm_forward<float>(y.data(), mean.data(), rstd.data(), hw.data(), gamma.data(), nullptr, N, d, 1e-5f);
  const DropoutSpec drop{p, 9, 10};
  const float* dy_extra = extra == 1 ? e.data() : nullptr;
  const float* dh_extra = extra == 2 ? e.data() : nullptr;

  std::vector<float> g = dy, want_dh(N * d), want_dgamma(d, 0.25f), want_dbeta(d, -0.25f);
  if (dy_extra)
    for (std::int64_t i = 0; i < N * d; ++i) g[i] += dy_extra[i];
  layer_norm_backward<float>(want_dh.data(), want_dgamma.data(), want_dbeta.data(), g.data(), hw.data(), mean.data(),
                             rstd.data(), gamma.data(), N, d);
  if (dh_extra)
    for (std::int64_t i = 0; i < N * d; ++i) want_dh[i] += dh_extra[i];
  std::vector<float> want_ds = want_dh;
  if (drop.active()) dropout_inplace(want_ds.data(), N * d, 0, drop);

  std::vector<float> dh(N * d), ds(N * d), dgamma(d, 0.25f), dbeta(d, -0.25f);
  residual_layer_norm_backward<T>(dh.data(), ds.data(), dgamma.data(), dbeta.data(), dy.data(), dy_extra, dh_extra,
                                  h.data(), mean.data(), rstd.data(), gamma.data(), N, d, drop);
  ASSERT_EQ(dh, want_dh) << N << "x" << d << " p " << p << " extra " << extra;
  ASSERT_EQ(ds, want_ds);
  ASSERT_EQ(dgamma, want_dgamma);
  ASSERT_EQ(dbeta, want_dbeta);
}

TEST(ResidualLayerNorm, BackwardEqualsItsStepsBitForBit) {
  Rng rng(9);
  for (auto [N, d] : {std::pair<std::int64_t, std::int64_t>{5, 37}, {300, 301}, {64, 256}})
    for (float p : {0.0f, 0.2f})
      for (int extra : {0, 1, 2}) {
        check_residual_backward<float>(N, d, p, extra, rng);
        check_residual_backward<BF16>(N, d, p, extra, rng);
        check_residual_backward<F16>(N, d, p, extra, rng);
      }
}

class Activations : public ::testing::TestWithParam<Activation> {};

TEST_P(Activations, GradientsMatchFiniteDifferences) {
  Rng rng(3);
  auto x = random_vector(50, rng, 2.0), G = random_vector(50, rng);
  auto loss = [&] {
    std::vector<double> y(x.size());
    activation_forward<double>(GetParam(), y.data(), x.data(), static_cast<std::int64_t>(x.size()));
    return weighted_sum(y, G);
  };
  std::vector<double> dx(x.size());
  activation_backward<double>(GetParam(), dx.data(), G.data(), x.data(), static_cast<std::int64_t>(x.size()));
  EXPECT_TRUE(all_close_v(dx, numeric_grad(loss, x), kFdAtol, kFdRtol));
}

INSTANTIATE_TEST_SUITE_P(ReluGelu, Activations,
                         ::testing::Values(Activation::kRelu, Activation::kGelu, Activation::kGeluTanh));

TEST(Activations, GeluIsTheExactErfForm) {
  std::vector<double> x = {-3.0, -1.0, 0.0, 0.5, 2.0}, y(5);
  activation_forward<double>(Activation::kGelu, y.data(), x.data(), 5);
  // torch.nn.functional.gelu(torch.tensor(x, dtype=torch.float64))
  const double want[] = {-0.004049694095, -0.158655253931, 0.0, 0.345731230637, 1.954499736104};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(y[i], want[i], 1e-9);
  EXPECT_THROW(parse_activation("tanh"), ConfigError);
}

TEST(Activations, GeluTanhIsPyTorchsTanhApproximation) {
  std::vector<double> x = {-3.0, -1.0, 0.0, 0.5, 2.0}, y(5);
  activation_forward<double>(Activation::kGeluTanh, y.data(), x.data(), 5);
  // torch.nn.functional.gelu(torch.tensor(x, dtype=torch.float64), approximate="tanh")
  const double want[] = {-0.003637392082, -0.158808009392, 0.0, 0.345714009825, 1.954597694088};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(y[i], want[i], 1e-9);
  EXPECT_EQ(parse_activation("gelu_tanh"), Activation::kGeluTanh);
  EXPECT_EQ(activation_name(Activation::kGeluTanh), "gelu_tanh");
}

// The float GELUs run in vectors (src/kernels/gelu.cpp, erf by Abramowitz and Stegun 7.1.26, as
// PyTorch's): against the double path (std::erf, std::tanh), forward and gradient, over the range a
// layer sees; and each element's value the same wherever it falls (a full vector or the tail).
TEST(GeluVectors, MatchTheDoubleReferenceAndDoNotDependOnPosition) {
  Rng rng(12);
  for (Activation a : {Activation::kGelu, Activation::kGeluTanh}) {
    const std::int64_t n = 4099;  // not a multiple of any vector width
    std::vector<float> x(n), dy(n), y(n), dx(n);
    for (std::int64_t i = 0; i < n; ++i) {
      x[i] = i < 64 ? static_cast<float>(i - 32) * 0.3f : rng.normal() * 3.0f;
      dy[i] = rng.normal();
    }
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 30.0f, x[3] = -30.0f;
    std::vector<double> xd(x.begin(), x.end()), dyd(dy.begin(), dy.end()), yd(n), dxd(n);
    activation_forward(a, y.data(), x.data(), n);
    activation_forward<double>(a, yd.data(), xd.data(), n);
    activation_backward(a, dx.data(), dy.data(), x.data(), n);
    activation_backward<double>(a, dxd.data(), dyd.data(), xd.data(), n);
    for (std::int64_t i = 0; i < n; ++i) {
      const double scale = std::max(1.0, std::fabs(xd[i]));
      ASSERT_NEAR(y[i], yd[i], 1e-6 * scale) << activation_name(a) << " x " << x[i];
      ASSERT_NEAR(dx[i], dxd[i], 2e-6 * scale * std::max(1.0, std::fabs(dyd[i])))
          << activation_name(a) << " x " << x[i];
    }
    for (std::int64_t i = 0; i < 40; ++i) {  // one element alone: the tail's path
      float one = 0, g = 0;
      activation_forward(a, &one, &x[i], 1);
      activation_backward(a, &g, &dy[i], &x[i], 1);
      ASSERT_EQ(one, y[i]) << i;
      ASSERT_EQ(g, dx[i]) << i;
    }
  }
}

TEST(Dropout, KeepsScalesAndIsReproducible) {
  std::vector<double> a(10000, 1.0), b(10000, 1.0);
  DropoutSpec spec{0.25f, 7, 3};
  dropout_inplace(a.data(), 10000, 0, spec);
  // The same mask when generated in two pieces (as threads or tiles would).
  dropout_inplace(b.data(), 4001, 0, spec);
  dropout_inplace(b.data() + 4001, 5999, 4001, spec);
  EXPECT_EQ(a, b);
  int zeros = 0;
  for (double v : a) {
    if (v == 0.0) ++zeros;
    else EXPECT_DOUBLE_EQ(v, 1.0 / (1.0 - static_cast<double>(0.25f)));
  }
  EXPECT_NEAR(zeros / 10000.0, 0.25, 0.02);
}

// The vectorised masks against their reference twin, element by element, at
// starts and lengths that cut Philox blocks and batches anywhere, in float
// and double; the threshold's edges.
TEST(Dropout, MatchesTheReferenceMaskElementByElement) {
  const DropoutSpec spec{0.1f, 3, 9};
  for (std::uint64_t base : {0ull, 1ull, 7ull, 127ull, 1000003ull})
    for (std::int64_t n : {1, 5, 17, 128, 300}) {
      std::vector<float> f(static_cast<std::size_t>(n), 1.5f), src(f), row(f.size(), 7.0f);
      std::vector<double> d(static_cast<std::size_t>(n), 1.5);
      dropout_inplace(f.data(), n, base, spec);
      dropout_inplace(d.data(), n, base, spec);
      dropout_row(row.data(), src.data(), n, base, spec);  // out of place: the same values, src kept
      for (std::int64_t i = 0; i < n; ++i) {
        const bool keep = dropout_keep_at(spec, base + static_cast<std::uint64_t>(i));
        ASSERT_EQ(f[i], keep ? 1.5f * (1.0f / (1.0f - spec.p)) : 0.0f) << base << "+" << i;
        ASSERT_EQ(row[i], f[i]) << base << "+" << i;
        ASSERT_EQ(src[i], 1.5f) << base << "+" << i;
        ASSERT_EQ(d[i], keep ? 1.5 / (1.0 - static_cast<double>(spec.p)) : 0.0) << base << "+" << i;
      }
    }
  EXPECT_EQ(dropout_threshold(0.0f), 0u);
  EXPECT_EQ(dropout_threshold(0.1f), 6554u);  // 6553.6 rounded
  EXPECT_EQ(dropout_threshold(1.0f), 65536u);
  std::vector<float> all(50, 1.0f);
  dropout_inplace(all.data(), 50, 0, DropoutSpec{1.0f, 1, 1});
  for (float v : all) EXPECT_EQ(v, 0.0f);
}

// Recording keep bits: each element's bit lands at its place in the row,
// whatever the offset (across 64-bit words), neighbouring bits untouched; the
// values are those of the plain row, and replaying the bits gives them again.
TEST(Dropout, RecordedKeepBitsReplayTheSameValues) {
  const DropoutSpec spec{0.3f, 4, 2};
  Rng rng(12);
  for (std::int64_t at : {0, 1, 13, 63, 64, 100})
    for (std::int64_t n : {1, 15, 16, 17, 64, 129}) {
      const std::uint64_t base = 1000 + static_cast<std::uint64_t>(7 * at + n);
      std::vector<float> x(static_cast<std::size_t>(n)), want(x.size()), got(x.size()), again(x.size());
      for (float& v : x) v = rng.normal();
      dropout_row(want.data(), x.data(), n, base, spec);
      // Words full of ones and of zeros: only bits [at, at + n) may change.
      for (std::uint64_t fill : {~std::uint64_t{0}, std::uint64_t{0}}) {
        std::vector<std::uint64_t> bits(5, fill);
        dropout_row(got.data(), x.data(), n, base, spec, bits.data(), at);
        ASSERT_EQ(got, want) << at << " " << n;
        for (std::int64_t k = 0; k < 5 * 64; ++k) {
          const bool bit = (bits[k / 64] >> (k % 64)) & 1;
          if (k >= at && k < at + n)
            ASSERT_EQ(bit, dropout_keep_at(spec, base + static_cast<std::uint64_t>(k - at))) << at << "+" << k;
          else ASSERT_EQ(bit, fill != 0) << "bit " << k << " outside [" << at << ", " << at + n << ")";
        }
        dropout_row_from_bits(again.data(), x.data(), n, spec, bits.data(), at);
        ASSERT_EQ(again, want) << at << " " << n;
      }
    }
}

// Long spans are shared between threads; every element still follows its own
// index in the stream, whatever the thread count and the span's start.
TEST(Dropout, LongSpansGiveTheSameMaskOnAnyThreadCount) {
  const std::int64_t n = 300007;
  const std::uint64_t base = 12345;
  const DropoutSpec spec{0.3f, 11, 5};
  std::vector<float> one(n, 2.0f), two(n, 2.0f);
  set_num_threads(1);
  dropout_inplace(one.data(), n, base, spec);
  set_num_threads(2);
  dropout_inplace(two.data(), n, base, spec);
  set_num_threads(0);
  EXPECT_EQ(one, two);
  const float kept = 2.0f / (1.0f - spec.p);
  for (std::int64_t i = 0; i < n; i += 997)
    ASSERT_EQ(one[i], dropout_keep_at(spec, base + static_cast<std::uint64_t>(i)) ? kept : 0.0f) << i;
}

}  // namespace
}  // namespace multihead
