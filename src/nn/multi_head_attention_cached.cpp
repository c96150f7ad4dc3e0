// SPDX-License-Identifier: Apache-2.0
// Incremental decoding through MultiheadAttention: the KV cache (or, for
// linear attention, the recurrent state) and the attention of new positions
// over it; and cross-attention over a memory projected once.
#include <cmath>
#include <cstring>

#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/linear.h"
#include "multihead/kernels/positions.h"
#include "multihead/nn/attention_kernel.h"
#include "multihead/nn/basic_layers.h"
#include "multihead/nn/multi_head_attention.h"

namespace multihead {

Tensor MultiheadAttention::forward_cached(const Tensor& x, KvCache& cache, std::int64_t capacity, Precision p,
                                          Tensor* weights) {
  const std::int64_t E = cfg_.embed_dim, H = cfg_.num_heads, D = cfg_.head_dim(), KE = cfg_.kv_dim();
  const std::int64_t PW = E + 2 * KE, KH = cfg_.kv_heads(), group = cfg_.group();
  check<ShapeError>(x.ndim() == 3 && x.dim(2) == E, "input has shape {}, expected (B, T, {})", shape_text(x.shape()),
                    E);
  check<ConfigError>(cfg_.packed_in_proj() && !cfg_.add_bias_kv && !cfg_.add_zero_attn,
                     "cached decoding supports plain self-attention only");
  const std::int64_t B = x.dim(0), T = x.dim(1), past = cache.length;

  // Linear attention keeps its recurrent state in fp32.
  const DType st = cfg_.variant == AttentionVariant::kLinear ? DType::kF32 : storage_dtype(p);
  Tensor qkv = project_packed(x, 0, PW, st);
  if (cfg_.positions == AttentionPositions::kRope) {
    const float* pairs = rope_.rows(past, T, D, cfg_.rope_theta);  // the queries' and the keys' positions
    rope_rotate(HeadsView<float>{qkv.f32(), T * PW, PW, D}, B, T, H, D, pairs, false);
    rope_rotate(HeadsView<float>{qkv.f32() + E, T * PW, PW, D}, B, T, KH, D, pairs, false);
  }
  Tensor attn = Tensor::empty({B, T, E}, st);
  if (cfg_.variant == AttentionVariant::kLinear) {
    check<ConfigError>(!weights, "linear attention has no attention weights to capture");
    // The recurrent form: a (D, D) state per (batch, head) instead of keys and values.
    if (cache.linear.empty()) cache.linear.resize(static_cast<std::size_t>(B * H));
    check<ShapeError>(static_cast<std::int64_t>(cache.linear.size()) == B * H, "cache holds another batch size");
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h) {
          const float* row = qkv.f32() + (b * T + t) * PW;
          linear_attention_step<float>(cache.linear[static_cast<std::size_t>(b * H + h)],
                                       attn.f32() + (b * T + t) * E + h * D, row + h * D, row + E + (h / group) * D,
                                       row + E + KE + (h / group) * D, D, D, 1e-6f);
        }
    cache.length = past + T;
  } else {
    if (!cache.k.defined()) {
      cache.k = Tensor::empty({B, capacity, KE}, st);
      cache.v = Tensor::empty({B, capacity, KE}, st);
    }
    const std::int64_t cap = cache.k.dim(1);
    check<ShapeError>(cache.k.dim(0) == B, "cache holds batch {}, input has batch {}", cache.k.dim(0), B);
    check<ShapeError>(past + T <= cap, "cache of {} positions cannot take {} more after {}", cap, T, past);
    check<ConfigError>(cache.k.dtype() == st, "cache holds {} keys, this call stores {}", dtype_name(cache.k.dtype()),
                       dtype_name(st));
    qkv = narrow_tensor(qkv, st);  // queries, keys and values as stored
    const std::size_t row_bytes = dtype_size(st) * static_cast<std::size_t>(KE);
    const char* src = static_cast<const char*>(qkv.raw());
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        const char* row = src + (b * T + t) * PW * static_cast<std::int64_t>(dtype_size(st));
        std::memcpy(static_cast<char*>(cache.k.raw()) + (b * cap + past + t) * static_cast<std::int64_t>(row_bytes),
                    row + E * static_cast<std::int64_t>(dtype_size(st)), row_bytes);
        std::memcpy(static_cast<char*>(cache.v.raw()) + (b * cap + past + t) * static_cast<std::int64_t>(row_bytes),
                    row + (E + KE) * static_cast<std::int64_t>(dtype_size(st)), row_bytes);
      }
    cache.length = past + T;
    // New query t sits at position past + t: bottom-right causal alignment.
    const AttentionDims d{B, H, T, cache.length, D, D};
    ScoreTerms<float> terms;
    terms.masks.causal = CausalAlign::kBottomRight;
    add_pattern(terms.masks);
    terms.positions = score_positions(past);
    Tensor lse = Tensor::empty({B, H, T});
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    visit_float_storage(st, [&](auto tag) {
      using S = decltype(tag);
      const HeadsView<const S> qv{qkv.data<S>(), T * PW, PW, D}, kv{cache.k.data<S>(), cap * KE, KE, D, group};
      attention_stored_forward<S>({attn.data<S>(), T * E, E, D}, lse.f32(), qv, kv,
                                  {cache.v.data<S>(), cap * KE, KE, D, group}, terms, d, scale, {});
      if (weights) {
        *weights = Tensor::empty({B, H, T, cache.length});
        attention_fused_weights<S>(weights->f32(), false, lse.f32(), qv, kv, terms, d, scale, {});
      }
    });
  }
  return project_output(attn);
}

Tensor MultiheadAttention::project_packed(const Tensor& x, std::int64_t first, std::int64_t count, DType st) const {
  const std::int64_t E = cfg_.embed_dim, N = x.numel() / E;
  Shape shape = x.shape();
  shape.back() = count;
  Tensor y = Tensor::empty(shape);
  const float* b = cfg_.bias ? store_->data(in_proj_bias_) + first : nullptr;
  // As forward(): in bf16 the projection multiplies the rounded input.
  if (computes_in_bf16(st))
    linear_forward_param<BF16>(y.f32(), count, narrow_tensor(x, st).data<BF16>(), E, *store_, in_proj_weight_, first, b,
                               N, E, count);
  else linear_forward_param<float>(y.f32(), count, x.f32(), E, *store_, in_proj_weight_, first, b, N, E, count);
  return y;
}

Tensor MultiheadAttention::project_output(const Tensor& attn) const {
  const std::int64_t E = cfg_.embed_dim;
  Shape shape = attn.shape();
  Tensor out = Tensor::empty(shape);
  visit_float_storage(attn.dtype(), [&](auto tag) {
    using S = decltype(tag);
    linear_forward_param<S>(out.f32(), E, attn.data<S>(), E, *store_, out_proj_weight_, 0,
                            cfg_.bias ? store_->data(out_proj_bias_) : nullptr, attn.numel() / E, E, E);
  });
  return out;
}

void MultiheadAttention::cache_memory(const Tensor& memory, KvCache& cache, Precision p) const {
  const std::int64_t E = cfg_.embed_dim, KE = cfg_.kv_dim();
  check<ShapeError>(memory.ndim() == 3 && memory.dim(2) == E, "memory has shape {}, expected (B, S, {})",
                    shape_text(memory.shape()), E);
  check<ConfigError>(cfg_.packed_in_proj() && !cfg_.add_bias_kv && !cfg_.add_zero_attn &&
                         cfg_.positions == AttentionPositions::kNone && cfg_.variant == AttentionVariant::kFull,
                     "cached cross-attention supports plain full attention only");
  const DType st = storage_dtype(p);
  const std::int64_t B = memory.dim(0), S = memory.dim(1);
  const Tensor kv = narrow_tensor(project_packed(memory, E, 2 * KE, st), st);  // (B, S, 2 KE)
  cache = KvCache{};
  cache.k = Tensor::empty({B, S, KE}, st);
  cache.v = Tensor::empty({B, S, KE}, st);
  // Row r of kv holds position r's key, then its value.
  const std::size_t row = dtype_size(st) * static_cast<std::size_t>(KE);
  const char* src = static_cast<const char*>(kv.raw());
  char* k = static_cast<char*>(cache.k.raw());
  char* v = static_cast<char*>(cache.v.raw());
  for (std::size_t r = 0; r < static_cast<std::size_t>(B * S); ++r) {
    std::memcpy(k + r * row, src + 2 * r * row, row);
    std::memcpy(v + r * row, src + (2 * r + 1) * row, row);
  }
  cache.length = S;
}

Tensor MultiheadAttention::forward_memory(const Tensor& x, const KvCache& memory, const Tensor* key_padding_mask,
                                          Tensor* weights) {
  const std::int64_t E = cfg_.embed_dim, H = cfg_.num_heads, D = cfg_.head_dim(), KE = cfg_.kv_dim();
  check<ShapeError>(x.ndim() == 3 && x.dim(2) == E, "input has shape {}, expected (B, T, {})", shape_text(x.shape()),
                    E);
  check<ShapeError>(memory.k.defined() && memory.k.dim(0) == x.dim(0),
                    "the memory cache holds batch {}, the input has batch {}", memory.k.defined() ? memory.k.dim(0) : 0,
                    x.dim(0));
  const DType st = memory.k.dtype();
  const std::int64_t B = x.dim(0), T = x.dim(1), S = memory.length;
  const Tensor q = narrow_tensor(project_packed(x, 0, E, st), st);  // (B, T, E)
  const AttentionMasks<float> masks = input_masks(key_padding_mask, nullptr, CausalAlign::kNone, B, T, S);
  const AttentionDims d{B, H, T, S, D, D};
  Tensor attn = Tensor::empty({B, T, E}, st);
  Tensor lse = Tensor::empty({B, H, T});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  visit_float_storage(st, [&](auto tag) {
    using V = decltype(tag);
    const HeadsView<const V> qv{q.data<V>(), T * E, E, D}, kv{memory.k.data<V>(), S * KE, KE, D, cfg_.group()};
    attention_stored_forward<V>({attn.data<V>(), T * E, E, D}, lse.f32(), qv, kv,
                                {memory.v.data<V>(), S * KE, KE, D, cfg_.group()}, masks, d, scale, {});
    if (weights) {
      *weights = Tensor::empty({B, H, T, S});
      attention_fused_weights<V>(weights->f32(), false, lse.f32(), qv, kv, masks, d, scale, {});
    }
  });
  return project_output(attn);
}

}  // namespace multihead
