// SPDX-License-Identifier: Apache-2.0
// Matrix products of bf16 operands with fp32 accumulation and an fp32
// result, the products mixed precision runs in bf16 mode:
//
//   C (M, N) = alpha * op(A) op(B) + beta * C,   A and B bf16, C fp32.
//
// They run on oneDNN's matmul, which picks the CPU's bf16 matrix units at run
// time: AMX tiles (avx512_core_amx) or AVX512-BF16 dot products
// (avx512_core_bf16). One primitive is created per shape and kept, so a
// training step pays creation once. Without such units oneDNN would emulate
// bf16 at under half the fp32 speed, so there the products widen to fp32
// instead (Bf16Path::kWiden); ONEDNN_MAX_CPU_ISA, read when oneDNN starts,
// pins the lower paths for tests.
#pragma once

#include <cstdint>

#include "multihead/core/tensor.h"
#include "multihead/kernels/gemm.h"

namespace multihead {

enum class Bf16Path : std::uint8_t {
  kAmx,         // oneDNN on AMX tiles
  kAvx512Bf16,  // oneDNN on AVX512-BF16 dot products
  kWiden,       // operands widened to fp32, fp32 GEMM
};

// The path gemm_bf16 takes in this process: the CPU's, as oneDNN dispatches,
// fixed when first asked. ONEDNN_MAX_CPU_ISA lowers it, which is how the
// tests run the other paths (tests/CMakeLists.txt).
Bf16Path bf16_path();
// "amx", "avx512_bf16" or "fp32 (widened)".
const char* bf16_path_name(Bf16Path p);

// Whether activations stored as `storage` are multiplied in bf16 here: BF16
// storage on a CPU whose bf16 path is not kWiden.
inline bool computes_in_bf16(DType storage) { return storage == DType::kBF16 && bf16_path() != Bf16Path::kWiden; }

// op(A): (M, K), op(B): (K, N), C: (M, N); lda/ldb/ldc are row strides, as gemm().
void gemm_bf16(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const BF16* A,
               std::int64_t lda, const BF16* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);

// C (M, N) = op(A) op(B) + bias on every row (bias: N values, or null for
// none): the bias added by the product itself, one pass over C where seeding
// C first takes two.
void gemm_bf16_bias(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, const BF16* A, std::int64_t lda,
                    const BF16* B, std::int64_t ldb, const float* bias, float* C, std::int64_t ldc);

// The same with a bf16 C, each value rounded to nearest even as the product
// writes it (bias may be null): where the fp32 result would only be
// narrowed, half the bytes written and no second pass. The bits of the fp32
// product then narrow (compared in tests), except that a result in bf16's
// subnormal range (below 1.2e-38) may come out as zero.
void gemm_bf16_bias(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, const BF16* A, std::int64_t lda,
                    const BF16* B, std::int64_t ldb, const float* bias, BF16* C, std::int64_t ldc);

// The reference twin: every product and sum in double, in order.
void gemm_bf16_ref(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const BF16* A,
                   std::int64_t lda, const BF16* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc);

// Rounds n fp32 values to bf16, sharing large arrays between the threads
// (gradients of a few million values are converted each step).
void to_bf16(BF16* dst, const float* src, std::int64_t n);

// Rounds n fp32 values that only bf16 products will read (operands made for
// gemm_bf16 and nothing else). On bf16 units the CPU's own conversion does
// it, 16 values an instruction (VCVTNEPS2BF16: to nearest even as narrow(),
// but an input below fp32's normal range becomes zero): the units take such
// operands as zero anyway, so the products see the same values either way.
// Where the products widen to fp32, narrow() keeps them.
void round_operand(BF16* dst, const float* src, std::int64_t n);
// The same, with sums[j] += src[j] in the one pass (as narrow_adding).
void round_operand_adding(BF16* dst, float* sums, const float* src, std::int64_t n);

}  // namespace multihead
