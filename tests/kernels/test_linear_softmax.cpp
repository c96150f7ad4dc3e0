// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "multihead/kernels/linear.h"
#include "multihead/kernels/softmax.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close;
using test::all_close_v;
using test::kFdAtol;
using test::kFdRtol;
using test::numeric_grad;
using test::random_vector;

TEST(Linear, ForwardMatchesDefinition) {
  Rng rng(3);
  const std::int64_t N = 5, in = 7, out = 3;
  auto x = random_vector(N * in, rng), W = random_vector(out * in, rng), b = random_vector(out, rng);
  std::vector<double> y(N * out);
  linear_forward(y.data(), out, x.data(), in, W.data(), b.data(), N, in, out);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < out; ++o) {
      double want = b[o];
      for (std::int64_t i = 0; i < in; ++i) want += x[n * in + i] * W[o * in + i];
      EXPECT_NEAR(y[n * out + o], want, 1e-12);
    }
}

// W given transposed (in, out), as the feed-forward block's second product
// takes it: the definition, in fp32, with and without a bias, and with y's
// rows wider than out.
TEST(Linear, ForwardWithTransposedWeightMatchesDefinition) {
  Rng rng(5);
  for (bool bias : {false, true}) {
    const std::int64_t N = 37, in = 300, out = 19, ldy = 23;
    std::vector<float> x(N * in), Wt(in * out), b(out), y(N * ldy, -7.0f);
    for (float& v : x) v = rng.normal();
    for (float& v : Wt) v = rng.normal();
    for (float& v : b) v = rng.normal();
    linear_forward_t(y.data(), ldy, x.data(), in, Wt.data(), bias ? b.data() : nullptr, N, in, out);
    for (std::int64_t n = 0; n < N; ++n) {
      for (std::int64_t o = 0; o < out; ++o) {
        double want = bias ? b[o] : 0.0;
        for (std::int64_t i = 0; i < in; ++i) want += static_cast<double>(x[n * in + i]) * Wt[i * out + o];
        EXPECT_NEAR(y[n * ldy + o], want, 1e-4 * (1.0 + std::abs(want))) << n << "," << o;
      }
      for (std::int64_t o = out; o < ldy; ++o) EXPECT_EQ(y[n * ldy + o], -7.0f) << "past out: untouched";
    }
  }
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Rng rng(4);
  const std::int64_t N = 4, in = 5, out = 3;
  auto x = random_vector(N * in, rng), W = random_vector(out * in, rng), b = random_vector(out, rng);
  auto G = random_vector(N * out, rng);
  auto loss = [&] {
    std::vector<double> y(N * out);
    linear_forward(y.data(), out, x.data(), in, W.data(), b.data(), N, in, out);
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * G[i];
    return s;
  };
  std::vector<double> dx(N * in), dW(out * in, 0.5), db(out, 0.25);  // dW, db start nonzero: += semantics
  linear_backward(dx.data(), in, false, dW.data(), db.data(), G.data(), out, x.data(), in, W.data(), N, in, out);
  for (double& v : dW) v -= 0.5;
  for (double& v : db) v -= 0.25;
  EXPECT_TRUE(all_close_v(dx, numeric_grad(loss, x), kFdAtol, kFdRtol));
  EXPECT_TRUE(all_close_v(dW, numeric_grad(loss, W), kFdAtol, kFdRtol));
  EXPECT_TRUE(all_close_v(db, numeric_grad(loss, b), kFdAtol, kFdRtol));
}

TEST(Softmax, NormalisesAndHandlesFullyMaskedRows) {
  std::vector<float> x = {1, 2, 3, -std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(softmax_row(x.data(), 4));
  EXPECT_NEAR(x[0] + x[1] + x[2], 1.0f, 1e-6);
  EXPECT_EQ(x[3], 0.0f);
  EXPECT_NEAR(x[2] / x[1], std::exp(1.0f), 1e-5);
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> masked = {ninf, ninf, ninf};
  EXPECT_FALSE(softmax_row(masked.data(), 3));
  for (float v : masked) EXPECT_EQ(v, 0.0f);
  std::vector<float> dx(3), dy = {1, 2, 3};
  softmax_row_backward(dx.data(), masked.data(), dy.data(), 3);
  for (float v : dx) EXPECT_EQ(v, 0.0f);
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  Rng rng(5);
  auto x = random_vector(9, rng), G = random_vector(9, rng);
  auto loss = [&] {
    std::vector<double> y = x;
    softmax_row(y.data(), 9);
    double s = 0;
    for (int i = 0; i < 9; ++i) s += y[i] * G[i];
    return s;
  };
  std::vector<double> y = x, dx(9);
  softmax_row(y.data(), 9);
  softmax_row_backward(dx.data(), y.data(), G.data(), 9);
  EXPECT_TRUE(all_close_v(dx, numeric_grad(loss, x), kFdAtol, kFdRtol));
}

}  // namespace
}  // namespace multihead
