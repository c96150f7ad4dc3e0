// SPDX-License-Identifier: Apache-2.0
// The bf16 attention kernel against the fp32 reference on the same
// bf16-rounded Q, K and V, for every case of the fused kernel's suite
// (sizes, masks, positions, sparse patterns, dropout, fully masked rows),
// on the path this process takes (see Bf16AttentionVsReference).
//
// Tolerances follow from bf16's unit roundoff u = 2^-8: the kernel rounds
// the weights P (and, in backward, dO and dS) to bf16, each a relative error
// of at most u on terms that are then summed, and stores O in bf16. So an
// output or gradient may be off by a few u times the size of its terms,
// bounded here by the largest value of the tensor: |got - ref| <= c u max|ref|,
// with c = 3 for the output (the rounding of P and of O) and 6 for the
// gradients (two operands rounded per product, and dS built from a rounded
// dP). lse must equal the fp32 kernel's, infinities included; fully masked
// rows give exact zeros (their own test).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "multihead/kernels/attention_bf16.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/nn/attention_kernel.h"
#include "amx_tiles.h"
#include "attention_cases.h"
#include "test_util.h"

namespace multihead {
namespace {

using test::Data;
using test::make;
using test::Spec;
using test::view;

constexpr double kUnitRoundoff = 1.0 / 256.0;

// Rounds x to bf16 in place and returns the bf16 copy.
std::vector<BF16> round_bf16(std::vector<float>& x) {
  std::vector<BF16> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    out[i].bits = float_to_bf16(x[i]);
    x[i] = bf16_to_float(out[i].bits);
  }
  return out;
}

std::vector<float> widened(const std::vector<BF16>& x) {
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_float(x[i].bits);
  return out;
}

::testing::AssertionResult within_bf16(const std::vector<float>& got, const std::vector<float>& ref, double c) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  double scale = 0;
  for (float r : ref)
    if (std::isfinite(r)) scale = std::max(scale, static_cast<double>(std::fabs(r)));
  const double tol = c * kUnitRoundoff * scale + 1e-6;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(e <= worst)) worst = e, at = i;  // NaN counts as the worst
  }
  if (!(worst <= tol))
    return ::testing::AssertionFailure() << "element " << at << ": " << got[at] << " vs " << ref[at] << ", error "
                                         << worst << " > " << tol << " (" << c << " u max|ref|, max|ref| " << scale
                                         << ")";
  return ::testing::AssertionSuccess() << "max error " << worst / (kUnitRoundoff * scale + 1e-30) << " u max|ref|";
}

// On the CPU's path: AMX tiles, oneDNN's bf16 matmul or widened to fp32.
// The other paths are the same tests in processes of their own
// (tests/CMakeLists.txt): oneDNN held below bf16 units (widened), held to
// AVX512-BF16, and on an AMX CPU with MULTIHEAD_AMX_TILES=off (oneDNN's
// AMX matmul for the products the tiles would take).
class Bf16AttentionVsReference : public ::testing::TestWithParam<Spec> {};

TEST_P(Bf16AttentionVsReference, ForwardAndGradientsWithinBf16Rounding) {
  const Spec& s = GetParam();
  const AttentionDims& d = s.d;
  Data x = make(s);
  const std::vector<BF16> q16 = round_bf16(x.q), k16 = round_bf16(x.k), v16 = round_bf16(x.v);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  auto cv = [&](const std::vector<float>& v, std::int64_t len, std::int64_t dim) {
    return view<const float>(v.data(), d, len, dim);
  };
  auto cv16 = [&](const std::vector<BF16>& v, std::int64_t len, std::int64_t dim) {
    return view<const BF16>(v.data(), d, len, dim);
  };

  const test::Reference ref = test::reference(s, x, scale);
  std::vector<float> out_f(x.g.size()), lse_f(static_cast<std::size_t>(d.B * d.H * d.L));
  attention_fused_forward<float>(view(out_f.data(), d, d.L, d.Dv), lse_f.data(), cv(x.q, d.L, d.D), cv(x.k, d.S, d.D),
                                 cv(x.v, d.S, d.Dv), x.terms, d, scale, x.drop, s.tiles);
  std::vector<BF16> out16(x.g.size(), BF16{float_to_bf16(7.0f)});
  std::vector<float> lse(lse_f.size(), 7.0f);
  attention_bf16_forward(view(out16.data(), d, d.L, d.Dv), lse.data(), cv16(q16, d.L, d.D), cv16(k16, d.S, d.D),
                         cv16(v16, d.S, d.Dv), x.terms, d, scale, x.drop, s.tiles);
  EXPECT_TRUE(within_bf16(widened(out16), ref.out, 3)) << "output";
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse_f[i])) EXPECT_EQ(lse[i], lse_f[i]) << "lse " << i;
    else EXPECT_NEAR(lse[i], lse_f[i], 1e-5 * (1 + std::fabs(lse_f[i]))) << "lse " << i;
  }

  std::vector<float> drk(x.rel_k.size()), drv(x.rel_v.size());
  std::vector<float> dq(x.q.size(), 7.0f), dk(x.k.size(), 7.0f), dv(x.v.size(), 7.0f);
  attention_bf16_backward(view(dq.data(), d, d.L, d.D), view(dk.data(), d, d.S, d.D), view(dv.data(), d, d.S, d.Dv),
                          lse.data(), cv16(out16, d.L, d.Dv), cv(x.g, d.L, d.Dv), cv16(q16, d.L, d.D),
                          cv16(k16, d.S, d.D), cv16(v16, d.S, d.Dv), x.terms, d, scale, x.drop, s.tiles,
                          {drk.data(), drv.data()});
  EXPECT_TRUE(within_bf16(dq, ref.dq, 6)) << "dq";
  EXPECT_TRUE(within_bf16(dk, ref.dk, 6)) << "dk";
  EXPECT_TRUE(within_bf16(dv, ref.dv, 6)) << "dv";
  EXPECT_TRUE(within_bf16(drk, ref.drk, 6)) << "d_rel_k";
  EXPECT_TRUE(within_bf16(drv, ref.drv, 6)) << "d_rel_v";

  // The dropout mask recorded by the forward as keep bits and read back by
  // the backward instead of drawn again: the same results, bit for bit.
  if (!x.drop.active()) return;
  std::vector<std::uint64_t> bits = test::keep_bits(d);
  AttentionDropout drop = x.drop;
  drop.keep_bits = bits.data();
  std::vector<BF16> out_b(out16.size());
  std::vector<float> lse_b(lse.size());
  attention_bf16_forward(view(out_b.data(), d, d.L, d.Dv), lse_b.data(), cv16(q16, d.L, d.D), cv16(k16, d.S, d.D),
                         cv16(v16, d.S, d.Dv), x.terms, d, scale, drop, s.tiles);
  EXPECT_TRUE(test::same_bits(widened(out_b), widened(out16))) << "output";
  EXPECT_TRUE(test::same_bits(lse_b, lse)) << "lse";
  std::vector<float> drk_b(x.rel_k.size()), drv_b(x.rel_v.size());
  std::vector<float> dq_b(x.q.size()), dk_b(x.k.size()), dv_b(x.v.size());
  attention_bf16_backward(view(dq_b.data(), d, d.L, d.D), view(dk_b.data(), d, d.S, d.D),
                          view(dv_b.data(), d, d.S, d.Dv), lse.data(), cv16(out16, d.L, d.Dv), cv(x.g, d.L, d.Dv),
                          cv16(q16, d.L, d.D), cv16(k16, d.S, d.D), cv16(v16, d.S, d.Dv), x.terms, d, scale, drop,
                          s.tiles, {drk_b.data(), drv_b.data()});
  test::expect_same_bits(
      {{"dq", dq_b, dq}, {"dk", dk_b, dk}, {"dv", dv_b, dv}, {"d_rel_k", drk_b, drk}, {"d_rel_v", drv_b, drv}});
}

// The fused kernel's cases, less those that only pick its fp32 tile products
// (BLAS or micro-kernel): the bf16 kernel has one way to multiply.
std::vector<Spec> bf16_specs() {
  std::vector<Spec> out;
  for (const Spec& s : test::specs())
    if (s.name.find("blas_tiles") == std::string::npos) out.push_back(s);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, Bf16AttentionVsReference, ::testing::ValuesIn(bf16_specs()),
                         [](const auto& p) { return p.param.name; });

// Fully masked queries (no key at all, or a row of -inf) get O = 0 and
// lse = +inf, and pass no gradient: exactly, as in fp32.
TEST(Bf16Attention, FullyMaskedRowsGiveExactZeros) {
  Spec s{"x", {2, 2, 6, 9, 8, 8}};
  s.fully_masked = s.kpm_bool = s.attn_float = true;  // batch 0 has no keys; query 0 masked, query L-1 all -inf
  Data x = make(s);
  const AttentionDims& d = s.d;
  const std::vector<BF16> q16 = round_bf16(x.q), k16 = round_bf16(x.k), v16 = round_bf16(x.v);
  std::vector<BF16> out(x.g.size(), BF16{float_to_bf16(7.0f)});
  std::vector<float> lse(static_cast<std::size_t>(d.B * d.H * d.L), 7.0f);
  attention_bf16_forward(view(out.data(), d, d.L, d.Dv), lse.data(), view<const BF16>(q16.data(), d, d.L, d.D),
                         view<const BF16>(k16.data(), d, d.S, d.D), view<const BF16>(v16.data(), d, d.S, d.Dv), x.terms,
                         d, 0.5f, {});
  std::vector<float> dq(x.q.size(), 7.0f), dk(x.k.size(), 7.0f), dv(x.v.size(), 7.0f);
  attention_bf16_backward(view(dq.data(), d, d.L, d.D), view(dk.data(), d, d.S, d.D), view(dv.data(), d, d.S, d.Dv),
                          lse.data(), view<const BF16>(out.data(), d, d.L, d.Dv),
                          view<const float>(x.g.data(), d, d.L, d.Dv), view<const BF16>(q16.data(), d, d.L, d.D),
                          view<const BF16>(k16.data(), d, d.S, d.D), view<const BF16>(v16.data(), d, d.S, d.Dv),
                          x.terms, d, 0.5f, {});
  const std::vector<float> o = widened(out);
  const std::int64_t row = d.H * d.D;  // D == Dv
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t i = 0; i < d.L; ++i) {
      const bool masked = b == 0 || i == 0 || i == d.L - 1;
      for (std::int64_t h = 0; h < d.H; ++h) {
        EXPECT_EQ(std::isinf(lse[static_cast<std::size_t>((b * d.H + h) * d.L + i)]), masked) << b << " " << i;
        if (!masked) continue;
        for (std::int64_t e = 0; e < d.D; ++e) {
          const std::size_t at = static_cast<std::size_t>((b * d.L + i) * row + h * d.D + e);
          EXPECT_EQ(o[at], 0.0f);
          EXPECT_EQ(dq[at], 0.0f);
        }
      }
    }
  for (std::int64_t e = 0; e < d.S * row; ++e) {  // batch 0: no query sees a key
    EXPECT_EQ(dk[static_cast<std::size_t>(e)], 0.0f);
    EXPECT_EQ(dv[static_cast<std::size_t>(e)], 0.0f);
  }
}

// The bf16 kernel's forward (8 x 8 tiles, scale 0.5) on x, rounded to bf16 in place:
// the output widened to fp32, and the log-sum-exp into lse (B = 1).
std::vector<float> forward_rounded(Data& x, const AttentionDims& d, std::vector<float>& lse) {
  const std::vector<BF16> q16 = round_bf16(x.q), k16 = round_bf16(x.k), v16 = round_bf16(x.v);
  std::vector<BF16> out(x.g.size());
  lse.assign(static_cast<std::size_t>(d.H * d.L), 0.0f);
  attention_bf16_forward(view(out.data(), d, d.L, d.Dv), lse.data(), view<const BF16>(q16.data(), d, d.L, d.D),
                         view<const BF16>(k16.data(), d, d.S, d.D), view<const BF16>(v16.data(), d, d.S, d.Dv), x.terms,
                         d, 0.5f, {}, AttentionTiles{8, 8});
  return widened(out);
}

// A NaN in one key reaches every query that sees it (as in PyTorch's
// softmax) and no other: masked keys are skipped or set to -inf.
TEST(Bf16Attention, ANaNKeyReachesTheQueriesThatSeeIt) {
  const AttentionDims d{1, 2, 20, 20, 8, 8};
  for (CausalAlign causal : {CausalAlign::kNone, CausalAlign::kTopLeft}) {
    Spec s{"nan", d};
    s.causal = causal;
    Data x = make(s);
    x.k[static_cast<std::size_t>(5 * d.H * d.D + 2)] = std::nanf("");  // key 5, head 0, dimension 2
    std::vector<float> lse;
    const std::vector<float> o = forward_rounded(x, d, lse);
    for (std::int64_t i = 0; i < d.L; ++i)
      for (std::int64_t h = 0; h < d.H; ++h)
        for (std::int64_t e = 0; e < d.Dv; ++e) {
          const bool sees = h == 0 && (causal == CausalAlign::kNone || i >= 5);
          ASSERT_EQ(std::isnan(o[static_cast<std::size_t>((i * d.H + h) * d.Dv + e)]), sees)
              << "query " << i << " head " << h;
        }
  }
}

// A query of NaNs scores NaN against every key: its row is NaN, never the
// zeros of a fully masked row; the other queries are untouched.
TEST(Bf16Attention, AQueryOfNaNsGivesANaNRow) {
  const AttentionDims d{1, 1, 12, 12, 8, 8};
  Spec s{"nanq", d};
  Data x = make(s);
  for (std::int64_t e = 0; e < d.D; ++e) x.q[static_cast<std::size_t>(3 * d.D + e)] = std::nanf("");
  std::vector<float> lse;
  const std::vector<float> o = forward_rounded(x, d, lse);
  for (std::int64_t i = 0; i < d.L; ++i)
    for (std::int64_t e = 0; e < d.Dv; ++e)
      ASSERT_EQ(std::isnan(o[static_cast<std::size_t>(i * d.Dv + e)]), i == 3) << "query " << i;
  EXPECT_TRUE(std::isnan(lse[3]));
}

// attention_fused_forward<BF16> always widens to the fp32 tiles (a kernel
// never hands off to another); attention_stored_forward<BF16>, what the
// modules call, takes the bf16 kernel exactly when the CPU multiplies in
// bf16: the same results as calling either directly.
TEST(Bf16Attention, StoredEntryPointChoosesByPath) {
  Spec s{"dispatch", {1, 2, 40, 40, 16, 16}};
  s.causal = CausalAlign::kTopLeft;
  Data x = make(s);
  const AttentionDims& d = s.d;
  const std::vector<BF16> q16 = round_bf16(x.q), k16 = round_bf16(x.k), v16 = round_bf16(x.v);
  auto cv16 = [&](const std::vector<BF16>& v) { return view<const BF16>(v.data(), d, d.L, d.D); };
  std::vector<BF16> direct(x.g.size()), fused(x.g.size()), stored(x.g.size());
  std::vector<float> l1(static_cast<std::size_t>(d.H * d.L)), l2 = l1, l3 = l1;
  attention_bf16_forward(view(direct.data(), d, d.L, d.Dv), l1.data(), cv16(q16), cv16(k16), cv16(v16), x.terms, d,
                         0.25f, {});
  attention_fused_forward<BF16>(view(fused.data(), d, d.L, d.Dv), l2.data(), cv16(q16), cv16(k16), cv16(v16), x.terms,
                                d, 0.25f, {});
  attention_stored_forward<BF16>(view(stored.data(), d, d.L, d.Dv), l3.data(), cv16(q16), cv16(k16), cv16(v16), x.terms,
                                 d, 0.25f, {});
  // The fused kernel: the fp32 tiles on the widened values, O rounded at the end.
  std::vector<float> o32(x.g.size());
  attention_fused_forward<float>(view(o32.data(), d, d.L, d.Dv), l1.data(), view<const float>(x.q.data(), d, d.L, d.D),
                                 view<const float>(x.k.data(), d, d.L, d.D), view<const float>(x.v.data(), d, d.L, d.D),
                                 x.terms, d, 0.25f, {});
  EXPECT_EQ(widened(round_bf16(o32)), widened(fused)) << "the fused kernel keeps the fp32 tiles";
  if (computes_in_bf16(DType::kBF16))
    EXPECT_EQ(widened(direct), widened(stored)) << "the CPU's bf16 path goes to the bf16 kernel";
  else EXPECT_EQ(widened(fused), widened(stored)) << "without bf16 units, to the fused kernel";
}

}  // namespace
}  // namespace multihead
