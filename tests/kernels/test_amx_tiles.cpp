// SPDX-License-Identifier: Apache-2.0
// The AMX tile products (amx_tiles.h) against the bf16 reference twin in
// double: both packings, parts of a packing that start inside it, every
// edge (rows, columns and inner lengths off the 16 / 32 grid), alpha, and
// accumulation. Operands carry NaN in their row padding, which no product
// may read. Skipped where the process cannot use AMX tiles.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "amx_tiles.h"
#include "multihead/core/rng.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"

namespace multihead {
namespace {

std::vector<BF16> operand(std::int64_t rows, std::int64_t cols, std::int64_t ld, Rng& rng) {
  std::vector<BF16> x(static_cast<std::size_t>(rows * ld), BF16{float_to_bf16(NAN)});
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) x[i * ld + j].bits = float_to_bf16(rng.normal());
  return x;
}

struct Shape {
  std::int64_t M, N, K;
};

class AmxTilesBf16 : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (!amx::usable())
      GTEST_SKIP() << "no AMX tiles in this process (bf16 path " << bf16_path_name(bf16_path()) << ")";
  }
};

// got vs the double reference: fp32 accumulation of K products, each exact
// in fp32 (bf16 x bf16), errs by at most about K 2^-24 times the sum of
// their magnitudes; the bound allows 4x that.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<float>& mag,
                  std::int64_t K, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = 4.0 * static_cast<double>(K + 1) * std::ldexp(1.0, -24) * mag[i] + 1e-30;
    ASSERT_LE(std::fabs(static_cast<double>(got[i]) - ref[i]), tol) << what << " element " << i;
  }
}

TEST_P(AmxTilesBf16, ProductsMatchTheReferenceTwin) {
  const auto [M, N, K] = GetParam();
  Rng rng(17 + M * 7 + N * 5 + K);
  const std::int64_t lda = K + 5;
  const std::vector<BF16> A = operand(M, K, lda, rng);
  // The packing covers more than the product: it starts at (k0, n0) inside.
  const std::int64_t k0 = 32, n0 = 16, Kt = k0 + K + 7, Nt = n0 + N + 3;
  const std::vector<BF16> B = operand(Kt, Nt, Nt + 2, rng);   // (Kt, Nt) for pack
  const std::vector<BF16> Bt = operand(Nt, Kt, Kt + 3, rng);  // (Nt, Kt) for pack_transposed
  std::vector<BF16> packed(static_cast<std::size_t>(amx::packed_size(Kt, Nt)));
  std::vector<BF16> packed_t(static_cast<std::size_t>(amx::packed_size(Kt, Nt)));
  amx::pack(packed.data(), B.data(), Nt + 2, Kt, Nt);
  amx::pack_transposed(packed_t.data(), Bt.data(), Kt + 3, Nt, Kt);

  for (const bool transposed : {false, true}) {
    const BF16* b = transposed ? Bt.data() + n0 * (Kt + 3) + k0 : B.data() + k0 * (Nt + 2) + n0;
    const std::int64_t ldb = transposed ? Kt + 3 : Nt + 2;
    const Trans tb = transposed ? Trans::kYes : Trans::kNo;
    const amx::PackedPart part = amx::part(transposed ? packed_t.data() : packed.data(), Kt, k0, n0);
    // |A| |B|, the scale of each result's rounding.
    std::vector<BF16> absA(A), absB(transposed ? Bt : B);
    for (BF16& x : absA) x.bits &= 0x7fff;
    for (BF16& x : absB) x.bits &= 0x7fff;
    const BF16* absb = absB.data() + (b - (transposed ? Bt.data() : B.data()));
    std::vector<float> mag(static_cast<std::size_t>(M * N), 0.0f);
    gemm_bf16_ref(Trans::kNo, tb, M, N, K, 1.0f, absA.data(), lda, absb, ldb, 0.0f, mag.data(), N);

    // C = alpha A B, into a C with a row stride of its own.
    const std::int64_t ldc = N + 4;
    std::vector<float> C(static_cast<std::size_t>(M * ldc), 7.0f), ref(static_cast<std::size_t>(M * N));
    amx::gemm(C.data(), ldc, A.data(), lda, part, M, N, K, 0.5f, false);
    gemm_bf16_ref(Trans::kNo, tb, M, N, K, 0.5f, A.data(), lda, b, ldb, 0.0f, ref.data(), N);
    std::vector<float> got(static_cast<std::size_t>(M * N));
    for (std::int64_t i = 0; i < M; ++i) {
      for (std::int64_t j = 0; j < N; ++j) got[i * N + j] = C[i * ldc + j];
      for (std::int64_t j = N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], 7.0f) << "wrote past column " << N;
    }
    std::vector<float> half_mag(mag);
    for (float& m : half_mag) m *= 0.5f;
    expect_close(got, ref, half_mag, K, transposed ? "alpha A B^T" : "alpha A B");

    // C += A B onto what is there.
    std::vector<float> acc(static_cast<std::size_t>(M * N)), acc_ref(acc.size());
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] = acc_ref[i] = static_cast<float>(rng.normal());
    amx::gemm(acc.data(), N, A.data(), lda, part, M, N, K, 1.0f, true);
    gemm_bf16_ref(Trans::kNo, tb, M, N, K, 1.0f, A.data(), lda, b, ldb, 1.0f, acc_ref.data(), N);
    for (std::size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(acc_ref[i]);
    expect_close(acc, acc_ref, mag, K, transposed ? "C += A B^T" : "C += A B");
  }
}

// Packing fp32 rows pair by pair as they are rounded (pack_row_pair, the
// last row of an odd K paired with zeros, zero_rows_from for the padding)
// gives the layout pack() gives for the rounded matrix, bit for bit, over
// a packing whose memory held NaN.
TEST_P(AmxTilesBf16, RowPairsPackAsPackDoes) {
  const auto [M, N, K] = GetParam();
  (void)M;
  Rng rng(static_cast<std::uint64_t>(N * 131 + K));
  std::vector<float> rows(static_cast<std::size_t>(K * N));
  std::vector<BF16> rounded(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i] = rng.normal();
    rounded[i].bits = float_to_bf16(rows[i]);
  }
  const std::size_t size = static_cast<std::size_t>(amx::packed_size(K, N));
  std::vector<BF16> want(size), got(size, BF16{float_to_bf16(NAN)});
  amx::pack(want.data(), rounded.data(), N, K, N);
  for (std::int64_t k = 0; k < K; k += 2)
    amx::pack_row_pair(got.data(), K, N, k, rows.data() + k * N, k + 1 < K ? rows.data() + (k + 1) * N : nullptr);
  amx::zero_rows_from(got.data(), K, N, (K + 1) / 2 * 2);
  for (std::size_t i = 0; i < size; ++i) ASSERT_EQ(got[i].bits, want[i].bits) << "value " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AmxTilesBf16,
                         ::testing::Values(Shape{1, 1, 1}, Shape{16, 16, 32}, Shape{32, 32, 32}, Shape{192, 256, 32},
                                           Shape{17, 33, 31}, Shape{64, 64, 4096}, Shape{37, 45, 70}, Shape{48, 16, 64},
                                           Shape{15, 47, 96}, Shape{33, 17, 33}),
                         [](const auto& p) {
                           return std::to_string(p.param.M) + "x" + std::to_string(p.param.N) + "x" +
                                  std::to_string(p.param.K);
                         });

}  // namespace
}  // namespace multihead
