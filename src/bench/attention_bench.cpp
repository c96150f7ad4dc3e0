// SPDX-License-Identifier: Apache-2.0
#include "multihead/bench/attention_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "multihead/core/allocator.h"
#include "multihead/core/process_memory.h"
#include "multihead/core/threading.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/gemm_int8.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/linear_attention.h"
#include "multihead/kernels/positions.h"
#include "multihead/nn/attention_kernel.h"
#include "timing.h"

namespace multihead {

using bench::median;
using bench::time_ms;

AttentionBenchResult run_attention_bench(const AttentionBenchConfig& cfg) {
  check<ConfigError>(cfg.batch > 0 && cfg.seq_len > 0, "batch and seq-len must be positive");
  check<ConfigError>(cfg.iters > 0 && cfg.warmup >= 0, "iters must be positive and warmup non-negative");
  MultiheadAttentionConfig mc;
  mc.embed_dim = cfg.embed_dim;
  mc.num_heads = cfg.num_heads;
  mc.variant = cfg.variant;
  mc.window_left = mc.window_right = cfg.window;
  mc.sparse_block = cfg.block_size;
  mc.sparse_neighbours = 1;
  mc.num_kv_heads = cfg.num_kv_heads;
  mc.positions = cfg.positions;
  mc.relative_clip = cfg.relative_clip;
  ParamStore store;
  MultiheadAttention mha(store, "", mc);
  store.finalize();
  Rng rng(0);
  mha.init(rng);
  const std::int64_t B = cfg.batch, L = cfg.seq_len, E = cfg.embed_dim, H = cfg.num_heads, D = E / H;
  Tensor x({B, L, E});
  for (float& v : x.span_f32()) v = rng.normal();
  Tensor grad({B, L, E});
  for (float& v : grad.span_f32()) v = rng.normal();
  MultiheadAttentionCall call;
  call.need_weights = cfg.need_weights;
  call.causal = cfg.causal ? CausalAlign::kTopLeft : CausalAlign::kNone;
  call.impl = cfg.impl;
  call.tiles = cfg.tiles;
  call.precision = cfg.precision;
  auto layer_iter = [&] {
    MultiheadAttentionOutput out = mha.forward_self(x, nullptr, nullptr, call);
    if (cfg.backward) mha.backward(grad);
    mha.release_saved();
  };

  AttentionBenchResult r;
  r.threads = num_threads();
  // Memory: one iteration, measured by the allocator and by the resident set.
  const std::int64_t base = memory_stats().current_bytes;
  {
    const PeakMeter memory;
    const bool rss_ok = reset_peak_rss();
    const std::int64_t rss0 = current_rss_bytes();
    layer_iter();
    if (rss_ok && rss0 >= 0) r.peak_rss_delta_bytes = peak_rss_bytes() - rss0;
    r.peak_bytes = memory.peak_bytes();
  }
  r.peak_activation_bytes = r.peak_bytes - base;

  r.samples_ms = time_ms(cfg.warmup, cfg.iters, layer_iter);
  r.ms = median(r.samples_ms);

  // FLOPs of the matrix products: in-projection 2*B*L*E*3E, out-projection
  // 2*B*L*E*E, attention 4*B*H*L*S*D (S = L; halved when causal). Backward
  // counts twice forward, as for any matmul; the fused backward's extra
  // recomputation of Q K^T is work we do, not work credited.
  const double proj = 2.0 * B * L * E * 4 * E;
  // Attention FLOPs: 4*B*H*L*S*D for full attention (halved when causal);
  // for the sparse variants, the same over the keys each query attends to on
  // average; for linear attention 4*B*H*L*D*D (the state products).
  double keys = cfg.causal ? 0.5 * static_cast<double>(L) : static_cast<double>(L);
  if (cfg.variant == AttentionVariant::kSlidingWindow)
    keys = std::min<double>(keys, static_cast<double>(cfg.causal ? cfg.window + 1 : 2 * cfg.window + 1));
  if (cfg.variant == AttentionVariant::kBlockSparse)
    keys = std::min<double>(keys, static_cast<double>(3 * cfg.block_size) * (cfg.causal ? 0.5 : 1.0));
  if (cfg.variant == AttentionVariant::kLinear) keys = static_cast<double>(D);
  const double attn = 4.0 * B * H * L * keys * D;
  const double mult = cfg.backward ? 3.0 : 1.0;
  r.flops = mult * (proj + attn);
  r.attention_flops = mult * attn;
  r.gflops = r.flops / (r.ms * 1e6);
  r.flop_formula =
      fmt::format("{}(2*B*L*E*4E + 4*B*H*L*keys*D), keys = {:.0f} per query", cfg.backward ? "3 * " : "", keys);

  // The attention kernel alone, on the same q, k, v layout as inside the layer
  // (grouped key/value heads as the layer stores them; their gradients per
  // query head, before the layer sums them).
  const std::int64_t KE = mc.kv_dim(), PW = E + 2 * KE, G = mc.group();
  Tensor qkv({B, L, PW}), o({B, L, E}), dq({B, L, 3 * E});
  for (float& v : qkv.span_f32()) v = rng.normal();
  Tensor lse({B, H, L});
  Tensor probs = cfg.impl == AttentionImpl::kReference ? Tensor({B, H, L, L}) : Tensor();
  AttentionDims d{B, H, L, L, D, D};
  ScoreTerms<float> terms;
  AttentionMasks<float>& masks = terms.masks;
  masks.causal = call.causal;
  if (cfg.variant == AttentionVariant::kSlidingWindow) masks.window_left = masks.window_right = cfg.window;
  // Position terms the kernel itself adds (rotary positions turn q and k
  // before it, in the layer).
  const std::int64_t nb = 2 * cfg.relative_clip + 1;
  Tensor rel = cfg.positions == AttentionPositions::kRelative ? Tensor({4, nb, D}) : Tensor();
  if (rel.defined()) {
    for (float& v : rel.span_f32()) v = 0.1f * rng.normal();
    terms.positions.relative.rel_k = rel.f32(), terms.positions.relative.rel_v = rel.f32() + nb * D;
    terms.positions.relative.clip = cfg.relative_clip;
  }
  const RelativePositionGrads<float> d_relative =
      rel.defined() ? RelativePositionGrads<float>{rel.f32() + 2 * nb * D, rel.f32() + 3 * nb * D}
                    : RelativePositionGrads<float>{};
  const std::vector<float> slopes = alibi_slopes(H);
  if (cfg.positions == AttentionPositions::kAlibi) terms.positions.alibi_slopes = slopes.data();
  AttentionTiles tiles = cfg.tiles;
  if (cfg.variant == AttentionVariant::kBlockSparse) {
    masks.sparse_block = cfg.block_size, masks.sparse_neighbours = 1;
    tiles.q_block = tiles.k_block = cfg.block_size;  // as the layer does
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const HeadsView<const float> qv{qkv.f32(), L * PW, PW, D}, kv{qkv.f32() + E, L * PW, PW, D, G},
      vv{qkv.f32() + E + KE, L * PW, PW, D, G}, ov{o.f32(), L * E, E, D}, gv{grad.f32(), L * E, E, D};
  const HeadsView<float> ow{o.f32(), L * E, E, D}, dqw{dq.f32(), L * 3 * E, 3 * E, D},
      dkw{dq.f32() + E, L * 3 * E, 3 * E, D}, dvw{dq.f32() + 2 * E, L * 3 * E, 3 * E, D};
  LinearAttentionArgs<float> la;
  la.causal = cfg.causal;
  // With 16-bit storage the fused kernel reads Q, K, V and O in 16 bits, as in the layer.
  const DType st = cfg.impl == AttentionImpl::kFused && cfg.variant != AttentionVariant::kLinear
                       ? storage_dtype(cfg.precision)
                       : DType::kF32;
  Tensor qkv16 = st == DType::kF32 ? Tensor() : narrow_tensor(qkv, st);
  Tensor o16 = st == DType::kF32 ? Tensor() : narrow_tensor(o, st);
  auto kernel_iter = [&] {
    if (cfg.variant == AttentionVariant::kLinear) {
      linear_attention_forward<float>(ow, qv, kv, vv, d, la);
      if (cfg.backward) linear_attention_backward<float>(dqw, dkw, dvw, gv, qv, kv, vv, d, la);
    } else if (cfg.impl == AttentionImpl::kFused && st == DType::kF32) {
      attention_fused_forward(ow, lse.f32(), qv, kv, vv, terms, d, scale, {}, tiles);
      if (cfg.backward)
        attention_fused_backward(dqw, dkw, dvw, lse.f32(), ov, gv, qv, kv, vv, terms, d, scale, {}, tiles, d_relative);
    } else if (cfg.impl == AttentionImpl::kFused) {
      visit_float_storage(st, [&](auto tag) {
        using T = decltype(tag);
        const T* p = qkv16.data<T>();
        const HeadsView<const T> q16{p, L * PW, PW, D}, k16{p + E, L * PW, PW, D, G}, v16{p + E + KE, L * PW, PW, D, G};
        // The kernel the layer runs for this storage (bf16 products where the CPU has them).
        attention_stored_forward<T>({o16.data<T>(), L * E, E, D}, lse.f32(), q16, k16, v16, terms, d, scale, {}, tiles);
        if (cfg.backward)
          attention_stored_backward<T>(dqw, dkw, dvw, lse.f32(), {o16.data<T>(), L * E, E, D}, gv, q16, k16, v16, terms,
                                       d, scale, {}, tiles, d_relative);
      });
    } else {
      attention_ref_forward<float>(ow, probs.f32(), qv, kv, vv, terms, d, scale, {});
      if (cfg.backward)
        attention_ref_backward<float>(dqw, dkw, dvw, probs.f32(), gv, qv, kv, vv, terms, d, scale, {}, d_relative);
    }
  };
  r.attention_ms = median(time_ms(cfg.warmup, cfg.iters, kernel_iter));
  r.attention_gflops = r.attention_flops / (r.attention_ms * 1e6);
  return r;
}

GemmBenchResult run_gemm_bench(std::int64_t M, std::int64_t N, std::int64_t K, int iters, Precision precision) {
  check<ConfigError>(M > 0 && N > 0 && K > 0 && iters > 0, "gemm sizes and iters must be positive");
  check<ConfigError>(precision != Precision::kF16,
                     "bench gemm: --precision must be fp32, bf16 or int8 (fp16 has no "
                     "product of its own: it computes in fp32), got fp16");
  const bool bf16 = precision == Precision::kBF16;
  Tensor a({M, K}), b({K, N}), c({M, N});
  Rng rng(0);
  for (float& v : a.span_f32()) v = rng.normal();
  for (float& v : b.span_f32()) v = rng.normal();
  GemmBenchResult r;
  r.threads = num_threads();
  if (bf16) {
    Tensor a16({M, K}, DType::kBF16), b16({K, N}, DType::kBF16);
    to_bf16(a16.data<BF16>(), a.f32(), M * K);
    to_bf16(b16.data<BF16>(), b.f32(), K * N);
    r.ms = median(time_ms(2, iters, [&] {
      gemm_bf16(Trans::kNo, Trans::kNo, M, N, K, 1.0f, a16.data<BF16>(), K, b16.data<BF16>(), N, 0.0f, c.f32(), N);
    }));
  } else if (precision == Precision::kInt8) {
    // b read as a layer's weight (N, K): the same numbers, a product of the same size.
    std::vector<std::int8_t> q(static_cast<std::size_t>(N * K));
    std::vector<float> scale(static_cast<std::size_t>(N));
    std::vector<std::int32_t> row_sum(static_cast<std::size_t>(N));
    quantize_weight_rows(b.f32(), N, K, q.data(), scale.data(), row_sum.data());
    // With packs, as a frozen store's weights: copies in the kernels' layout made once.
    const std::shared_ptr<Int8Packs> packs = make_int8_packs();
    const Int8Weight w{q.data(), scale.data(), row_sum.data(), packs.get()};
    r.ms = median(time_ms(2, iters, [&] { linear_forward_int8(c.f32(), N, a.f32(), K, w, nullptr, M, K, N); }));
  } else {
    r.ms = median(time_ms(
        2, iters, [&] { gemm(Trans::kNo, Trans::kNo, M, N, K, 1.0f, a.f32(), K, b.f32(), N, 0.0f, c.f32(), N); }));
  }
  r.gflops = 2.0 * M * N * K / (r.ms * 1e6);
  return r;
}

}  // namespace multihead
