// Incremental decoding through MultiheadAttention: the KV cache (or, for
// linear attention, the recurrent state) and the attention of new positions
// over it.
#include <cmath>
#include <cstring>

#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/linear.h"
#include "multihead/kernels/positions.h"
#include "multihead/nn/multi_head_attention.h"

namespace multihead {

Tensor MultiheadAttention::forward_cached(const Tensor& x, KvCache& cache, std::int64_t capacity, Precision p) {
  const std::int64_t E = cfg_.embed_dim, H = cfg_.num_heads, D = cfg_.head_dim(), KE = cfg_.kv_dim();
  const std::int64_t PW = E + 2 * KE, KH = cfg_.kv_heads(), group = cfg_.group();
  check<ShapeError>(x.ndim() == 3 && x.dim(2) == E, "input has shape {}, expected (B, T, {})", shape_str(x.shape()), E);
  check<ConfigError>(cfg_.packed_in_proj() && !cfg_.add_bias_kv && !cfg_.add_zero_attn,
                     "cached decoding supports plain self-attention only");
  const std::int64_t B = x.dim(0), T = x.dim(1), past = cache.length;

  // Linear attention keeps its recurrent state in fp32.
  const DType st = cfg_.variant == AttentionVariant::kLinear ? DType::kF32 : storage_dtype(p);
  Tensor qkv = Tensor::empty({B, T, PW});
  const float* b_in = cfg_.bias ? store_->data(in_proj_bias_) : nullptr;
  // As forward(): in bf16 the projection multiplies the rounded input.
  if (computes_in_bf16(st))
    linear_forward_stored<BF16>(qkv.f32(), PW, narrow_tensor(x, st).data<BF16>(), E, store_->data(in_proj_weight_),
                                b_in, B * T, E, PW);
  else linear_forward(qkv.f32(), PW, x.f32(), E, store_->data(in_proj_weight_), b_in, B * T, E, PW);
  if (cfg_.positions == AttentionPositions::kRope) {
    rope_rotate(HeadsView<float>{qkv.f32(), T * PW, PW, D}, B, T, H, D, past, cfg_.rope_theta, false);
    rope_rotate(HeadsView<float>{qkv.f32() + E, T * PW, PW, D}, B, T, KH, D, past, cfg_.rope_theta, false);
  }
  Tensor attn = Tensor::empty({B, T, E}, st);
  if (cfg_.variant == AttentionVariant::kLinear) {
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
    AttentionMasks<float> masks;
    masks.causal = CausalAlign::kBottomRight;
    masks.query_offset = past;
    add_pattern(masks);
    if (cfg_.positions == AttentionPositions::kAlibi) masks.alibi_slopes = alibi_slopes_.data();
    if (cfg_.positions == AttentionPositions::kRelative) {
      masks.relative.rel_k = store_->data(relative_key_);
      masks.relative.rel_v = relative_value_ != kNone ? store_->data(relative_value_) : nullptr;
      masks.relative.clip = cfg_.relative_clip;
    }
    Tensor lse = Tensor::empty({B, H, T});
    visit_float_storage(st, [&](auto tag) {
      using S = decltype(tag);
      attention_fused_forward<S>({attn.data<S>(), T * E, E, D}, lse.f32(), {qkv.data<S>(), T * PW, PW, D},
                                 {cache.k.data<S>(), cap * KE, KE, D, group},
                                 {cache.v.data<S>(), cap * KE, KE, D, group}, masks, d,
                                 1.0f / std::sqrt(static_cast<float>(D)), {});
    });
  }
  Tensor out = Tensor::empty({B, T, E});
  visit_float_storage(st, [&](auto tag) {
    using S = decltype(tag);
    linear_forward_stored<S>(out.f32(), E, attn.data<S>(), E, store_->data(out_proj_weight_),
                             cfg_.bias ? store_->data(out_proj_bias_) : nullptr, B * T, E, E);
  });
  return out;
}

}  // namespace multihead
