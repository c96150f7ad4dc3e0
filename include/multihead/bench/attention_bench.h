// SPDX-License-Identifier: Apache-2.0
// Benchmarks of the self-attention layer and of the attention kernel alone,
// as `multihead bench attention` runs them. Timing is the median of repeated
// iterations; memory is the allocator's peak and the resident-set growth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "multihead/nn/multi_head_attention.h"

namespace multihead {

struct AttentionBenchConfig {
  std::int64_t batch = 8, seq_len = 512, embed_dim = 512, num_heads = 8;
  bool backward = false;  // time forward + backward
  bool causal = false;
  bool need_weights = false;
  int warmup = 2;
  int iters = 10;
  AttentionImpl impl = AttentionImpl::kFused;
  AttentionTiles tiles;
  AttentionVariant variant = AttentionVariant::kFull;
  std::int64_t window = 256;              // sliding window: keys on each side
  std::int64_t block_size = 64;           // block-sparse: positions per block, one neighbour on each side
  std::int64_t num_kv_heads = 0;          // 0: num_heads
  Precision precision = Precision::kF32;  // of Q, K, V, O and the saved activations (fused kernel)
  AttentionPositions positions = AttentionPositions::kNone;  // relative (Shaw), alibi or rope
  std::int64_t relative_clip = 16;
};

struct AttentionBenchResult {
  // Whole MultiheadAttention layer (projections included).
  double ms = 0;      // median per iteration
  double flops = 0;   // per iteration, formula in flop_formula
  double gflops = 0;  // flops / median time
  // The attention kernel alone on the same shape (no projections).
  double attention_ms = 0;
  double attention_flops = 0;
  double attention_gflops = 0;
  std::int64_t peak_bytes = 0;             // allocator peak during one iteration, everything live included
  std::int64_t peak_activation_bytes = 0;  // the same above what was live before it (weights, input)
  std::int64_t peak_rss_delta_bytes = -1;  // resident-set growth during one iteration; -1 if unmeasured
  int threads = 0;
  std::string flop_formula;
  std::vector<double> samples_ms;
};

AttentionBenchResult run_attention_bench(const AttentionBenchConfig& cfg);

struct GemmBenchResult {
  double ms = 0;
  double gflops = 0;
  int threads = 0;
};

// C (M, N) = A (M, K) B (K, N) through the same products the library uses:
// the fp32 GEMM backend; in bf16, bf16 A and B with an fp32 C (gemm_bf16:
// the CPU's bf16 units where it has them, bf16_path()); in int8, fp32 A by
// B quantized per column as a layer's weight (linear_forward_int8: A
// quantized at each call, the product in int8, C rescaled to fp32). fp16
// has no product of its own (a ConfigError).
GemmBenchResult run_gemm_bench(std::int64_t M, std::int64_t N, std::int64_t K, int iters,
                               Precision precision = Precision::kF32);

}  // namespace multihead
