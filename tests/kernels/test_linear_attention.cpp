// SPDX-License-Identifier: Apache-2.0
// Linear attention against its quadratic formula, by finite differences, and
// its recurrent form against the causal kernel.
#include <gtest/gtest.h>

#include <cmath>

#include "multihead/kernels/linear_attention.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::all_close_v;

struct Case {
  const char* name;
  AttentionDims d;
  bool causal, padding;
  std::int64_t chunk = 64;  // queries per block; small values give several blocks
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

double phi(double x) { return x > 0 ? x + 1 : std::exp(x); }

struct Problem {
  AttentionDims d;
  std::vector<double> q, k, v;
  std::vector<std::uint8_t> pad;
  LinearAttentionArgs<double> args;
  explicit Problem(const Case& c) : d(c.d) {
    Rng rng(3);
    q = test::random_vector(d.B * d.L * d.H * d.D, rng);
    k = test::random_vector(d.B * d.S * d.H * d.D, rng);
    v = test::random_vector(d.B * d.S * d.H * d.Dv, rng);
    args.causal = c.causal;
    args.chunk = c.chunk;
    if (c.padding) {
      pad.assign(static_cast<std::size_t>(d.B * d.S), 0);
      for (std::int64_t j = d.S - 2; j < d.S; ++j) pad[static_cast<std::size_t>(j)] = 1;  // batch 0's last two keys
      args.key_padding = pad.data();
    }
  }
  HeadsView<const double> cv(const std::vector<double>& x, std::int64_t len, std::int64_t dim) const {
    return {x.data(), len * d.H * dim, d.H * dim, dim};
  }
  std::vector<double> forward() const {
    std::vector<double> out(static_cast<std::size_t>(d.B * d.L * d.H * d.Dv));
    linear_attention_forward<double>({out.data(), d.L * d.H * d.Dv, d.H * d.Dv, d.Dv}, cv(q, d.L, d.D), cv(k, d.S, d.D),
                                     cv(v, d.S, d.Dv), d, args);
    return out;
  }
  // The quadratic formula: weights phi(q_i) . phi(k_j), normalised.
  std::vector<double> quadratic() const {
    std::vector<double> out(static_cast<std::size_t>(d.B * d.L * d.H * d.Dv), 0.0);
    for (std::int64_t b = 0; b < d.B; ++b)
      for (std::int64_t h = 0; h < d.H; ++h)
        for (std::int64_t i = 0; i < d.L; ++i) {
          double den = args.eps;
          std::vector<double> num(static_cast<std::size_t>(d.Dv), 0.0);
          for (std::int64_t j = 0; j < d.S; ++j) {
            if (args.causal && j > i + d.S - d.L) continue;
            if (!pad.empty() && pad[static_cast<std::size_t>(b * d.S + j)]) continue;
            double w = 0;
            for (std::int64_t e = 0; e < d.D; ++e)
              w += phi(q[((b * d.L + i) * d.H + h) * d.D + e]) * phi(k[((b * d.S + j) * d.H + h) * d.D + e]);
            den += w;
            for (std::int64_t c = 0; c < d.Dv; ++c) num[c] += w * v[((b * d.S + j) * d.H + h) * d.Dv + c];
          }
          for (std::int64_t c = 0; c < d.Dv; ++c) out[((b * d.L + i) * d.H + h) * d.Dv + c] = num[c] / den;
        }
    return out;
  }
};

class LinearAttention : public ::testing::TestWithParam<Case> {};

TEST_P(LinearAttention, ForwardEqualsQuadraticFormula) {
  Problem p(GetParam());
  EXPECT_TRUE(all_close_v(p.forward(), p.quadratic(), 1e-12, 1e-10));
}

TEST_P(LinearAttention, GradientsMatchFiniteDifferences) {
  Problem p(GetParam());
  const AttentionDims& d = p.d;
  Rng rng(9);
  auto G = test::random_vector(d.B * d.L * d.H * d.Dv, rng);
  auto loss = [&] {
    auto o = p.forward();
    double s = 0;
    for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * G[i];
    return s;
  };
  std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  auto mv = [&](std::vector<double>& x, std::int64_t len, std::int64_t dim) {
    return HeadsView<double>{x.data(), len * d.H * dim, d.H * dim, dim};
  };
  linear_attention_backward<double>(mv(dq, d.L, d.D), mv(dk, d.S, d.D), mv(dv, d.S, d.Dv), p.cv(G, d.L, d.Dv),
                                    p.cv(p.q, d.L, d.D), p.cv(p.k, d.S, d.D), p.cv(p.v, d.S, d.Dv), d, p.args);
  EXPECT_TRUE(all_close_v(dq, test::numeric_grad(loss, p.q), test::kFdAtol, test::kFdRtol)) << "dq";
  EXPECT_TRUE(all_close_v(dk, test::numeric_grad(loss, p.k), test::kFdAtol, test::kFdRtol)) << "dk";
  EXPECT_TRUE(all_close_v(dv, test::numeric_grad(loss, p.v), test::kFdAtol, test::kFdRtol)) << "dv";
}

INSTANTIATE_TEST_SUITE_P(Forms, LinearAttention,
                         ::testing::Values(Case{"non_causal", {2, 2, 5, 7, 3, 2}, false, false},
                                           Case{"non_causal_padding", {2, 2, 4, 6, 3, 3}, false, true},
                                           Case{"causal", {2, 2, 6, 6, 3, 2}, true, false},
                                           Case{"causal_L_lt_S_padding", {2, 1, 3, 7, 2, 3}, true, true},
                                           Case{"causal_L_gt_S", {1, 2, 7, 4, 3, 2}, true, false},
                                           Case{"non_causal_chunk2", {2, 2, 5, 7, 3, 2}, false, false, 2},
                                           Case{"non_causal_padding_chunk3", {2, 2, 7, 6, 3, 3}, false, true, 3},
                                           Case{"causal_chunk2", {2, 2, 7, 7, 3, 2}, true, false, 2},
                                           Case{"causal_chunk3", {1, 2, 8, 8, 2, 2}, true, false, 3},
                                           Case{"causal_L_lt_S_padding_chunk2", {2, 1, 5, 11, 2, 3}, true, true, 2},
                                           Case{"causal_L_gt_S_chunk2", {1, 2, 9, 4, 3, 2}, true, false, 2},
                                           Case{"causal_L_gt_S_chunk3", {1, 1, 10, 3, 2, 2}, true, true, 3}),
                         [](const ::testing::TestParamInfo<Case>& c) { return std::string(c.param.name); });

// The float kernel (vectorised feature map, several blocks of the default
// size) on a longer sequence, against the quadratic formula in double.
TEST(LinearAttentionFloat, LongSequencesMatchTheQuadraticFormula) {
  for (bool causal : {false, true})
    for (std::int64_t S : {200, 230}) {
      Problem p(Case{"float", {2, 2, 200, S, 16, 8}, causal, true});
      const AttentionDims& d = p.d;
      auto to_f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
      // The double problem on the float-rounded inputs, so only the kernel's rounding differs.
      for (auto* x : {&p.q, &p.k, &p.v})
        for (double& e : *x) e = static_cast<float>(e);
      const std::vector<float> q = to_f(p.q), k = to_f(p.k), v = to_f(p.v);
      std::vector<float> out(static_cast<std::size_t>(d.B * d.L * d.H * d.Dv));
      LinearAttentionArgs<float> args;
      args.causal = causal;
      args.key_padding = p.args.key_padding;
      auto cv = [&](const std::vector<float>& x, std::int64_t len, std::int64_t dim) {
        return HeadsView<const float>{x.data(), len * d.H * dim, d.H * dim, dim};
      };
      linear_attention_forward<float>({out.data(), d.L * d.H * d.Dv, d.H * d.Dv, d.Dv}, cv(q, d.L, d.D),
                                      cv(k, d.S, d.D), cv(v, d.S, d.Dv), d, args);
      const std::vector<double> want = p.quadratic();
      EXPECT_TRUE((test::all_close<float, double>(out, want, 1e-5, 1e-4)))
          << (causal ? "causal" : "non-causal") << " S=" << S;
    }
}

TEST(LinearAttentionRecurrent, StepsEqualTheCausalKernel) {
  Problem p(Case{"x", {1, 1, 9, 9, 4, 3}, true, false});
  const auto full = p.forward();
  LinearAttentionState<double> st;
  std::vector<double> out(3);
  for (std::int64_t t = 0; t < 9; ++t) {
    linear_attention_step<double>(st, out.data(), p.q.data() + t * 4, p.k.data() + t * 4, p.v.data() + t * 3, 4, 3,
                                  p.args.eps);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(out[c], full[static_cast<std::size_t>(t * 3 + c)], 1e-12);
  }
}

}  // namespace
}  // namespace multihead
