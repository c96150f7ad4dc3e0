// SPDX-License-Identifier: Apache-2.0
// bf16 products on AMX tiles for the fused attention kernel's small products.
//
// Attention multiplies thin operands: a query block (Br, D) against a head's
// keys (S, D), with D = 32 or 64. oneDNN's matmul re-lays its right-hand
// operand into the tile layout on every call and configures its tiles each
// time, which at these sizes costs more than the products themselves. Here
// the right-hand operand is laid out once per head (`pack`,
// `pack_transposed`), every query block multiplies against it, and one
// product is a run of TDPBF16PS instructions over 16 x 16 fp32 tiles: bf16
// operands, fp32 accumulation, as oneDNN's AMX kernels compute (inputs and
// results below fp32's normal range flush to zero).
//
// Used only where bf16_path() is kAmx (the CPU has AMX and oneDNN is not held
// below it) and Linux granted the process its tile state; gemm_bf16 is the
// fallback and the reference the tests compare against.
#pragma once

#include <cstdint>

#include "multihead/core/tensor.h"

namespace multihead::amx {

// Whether the products below may run in this process: fixed when first
// asked. MULTIHEAD_AMX_TILES=off in the environment sends the attention
// kernel's products to oneDNN's matmul instead, the path the tests compare
// against on a CPU with AMX (tests/CMakeLists.txt).
bool usable();

// A packed right-hand operand B (K, N): tiles of 32 x 16 values (1 KiB),
// column block by column block, each column block's tiles along K; values
// pairwise interleaved along K (row r of a tile holds B[2r][c], B[2r+1][c] for
// c = 0..15). K is padded to a multiple of 32 and N to one of 16 with zeros.
std::int64_t packed_size(std::int64_t K, std::int64_t N);  // in BF16 values

// B = src (K rows, N columns, row stride ld): values, rows pairwise interleaved.
void pack(BF16* dst, const BF16* src, std::int64_t ld, std::int64_t K, std::int64_t N);
// B = src^T for src (N rows, K columns, row stride ld): the keys of a head
// as the right-hand side of Q K^T.
void pack_transposed(BF16* dst, const BF16* src, std::int64_t ld, std::int64_t N, std::int64_t K);

// Rows k and k + 1 (k even) of B (K, N) into a packing of B, from fp32
// rows (null: zeros) rounded to bf16 as the units round (VCVTNE2PS2BF16: to
// nearest even, inputs below fp32's normal range as zero), zeros past N.
// Called for each row pair while the rows are in L1, it packs an operand as
// it is produced.
void pack_row_pair(BF16* packed, std::int64_t K, std::int64_t N, std::int64_t k, const float* row0, const float* row1);
// Zeros in rows [k, K rounded up to 32) of a packing of B (K, N), k even:
// the padding the products read.
void zero_rows_from(BF16* packed, std::int64_t K, std::int64_t N, std::int64_t k);

// The part of a packing of B (K_total, N) that starts at row k0 (a multiple
// of 32) and column n0 (a multiple of 16), and the values between its column
// blocks: what gemm takes as B.
struct PackedPart {
  const BF16* at;
  std::int64_t block_stride;
};
PackedPart part(const BF16* packed, std::int64_t K_total, std::int64_t k0, std::int64_t n0);

// C (M, N) = alpha * A (M, K) B, or C += A B with accumulate (alpha 1); A
// row-major with row stride lda, B a packed part; C row stride ldc.
void gemm(float* C, std::int64_t ldc, const BF16* A, std::int64_t lda, PackedPart B, std::int64_t M, std::int64_t N,
          std::int64_t K, float alpha, bool accumulate);

}  // namespace multihead::amx
