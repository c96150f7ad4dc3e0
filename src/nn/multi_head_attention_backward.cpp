// SPDX-License-Identifier: Apache-2.0
// MultiheadAttention's backward pass: the output projection, the attention
// kernels' backward, and the input projections, in the reverse order of forward.
#include "multihead/nn/multi_head_attention.h"

#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/linear.h"
#include "multihead/kernels/positions.h"
#include "multihead/nn/attention_kernel.h"

namespace multihead {

namespace {

// Gradients of grouped key/value heads: the kernels write one gradient per
// query head into full (B, S, H*D); each stored head gets its group's sum.
void sum_groups(HeadsView<float> dst, const Tensor& full, std::int64_t B, std::int64_t S, std::int64_t kv_heads,
                std::int64_t group, std::int64_t D) {
  const std::int64_t E = kv_heads * group * D;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s) {
      const float* src = full.f32() + (b * S + s) * E;
      float* out = dst.ptr + b * dst.batch_stride + s * dst.row_stride;
      for (std::int64_t kh = 0; kh < kv_heads; ++kh)
        for (std::int64_t e = 0; e < D; ++e) {
          float acc = 0.0f;
          for (std::int64_t g = 0; g < group; ++g) acc += src[(kh * group + g) * D + e];
          out[kh * D + e] = acc;
        }
    }
}

}  // namespace

Tensor MultiheadAttention::out_proj_backward(const Tensor& grad_output) {
  const Saved& c = saved_;
  const std::int64_t E = cfg_.embed_dim, N = c.dims.B * c.dims.L;
  // d_attn (B*L, E) = dY W_o; dW_o += dY^T attn.
  Tensor d_attn = Tensor::empty({c.dims.B, c.dims.L, E});
  visit_float_storage(c.store, [&](auto tag) {
    using T = decltype(tag);
    linear_backward_stored<T>(d_attn.f32(), E, false, store_->grad(out_proj_weight_),
                              cfg_.bias ? store_->grad(out_proj_bias_) : nullptr, grad_output.f32(), E,
                              c.attn.data<T>(), E, store_->data(out_proj_weight_), N, E, E);
  });
  zero_masked_heads(d_attn, c.dims.Dv);
  return d_attn;
}

MultiheadAttention::ProjectionGrads MultiheadAttention::attend_backward(Tensor d_attn) {
  Saved& c = saved_;
  const AttentionDims& d = c.dims;
  const std::int64_t E = cfg_.embed_dim, B = d.B, L = d.L, S = c.S_in, KE = cfg_.kv_dim(), PW = E + 2 * KE;
  const std::int64_t group = cfg_.group();
  ProjectionGrads g;
  HeadsView<float> dq_view, dk_view, dv_view;
  if (c.self) {
    g.qkv = Tensor::empty({B, L, PW});
    dq_view = {g.qkv.f32(), L * PW, PW, d.D};
    dk_view = {g.qkv.f32() + E, L * PW, PW, d.D};
    dv_view = {g.qkv.f32() + E + KE, L * PW, PW, d.Dv};
  } else {
    g.q = Tensor::empty({B, L, E});
    g.k = Tensor::empty({B, S, KE});
    g.v = Tensor::empty({B, S, KE});
    dq_view = {g.q.f32(), L * E, E, d.D};
    dk_view = {g.k.f32(), S * KE, KE, d.D};
    dv_view = {g.v.f32(), S * KE, KE, d.Dv};
  }
  // With extra positions the kernel writes (B, S', KE) gradients, split afterwards.
  const bool extended = c.k_ext.defined();
  const HeadsView<float> dk_target = dk_view, dv_target = dv_view;
  Tensor dk_ext, dv_ext;
  if (extended) {
    dk_ext = Tensor::empty({B, d.S, KE});
    dv_ext = Tensor::empty({B, d.S, KE});
    dk_view = {dk_ext.f32(), d.S * KE, KE, d.D};
    dv_view = {dv_ext.f32(), d.S * KE, KE, d.Dv};
  }
  // Grouped heads: per-query-head gradients first, summed afterwards.
  HeadsView<float> dk_kernel = dk_view, dv_kernel = dv_view;
  Tensor dk_full, dv_full;
  if (group > 1) {
    dk_full = Tensor::empty({B, d.S, E});
    dv_full = Tensor::empty({B, d.S, E});
    dk_kernel = {dk_full.f32(), d.S * E, E, d.D};
    dv_kernel = {dv_full.f32(), d.S * E, E, d.Dv};
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const HeadsView<const float> dout_view{d_attn.f32(), L * E, E, d.Dv};
  if (cfg_.variant == AttentionVariant::kLinear) {
    LinearAttentionArgs<float> la;
    la.key_padding = c.terms.masks.key_padding_bool;
    la.causal = c.terms.masks.causal != CausalAlign::kNone;
    linear_attention_backward<float>(dq_view, dk_kernel, dv_kernel, dout_view, q_view<float>(), k_view<float>(),
                                     v_view<float>(), d, la);
  } else {
    // The relative-position embeddings' gradients, added by the kernel.
    RelativePositionGrads<float> d_relative;
    if (cfg_.positions == AttentionPositions::kRelative) {
      d_relative.d_rel_k = store_->grad(relative_key_);
      if (relative_value_ != kNone) d_relative.d_rel_v = store_->grad(relative_value_);
    }
    if (c.impl == AttentionImpl::kFused)
      visit_float_storage(c.store, [&](auto tag) {
        using T = decltype(tag);
        attention_stored_backward<T>(dq_view, dk_kernel, dv_kernel, c.lse.f32(), {c.attn.data<T>(), L * E, E, d.Dv},
                                     dout_view, q_view<T>(), k_view<T>(), v_view<T>(), c.terms, d, scale, c.dropout,
                                     c.tiles, d_relative);
      });
    else
      attention_ref_backward<float>(dq_view, dk_kernel, dv_kernel, c.probs.f32(), dout_view, q_view<float>(),
                                    k_view<float>(), v_view<float>(), c.terms, d, scale, c.dropout, d_relative);
  }
  // Backward runs once per forward: what only the kernel read can go now.
  d_attn = Tensor();
  c.attn = Tensor(), c.probs = Tensor(), c.keep_bits = Tensor();
  c.dropout.keep_bits = nullptr;
  if (group > 1) {
    sum_groups(dk_view, dk_full, B, d.S, cfg_.kv_heads(), group, d.D);
    sum_groups(dv_view, dv_full, B, d.S, cfg_.kv_heads(), group, d.Dv);
    dk_full = Tensor(), dv_full = Tensor();
  }
  if (extended) {
    // The first S positions belong to the projected key/value; position S is
    // bias_k/bias_v when add_bias_kv; the zero position has no parameter.
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t s = 0; s < S; ++s) {
        std::memcpy(dk_target.ptr + b * dk_target.batch_stride + s * dk_target.row_stride,
                    dk_ext.f32() + (b * d.S + s) * KE, sizeof(float) * KE);
        std::memcpy(dv_target.ptr + b * dv_target.batch_stride + s * dv_target.row_stride,
                    dv_ext.f32() + (b * d.S + s) * KE, sizeof(float) * KE);
      }
      if (cfg_.add_bias_kv) {
        float* gk = store_->grad(bias_k_);
        float* gv = store_->grad(bias_v_);
        const float* sk = dk_ext.f32() + (b * d.S + S) * KE;
        const float* sv = dv_ext.f32() + (b * d.S + S) * KE;
        for (std::int64_t e = 0; e < KE; ++e) gk[e] += sk[e], gv[e] += sv[e];
      }
    }
  }
  // Through the rotation: its gradient is the inverse rotation.
  if (cfg_.positions == AttentionPositions::kRope) {
    const HeadsView<float> dq_h =
        c.self ? HeadsView<float>{g.qkv.f32(), L * PW, PW, d.D} : HeadsView<float>{g.q.f32(), L * E, E, d.D};
    rotate(dq_h, dk_target, S, true);
  }
  return g;
}

MultiheadAttentionGrads MultiheadAttention::in_proj_backward(const ProjectionGrads& dp) {
  Saved& c = saved_;
  const std::int64_t E = cfg_.embed_dim, B = c.dims.B, L = c.dims.L, S = c.S_in, KE = cfg_.kv_dim();
  const std::int64_t PW = E + 2 * KE;
  MultiheadAttentionGrads g;
  float* gb_in = cfg_.bias ? store_->grad(in_proj_bias_) : nullptr;
  const std::int64_t row0[3] = {0, E, E + KE};
  auto gbias_part = [&](int i) { return gb_in ? gb_in + row0[i] : nullptr; };
  c.qkv = Tensor(), c.q = Tensor(), c.k = Tensor(), c.v = Tensor(), c.k_ext = Tensor(), c.v_ext = Tensor();
  // dx = dY W, dW += dY^T x, with x as saved (fp32 or 16-bit).
  auto project_back = [&](Tensor& dx, const SavedTensor& x, const float* dy, std::int64_t lddy, const float* w,
                          float* gw, float* gb, std::int64_t N, std::int64_t in, std::int64_t out) {
    const Tensor& xs = x.stored();
    visit_float_storage(xs.dtype(), [&](auto tag) {
      using T = decltype(tag);
      linear_backward_stored<T>(dx.f32(), in, false, gw, gb, dy, lddy, xs.template data<T>(), in, w, N, in, out);
    });
  };
  if (c.self) {
    g.query = Tensor::empty({B, L, E});
    project_back(g.query, c.query, dp.qkv.f32(), PW, store_->data(in_proj_weight_), store_->grad(in_proj_weight_),
                 gb_in, B * L, E, PW);
    return g;
  }
  const SavedTensor& value = c.value.defined() ? c.value : c.key;
  const bool packed = cfg_.packed_in_proj();
  const std::int64_t kd = cfg_.key_dim(), vd = cfg_.value_dim();
  float* w[3] = {packed ? store_->data(in_proj_weight_) : store_->data(q_proj_weight_),
                 packed ? store_->data(in_proj_weight_) + E * E : store_->data(k_proj_weight_),
                 packed ? store_->data(in_proj_weight_) + (E + KE) * E : store_->data(v_proj_weight_)};
  float* gw[3] = {packed ? store_->grad(in_proj_weight_) : store_->grad(q_proj_weight_),
                  packed ? store_->grad(in_proj_weight_) + E * E : store_->grad(k_proj_weight_),
                  packed ? store_->grad(in_proj_weight_) + (E + KE) * E : store_->grad(v_proj_weight_)};
  g.query = Tensor::empty({B, L, E});
  g.key = Tensor::empty({B, S, kd});
  g.value = Tensor::empty({B, S, vd});
  project_back(g.query, c.query, dp.q.f32(), E, w[0], gw[0], gbias_part(0), B * L, E, E);
  project_back(g.key, c.key, dp.k.f32(), KE, w[1], gw[1], gbias_part(1), B * S, kd, KE);
  project_back(g.value, value, dp.v.f32(), KE, w[2], gw[2], gbias_part(2), B * S, vd, KE);
  return g;
}

Tensor MultiheadAttention::head_shares(const ProjectionGrads& dp) const {
  const Saved& c = saved_;
  check<ConfigError>(c.self && cfg_.group() == 1,
                     "the heads' shares of the input gradient need self-attention with a key/value head per head");
  const std::int64_t E = cfg_.embed_dim, H = cfg_.num_heads, D = c.dims.D, N = c.dims.B * c.dims.L, PW = 3 * E;
  Tensor shares = Tensor::empty({H, c.dims.B, c.dims.L, E});
  const float* w = store_->data(in_proj_weight_);  // (3E, E): the q, k, v rows
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t part = 0; part < 3; ++part) {
      // shares[h] (N, E) += dqkv[:, part E + h D : + D] (N, D) W[part E + h D : + D, :] (D, E)
      const std::int64_t first = part * E + h * D;
      gemm(Trans::kNo, Trans::kNo, N, E, D, 1.0f, dp.qkv.f32() + first, PW, w + first * E, E, part ? 1.0f : 0.0f,
           shares.f32() + h * N * E, E);
    }
  return shares;
}

MultiheadAttentionGrads MultiheadAttention::backward(const Tensor& grad_output) {
  Saved& c = saved_;
  check(c.valid, "MultiheadAttention::backward called without a preceding forward");
  c.valid = false;  // backward consumes the cache
  expect_shape(grad_output, {c.dims.B, c.dims.L, cfg_.embed_dim}, "grad_output");
  const ProjectionGrads dp = attend_backward(out_proj_backward(grad_output));
  if (observer_ != nullptr && observer_->wants_head_shares()) observer_->head_shares(*this, head_shares(dp));
  return in_proj_backward(dp);
}

}  // namespace multihead
