// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/transformer_layers.h"

#include <algorithm>

#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/linear.h"
#include "multihead/kernels/transpose.h"
#include "multihead/nn/basic_layers.h"

namespace multihead {

namespace {
// Fewer rows than this take the feed-forward block's second fp32 product
// with W2 as it is (x W2^T) instead of transposing W2 first. The
// transposition pays only over many rows: oneDNN's x Wt ran 5-8% faster than
// x W^T at 4096 rows (d 256, F 1024: 8.6 against 9.3 ms) and level at 1024 or
// fewer, and transposing a W2 that comes cold from memory cost a quarter of
// the language model's forward over a 128-token prompt (2 Xeon cores: 5.0
// against 3.85 ms without it).
constexpr std::int64_t kTransposeW2Rows = 2048;
}  // namespace

MultiheadAttentionConfig TransformerLayerConfig::attention() const {
  MultiheadAttentionConfig c;
  c.embed_dim = d_model;
  c.num_heads = nhead;
  c.dropout = dropout;
  c.positions = positions;
  c.rope_theta = rope_theta;
  c.relative_clip = relative_clip;
  c.relative_values = relative_values;
  static_cast<AttentionPattern&>(c) = pattern;
  return c;
}

void TransformerLayerConfig::validate() const {
  check_keys(*this);
  check<ConfigError>(nhead > 0 && nhead <= d_model, "nhead must be in [1, d_model], got {}", nhead);
  check<ConfigError>(d_model % nhead == 0, "d_model ({}) must be divisible by nhead ({})", d_model, nhead);
}

namespace {

MultiheadAttentionCall attention_call(const TransformerLayerConfig& cfg, const AttentionMaskArgs& m,
                                      const ForwardContext& ctx, std::uint32_t site) {
  MultiheadAttentionCall c;
  c.need_weights = false;
  c.causal = m.causal;
  c.training = ctx.training;
  c.dropout_seed = ctx.seed;
  c.dropout_stream = ctx.stream(site);
  c.impl = cfg.attention_impl;
  c.precision = ctx.precision;
  return c;
}

const TransformerLayerConfig& validated(const TransformerLayerConfig& cfg) {
  cfg.validate();
  return cfg;
}

}  // namespace

FeedForward::FeedForward(ParamStore& store, const std::string& prefix, const TransformerLayerConfig& cfg)
    : store_(&store),
      act_(cfg.activation),
      linear1_(store, prefix + "linear1.", cfg.d_model, cfg.dim_feedforward),
      linear2_(store, prefix + "linear2.", cfg.dim_feedforward, cfg.d_model),
      dropout_(store, cfg.dropout) {}

void FeedForward::init(Rng& rng) {
  linear1_.init(rng);
  linear2_.init(rng);
}

void FeedForward::release_saved() {
  x_.clear();
  pre_ = Tensor();
  hid_ = Tensor();
}

namespace {

// Rows per block: about 1 MiB of fp32 hidden activations per buffer, at
// least 64 rows. Each block's weight gradients are products over its rows
// added into the (d, F) fp32 gradients, which are read and written once per
// block, and oneDNN lays the weights out for its kernels on every call: once
// a weight passes 1 MiB, blocks take at least 512 rows (up to 4 MiB per
// buffer). Measured on the encoder benchmark (d 256): at F = 2048, 128-row
// blocks ran the GEMMs about 15% slower in bf16 and 7% in fp32 than 512;
// 1024 and 2048 rows gained nothing more; at F = 1024, 256 and 1024 rows
// ran alike (docs/BENCHMARKS.md).
std::int64_t ff_block_rows(std::int64_t d, std::int64_t F) {
  const std::int64_t rows = std::max<std::int64_t>(64, (std::int64_t{1} << 18) / F);
  if (d * F <= (std::int64_t{1} << 18)) return rows;
  return std::max(rows, std::clamp<std::int64_t>((std::int64_t{1} << 20) / F, 64, 512));
}

// Rows [r0, r0 + n) of a (N, w) stored tensor as fp32: in place for F32,
// else widened into buf.
template <typename T>
const float* block_f32(const Tensor& t, std::int64_t r0, std::int64_t n, std::int64_t w, float* buf) {
  std::int64_t ld = 0;
  return rows_as_f32(t.data<T>() + r0 * w, w, n, w, buf, ld);
}

// The feed-forward weights in bf16, when the activations are stored in bf16
// and the CPU computes in it (bf16_path()): the store's copy where it is
// frozen (ParamStore::bf16), else rounded once per pass, so each block's
// products read them as they are. Inactive otherwise.
class BF16Weights {
 public:
  BF16Weights(DType storage, const ParamStore& store, ParamStore::Handle h1, ParamStore::Handle h2, std::int64_t d,
              std::int64_t F) {
    if (!computes_in_bf16(storage)) return;
    w1p_ = store.bf16(h1), w2p_ = store.bf16(h2);
    if (w1p_ != nullptr) return;
    w1_ = bf16_weights(store.data(h1), F, d);  // (F, d)
    w2_ = bf16_weights(store.data(h2), d, F);  // (d, F)
    w1p_ = w1_.data<BF16>(), w2p_ = w2_.data<BF16>();
  }
  bool active() const { return w1p_ != nullptr; }
  const BF16* w1() const { return w1p_; }
  const BF16* w2() const { return w2p_; }

 private:
  Tensor w1_, w2_;
  const BF16 *w1p_ = nullptr, *w2p_ = nullptr;
};

}  // namespace

Tensor FeedForward::forward(const Tensor& x, const ForwardContext& ctx) {
  const std::int64_t d = linear1_.in(), F = linear1_.out();
  check<ShapeError>(x.ndim() >= 1 && x.dim(-1) == d, "feed-forward input has shape {}, expected (..., {})",
                    shape_text(x.shape()), d);
  const std::int64_t N = x.numel() / d, rows = ff_block_rows(d, F);
  const DType st = storage_dtype(ctx.precision);
  const DropoutSpec& drop = dropout_.begin(ctx);
  x_.save(x, st);
  // relu's backward reads hid (relu_dropout_backward): pre is kept for gelu only.
  const bool keep_pre = act_ != Activation::kRelu;
  pre_ = keep_pre ? Tensor::empty({N, F}, st) : Tensor();
  hid_ = Tensor::empty({N, F}, st);
  Tensor y = Tensor::empty(x.shape());
  const float* w2 = store_->data(linear2_.weight());
  const BF16Weights wb(st, *store_, linear1_.weight(), linear2_.weight(), d, F);
  // fp32 products: W2 transposed once, (F, d), for every block's second
  // product; but a few rows (a token at a time, in decoding) take the product
  // with W2 as it is, where the transposition would cost more than it.
  Tensor w2t;
  const bool int8 = store_->int8(linear1_.weight()) != nullptr;  // a store frozen for int8 inference
  const bool transposed = !wb.active() && !int8 && N >= kTransposeW2Rows;
  if (transposed) {
    w2t = Tensor::empty({F, d});
    transpose(w2t.f32(), d, w2, F, d, F);
  }
  visit_float_storage(st, [&](auto tag) {
    using T = decltype(tag);
    constexpr bool kHalf = !std::is_same_v<T, float>;
    // fp32 blocks: pre, unless it is kept in fp32; hid in 16-bit storage
    // without bf16 products.
    const bool pre_in_buf = kHalf || !keep_pre, hid_in_buf = kHalf && !wb.active();
    const std::int64_t blocks = (pre_in_buf ? 1 : 0) + (hid_in_buf ? 1 : 0);
    Tensor buf = blocks > 0 ? Tensor::empty({blocks, std::min(rows, N), F}) : Tensor();
    for (std::int64_t r0 = 0; r0 < N; r0 += rows) {
      const std::int64_t n = std::min(rows, N - r0);
      float* pre = pre_in_buf ? buf.f32() : pre_.f32() + r0 * F;  // (n, F)
      // The bias joins the activation and dropout in one pass over the block.
      const std::uint64_t base = static_cast<std::uint64_t>(r0 * F);  // of the block in the dropout stream
      if (wb.active()) {
        // pre and hid go to memory in bf16 only; the next product reads hid_ itself.
        linear_forward_bf16(pre, F, x_.stored().data<BF16>() + r0 * d, d, wb.w1(), nullptr, n, d, F);
        bias_activation_dropout_stored(act_, hid_.data<BF16>() + r0 * F,
                                       keep_pre ? pre_.data<BF16>() + r0 * F : nullptr, pre, linear1_.bias_data(), n, F,
                                       drop, base);
        linear_forward_bf16(y.f32() + r0 * d, d, hid_.data<BF16>() + r0 * F, F, wb.w2(), linear2_.bias_data(), n, F, d);
      } else {
        float* hid = hid_in_buf ? buf.f32() + (pre_in_buf ? n * F : 0) : hid_.f32() + r0 * F;  // (n, F)
        linear_forward_param<float>(pre, F, x.f32() + r0 * d, d, *store_, linear1_.weight(), 0, nullptr, n, d, F);
        if constexpr (kHalf) {
          // Stored rounded, and hid rounded in the buffer too, so forward goes on
          // with exactly what backward will read.
          bias_activation_dropout_stored(act_, hid_.data<T>() + r0 * F, keep_pre ? pre_.data<T>() + r0 * F : nullptr,
                                         pre, linear1_.bias_data(), n, F, drop, base, hid);
        } else {
          bias_activation_dropout(act_, hid, pre, linear1_.bias_data(), n, F, drop, base);
        }
        if (transposed) linear_forward_t(y.f32() + r0 * d, d, hid, F, w2t.f32(), linear2_.bias_data(), n, F, d);
        else
          linear_forward_param<float>(y.f32() + r0 * d, d, hid, F, *store_, linear2_.weight(), 0, linear2_.bias_data(),
                                      n, F, d);
      }
    }
  });
  return y;
}

Tensor FeedForward::backward(const Tensor& dy) {
  check(x_.defined(), "FeedForward::backward called without a preceding forward");
  const std::int64_t d = linear1_.in(), F = linear1_.out(), N = hid_.dim(0), rows = ff_block_rows(d, F);
  expect_shape(dy, x_.stored().shape(), "feed-forward gradient");
  const DropoutSpec& drop = dropout_.spec();
  Tensor dx = Tensor::empty(dy.shape());
  const float *w1 = store_->data(linear1_.weight()), *w2 = store_->data(linear2_.weight());
  float *gw1 = store_->grad(linear1_.weight()), *gw2 = store_->grad(linear2_.weight());
  const BF16Weights wb(hid_.dtype(), *store_, linear1_.weight(), linear2_.weight(), d, F);
  const bool relu = act_ == Activation::kRelu;
  visit_float_storage(hid_.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr bool kHalf = !std::is_same_v<T, float>;
    const std::int64_t nb = std::min(rows, N);
    Tensor dh = Tensor::empty({nb, F});                                                // gradient of hid, then of pre
    Tensor buf = kHalf && !wb.active() ? Tensor::empty({nb * F + nb * d}) : Tensor();  // hid then pre, and x blocks
    Tensor dpre = wb.active() ? Tensor::empty({nb, F}, DType::kBF16) : Tensor();       // gradient of pre, rounded
    for (std::int64_t r0 = 0; r0 < N; r0 += rows) {
      const std::int64_t n = std::min(rows, N - r0);
      const float* dyr = dy.f32() + r0 * d;
      const std::uint64_t base = static_cast<std::uint64_t>(r0 * F);
      if (wb.active()) {
        // dh goes through dropout and the activation and is rounded for the products in one pass.
        linear_backward_bf16(dh.f32(), F, false, gw2, linear2_.bias_grad(), dyr, d, hid_.data<BF16>() + r0 * F, F,
                             wb.w2(), n, F, d);
        const BF16* saved = relu ? hid_.data<BF16>() + r0 * F : pre_.data<BF16>() + r0 * F;
        activation_dropout_backward_bf16(act_, dpre.data<BF16>(), dh.f32(), saved, linear1_.bias_grad(), n, F, drop,
                                         base);
        linear_backward_bf16_rounded(dx.f32() + r0 * d, d, false, gw1, dpre.data<BF16>(),
                                     x_.stored().data<BF16>() + r0 * d, d, wb.w1(), n, d, F);
      } else {
        const float* hid = block_f32<T>(hid_, r0, n, F, kHalf ? buf.f32() : nullptr);
        linear_backward(dh.f32(), F, false, gw2, linear2_.bias_grad(), dyr, d, hid, F, w2, n, F, d);
        if (relu) {
          relu_dropout_backward(dh.f32(), dh.f32(), hid, n * F, drop);
        } else {
          if (drop.active()) dropout_inplace(dh.f32(), n * F, base, drop);
          const float* pre = block_f32<T>(pre_, r0, n, F, kHalf ? buf.f32() : nullptr);  // hid is read by now
          activation_backward(act_, dh.f32(), dh.f32(), pre, n * F);
        }
        const float* xr = block_f32<T>(x_.stored(), r0, n, d, kHalf ? buf.f32() + nb * F : nullptr);
        linear_backward(dx.f32() + r0 * d, d, false, gw1, linear1_.bias_grad(), dh.f32(), F, xr, d, w1, n, d, F);
      }
    }
  });
  release_saved();  // backward consumes what forward saved
  return dx;
}

TransformerEncoderLayer::TransformerEncoderLayer(ParamStore& store, const std::string& prefix,
                                                 const TransformerLayerConfig& cfg)
    : cfg_(validated(cfg)),
      self_attn_(store, prefix + "self_attn.", cfg.attention()),
      ff_(store, prefix, cfg),
      norm1_(store, prefix + "norm1.", cfg.d_model, cfg.layer_norm_eps),
      norm2_(store, prefix + "norm2.", cfg.d_model, cfg.layer_norm_eps),
      dropout1_(store, cfg.dropout),
      dropout2_(store, cfg.dropout),
      attn_site_(store.new_random_site()) {}

void TransformerEncoderLayer::init(Rng& rng) {
  self_attn_.init(rng);
  ff_.init(rng);
  norm1_.init(rng);
  norm2_.init(rng);
}

void TransformerEncoderLayer::release_saved() {
  self_attn_.release_saved();
  ff_.release_saved();
  norm1_.release_saved();
  norm2_.release_saved();
  n1_ = Tensor(), h1_ = Tensor(), y1_ = Tensor(), n2_ = Tensor(), h2_ = Tensor();
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const AttentionMaskArgs& m, const ForwardContext& ctx) {
  MultiheadAttentionCall call = attention_call(cfg_, m, ctx, attn_site_);
  call.need_weights = capture_;
  call.average_attn_weights = false;
  auto attend = [&](const Tensor& in) {
    MultiheadAttentionOutput o = self_attn_.forward_self(in, m.key_padding_mask, m.attn_mask, call);
    if (capture_) weights_ = std::move(o.weights);
    return std::move(o.output);
  };
  // Each residual step (dropout, add, norm) runs as one pass: in fp32 h1_
  // and h2_ become the sums the norms read in backward.
  if (!cfg_.norm_first) {
    h1_ = attend(x);
    y1_ = norm1_.forward_residual(h1_, x, dropout1_.begin(ctx), ctx.precision, false);
    h2_ = ff_.forward(y1_, ctx);
    Tensor out = norm2_.forward_residual(h2_, y1_, dropout2_.begin(ctx), ctx.precision, false);
    release_saved(ctx);
    return out;
  }
  n1_ = norm1_.forward(x, ctx.precision);
  h1_ = attend(n1_);
  n2_ = norm2_.forward_residual(h1_, x, dropout1_.begin(ctx), ctx.precision, true);  // h1_ = x + dropout(sa)
  Tensor out = ff_.forward(n2_, ctx);
  dropout2_.forward_inplace(out, ctx);
  add_inplace(out, h1_);
  release_saved(ctx);
  return out;
}

// In bf16 / fp16 every sub-module keeps its own 16-bit copy of what it reads
// in backward, so the layer's fp32 activations can go now.
void TransformerEncoderLayer::release_saved(const ForwardContext& ctx) {
  if (ctx.precision != Precision::kF32) n1_ = Tensor(), h1_ = Tensor(), y1_ = Tensor(), n2_ = Tensor(), h2_ = Tensor();
}

Tensor TransformerEncoderLayer::forward_cached(const Tensor& x, KvCache& cache, std::int64_t capacity, Precision p) {
  const ForwardContext eval = eval_context(p);
  if (!cfg_.norm_first) {
    Tensor h1 = self_attn_.forward_cached(x, cache, capacity, p);
    add_inplace(h1, x);
    Tensor y1 = norm1_.forward(h1);
    Tensor h2 = ff_.forward(y1, eval);
    add_inplace(h2, y1);
    Tensor out = norm2_.forward(h2);
    release_saved();
    return out;
  }
  Tensor n1 = norm1_.forward(x);
  Tensor h1 = self_attn_.forward_cached(n1, cache, capacity, p);
  add_inplace(h1, x);
  Tensor n2 = norm2_.forward(h1);
  Tensor out = ff_.forward(n2, eval);
  add_inplace(out, h1);
  release_saved();
  return out;
}

Tensor TransformerEncoderLayer::residual_gradient(const Tensor& dy) const {
  if (cfg_.norm_first) return dy.clone();
  return norm1_.input_gradient(norm2_.input_gradient(dy));
}

Tensor TransformerEncoderLayer::attention_input_gradient(const Tensor& g) const {
  return cfg_.norm_first ? norm1_.input_gradient(g) : g.clone();
}

// Backward consumes the saved activations: each sub-module frees its own as
// it finishes, and gradients are dropped as soon as they are summed, so the
// peak stays near what forward kept.
Tensor TransformerEncoderLayer::backward(const Tensor& dy) {
  Tensor scratch;
  Tensor dx;
  if (!cfg_.norm_first) {
    // y1 feeds the feed-forward block and the residual: their gradients
    // are summed as norm1's backward reads them.
    LayerNorm::ResidualGrads g2 = norm2_.backward_residual(dy, nullptr, nullptr, dropout2_.spec());
    Tensor dy1 = ff_.backward(g2.s());
    g2.dropped = Tensor();
    LayerNorm::ResidualGrads g1 = norm1_.backward_residual(dy1, &g2.h, nullptr, dropout1_.spec());
    dy1 = Tensor(), g2.h = Tensor();
    dx = self_attn_.backward(g1.s()).query;
    add_inplace(dx, g1.h);
  } else {
    // h1 feeds norm2 and the residual: dy joins norm2's gradient of h1.
    LayerNorm::ResidualGrads g1 =
        norm2_.backward_residual(ff_.backward(dropout2_.backward(dy, scratch)), nullptr, &dy, dropout1_.spec());
    scratch = Tensor();
    Tensor da = self_attn_.backward(g1.s()).query;
    dx = norm1_.backward(da);
    da = Tensor();
    add_inplace(dx, g1.h);
  }
  release_saved();
  return dx;
}

TransformerDecoderLayer::TransformerDecoderLayer(ParamStore& store, const std::string& prefix,
                                                 const TransformerLayerConfig& cfg)
    : cfg_(validated(cfg)),
      self_attn_(store, prefix + "self_attn.", cfg.attention()),
      multihead_attn_(store, prefix + "multihead_attn.",
                      [&] {
                        MultiheadAttentionConfig c = cfg.attention();
                        c.positions = AttentionPositions::kNone;  // positions order self-attention, not the memory
                        c.variant = AttentionVariant::kFull;      // and so do the sparse patterns
                        return c;
                      }()),
      ff_(store, prefix, cfg),
      norm1_(store, prefix + "norm1.", cfg.d_model, cfg.layer_norm_eps),
      norm2_(store, prefix + "norm2.", cfg.d_model, cfg.layer_norm_eps),
      norm3_(store, prefix + "norm3.", cfg.d_model, cfg.layer_norm_eps),
      dropout1_(store, cfg.dropout),
      dropout2_(store, cfg.dropout),
      dropout3_(store, cfg.dropout),
      self_site_(store.new_random_site()),
      cross_site_(store.new_random_site()) {}

void TransformerDecoderLayer::init(Rng& rng) {
  self_attn_.init(rng);
  multihead_attn_.init(rng);
  ff_.init(rng);
  norm1_.init(rng);
  norm2_.init(rng);
  norm3_.init(rng);
}

void TransformerDecoderLayer::release_saved() {
  self_attn_.release_saved();
  multihead_attn_.release_saved();
  ff_.release_saved();
  norm1_.release_saved();
  norm2_.release_saved();
  norm3_.release_saved();
  n1_ = Tensor(), h1_ = Tensor(), y1_ = Tensor(), n2_ = Tensor(), h2_ = Tensor(), y2_ = Tensor(), n3_ = Tensor(),
  h3_ = Tensor();
}

Tensor TransformerDecoderLayer::forward(const Tensor& x, const Tensor& memory, const AttentionMaskArgs& sm,
                                        const AttentionMaskArgs& mm, const ForwardContext& ctx) {
  const MultiheadAttentionCall self_call = attention_call(cfg_, sm, ctx, self_site_);
  const MultiheadAttentionCall cross_call = attention_call(cfg_, mm, ctx, cross_site_);
  // As in the encoder layer, each residual step runs as one pass.
  if (!cfg_.norm_first) {
    h1_ = self_attn_.forward_self(x, sm.key_padding_mask, sm.attn_mask, self_call).output;
    y1_ = norm1_.forward_residual(h1_, x, dropout1_.begin(ctx), ctx.precision, false);
    h2_ = multihead_attn_.forward(y1_, memory, memory, mm.key_padding_mask, mm.attn_mask, cross_call).output;
    y2_ = norm2_.forward_residual(h2_, y1_, dropout2_.begin(ctx), ctx.precision, false);
    h3_ = ff_.forward(y2_, ctx);
    Tensor out = norm3_.forward_residual(h3_, y2_, dropout3_.begin(ctx), ctx.precision, false);
    release_saved(ctx);
    return out;
  }
  n1_ = norm1_.forward(x, ctx.precision);
  h1_ = self_attn_.forward_self(n1_, sm.key_padding_mask, sm.attn_mask, self_call).output;
  n2_ = norm2_.forward_residual(h1_, x, dropout1_.begin(ctx), ctx.precision, true);  // h1_ = x + dropout(sa)
  h2_ = multihead_attn_.forward(n2_, memory, memory, mm.key_padding_mask, mm.attn_mask, cross_call).output;
  n3_ = norm3_.forward_residual(h2_, h1_, dropout2_.begin(ctx), ctx.precision, true);  // h2_ = h1_ + dropout(ca)
  Tensor out = ff_.forward(n3_, ctx);
  dropout3_.forward_inplace(out, ctx);
  add_inplace(out, h2_);
  release_saved(ctx);
  return out;
}

Tensor TransformerDecoderLayer::forward_cached(const Tensor& x, KvCache& self_cache, const KvCache& memory,
                                               const Tensor* memory_padding, std::int64_t capacity, Precision p) {
  const ForwardContext eval = eval_context(p);
  auto self = [&](const Tensor& q) {
    return self_attn_.forward_cached(q, self_cache, capacity, p, capture_ ? &self_weights_ : nullptr);
  };
  auto cross = [&](const Tensor& q) {
    return multihead_attn_.forward_memory(q, memory, memory_padding, capture_ ? &weights_ : nullptr);
  };
  if (!cfg_.norm_first) {
    Tensor h1 = self(x);
    add_inplace(h1, x);
    Tensor y1 = norm1_.forward(h1);
    Tensor h2 = cross(y1);
    add_inplace(h2, y1);
    Tensor y2 = norm2_.forward(h2);
    Tensor h3 = ff_.forward(y2, eval);
    add_inplace(h3, y2);
    Tensor out = norm3_.forward(h3);
    release_saved();
    return out;
  }
  Tensor n1 = norm1_.forward(x);
  Tensor h1 = self(n1);
  add_inplace(h1, x);
  Tensor n2 = norm2_.forward(h1);
  Tensor h2 = cross(n2);
  add_inplace(h2, h1);
  Tensor n3 = norm3_.forward(h2);
  Tensor out = ff_.forward(n3, eval);
  add_inplace(out, h2);
  release_saved();
  return out;
}

void TransformerDecoderLayer::release_saved(const ForwardContext& ctx) {
  if (ctx.precision != Precision::kF32)
    n1_ = Tensor(), h1_ = Tensor(), y1_ = Tensor(), n2_ = Tensor(), h2_ = Tensor(), y2_ = Tensor(), n3_ = Tensor(),
    h3_ = Tensor();
}

TransformerDecoderLayer::Grads TransformerDecoderLayer::backward(const Tensor& dy) {
  Tensor scratch;
  Grads g;
  // The memory feeds both key and value of the cross-attention.
  auto cross_backward = [&](const Tensor& d_out) {
    MultiheadAttentionGrads c = multihead_attn_.backward(d_out);
    g.memory = std::move(c.key);
    add_inplace(g.memory, c.value);
    return std::move(c.query);
  };
  if (!cfg_.norm_first) {
    LayerNorm::ResidualGrads g3 = norm3_.backward_residual(dy, nullptr, nullptr, dropout3_.spec());
    Tensor dy2 = ff_.backward(g3.s());
    g3.dropped = Tensor();
    LayerNorm::ResidualGrads g2 = norm2_.backward_residual(dy2, &g3.h, nullptr, dropout2_.spec());
    dy2 = Tensor(), g3.h = Tensor();
    Tensor dy1 = cross_backward(g2.s());
    g2.dropped = Tensor();
    LayerNorm::ResidualGrads g1 = norm1_.backward_residual(dy1, &g2.h, nullptr, dropout1_.spec());
    dy1 = Tensor(), g2.h = Tensor();
    g.x = self_attn_.backward(g1.s()).query;
    add_inplace(g.x, g1.h);
    return g;
  }
  LayerNorm::ResidualGrads g2 =
      norm3_.backward_residual(ff_.backward(dropout3_.backward(dy, scratch)), nullptr, &dy, dropout2_.spec());
  scratch = Tensor();
  LayerNorm::ResidualGrads g1 = norm2_.backward_residual(cross_backward(g2.s()), nullptr, &g2.h, dropout1_.spec());
  g2 = LayerNorm::ResidualGrads{};
  g.x = norm1_.backward(self_attn_.backward(g1.s()).query);
  add_inplace(g.x, g1.h);
  return g;
}

}  // namespace multihead
