// SPDX-License-Identifier: Apache-2.0
#include "multihead/nn/multi_head_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_ref.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/half.h"
#include "multihead/kernels/linear.h"
#include "multihead/kernels/positions.h"
#include "multihead/nn/attention_kernel.h"
#include "multihead/nn/basic_layers.h"
#include "multihead/nn/init.h"

namespace multihead {

MultiheadAttention::MultiheadAttention(ParamStore& store, const std::string& prefix,
                                       const MultiheadAttentionConfig& cfg)
    : cfg_(cfg), store_(&store) {
  cfg_.validate();
  const std::int64_t E = cfg_.embed_dim, KE = cfg_.kv_dim();
  // With grouped-query attention the key and value rows are KE wide, not E.
  if (cfg_.packed_in_proj()) {
    in_proj_weight_ = store.add(prefix + "in_proj_weight", {E + 2 * KE, E});
  } else {
    q_proj_weight_ = store.add(prefix + "q_proj_weight", {E, E});
    k_proj_weight_ = store.add(prefix + "k_proj_weight", {KE, cfg_.key_dim()});
    v_proj_weight_ = store.add(prefix + "v_proj_weight", {KE, cfg_.value_dim()});
  }
  if (cfg_.bias) in_proj_bias_ = store.add(prefix + "in_proj_bias", {E + 2 * KE});
  out_proj_weight_ = store.add(prefix + "out_proj.weight", {E, E});
  if (cfg_.bias) out_proj_bias_ = store.add(prefix + "out_proj.bias", {E});
  if (cfg_.add_bias_kv) {
    bias_k_ = store.add(prefix + "bias_k", {1, 1, KE});
    bias_v_ = store.add(prefix + "bias_v", {1, 1, KE});
  }
  if (cfg_.positions == AttentionPositions::kRelative) {
    const std::int64_t nb = 2 * cfg_.relative_clip + 1;
    relative_key_ = store.add(prefix + "relative_key", {nb, cfg_.head_dim()});
    if (cfg_.relative_values) relative_value_ = store.add(prefix + "relative_value", {nb, cfg_.head_dim()});
  }
  if (cfg_.positions == AttentionPositions::kAlibi) alibi_slopes_ = alibi_slopes(cfg_.num_heads);
}

void MultiheadAttention::init(Rng& rng) {
  const std::int64_t E = cfg_.embed_dim, KE = cfg_.kv_dim();
  if (cfg_.packed_in_proj()) {
    // PyTorch initialises the (3E, E) matrix as one: fan_in E, fan_out 3E.
    xavier_uniform(store_->data_span(in_proj_weight_), E, E + 2 * KE, rng);
  } else {
    xavier_uniform(store_->data_span(q_proj_weight_), E, E, rng);
    xavier_uniform(store_->data_span(k_proj_weight_), cfg_.key_dim(), KE, rng);
    xavier_uniform(store_->data_span(v_proj_weight_), cfg_.value_dim(), KE, rng);
  }
  linear_default_uniform(store_->data_span(out_proj_weight_), E, rng);
  if (cfg_.bias) {
    std::ranges::fill(store_->data_span(in_proj_bias_), 0.0f);
    std::ranges::fill(store_->data_span(out_proj_bias_), 0.0f);
  }
  if (cfg_.add_bias_kv) {
    // A (1, 1, E) tensor has fan_in = fan_out = E for torch.nn.init.
    xavier_normal(store_->data_span(bias_k_), KE, KE, rng);
    xavier_normal(store_->data_span(bias_v_), KE, KE, rng);
  }
  if (relative_key_ != kNone) {
    const std::int64_t nb = 2 * cfg_.relative_clip + 1, D = cfg_.head_dim();
    xavier_uniform(store_->data_span(relative_key_), D, nb, rng);
    if (relative_value_ != kNone) xavier_uniform(store_->data_span(relative_value_), D, nb, rng);
  }
}

void MultiheadAttention::rotate(HeadsView<float> q, HeadsView<float> k, std::int64_t S, bool inverse) const {
  const auto& d = saved_.dims;
  rope_rotate(q, d.B, d.L, d.H, d.D, rope_.rows(saved_.query_offset, d.L, d.D, cfg_.rope_theta), inverse);
  rope_rotate(k, d.B, S, cfg_.kv_heads(), d.D, rope_.rows(0, S, d.D, cfg_.rope_theta), inverse);
}

void MultiheadAttention::add_pattern(AttentionMasks<float>& m) const {
  if (cfg_.variant == AttentionVariant::kSlidingWindow) {
    m.window_left = cfg_.window_left;
    m.window_right = cfg_.window_right;
  }
  if (cfg_.variant == AttentionVariant::kBlockSparse) {
    m.sparse_block = cfg_.sparse_block;
    m.sparse_neighbours = cfg_.sparse_neighbours;
    m.global_tokens = cfg_.global_tokens;
  }
}

void MultiheadAttention::release_saved() { saved_ = Saved{}; }

void MultiheadAttention::set_head_mask(std::vector<std::uint8_t> masked) {
  check<ShapeError>(masked.empty() || static_cast<std::int64_t>(masked.size()) == cfg_.num_heads,
                    "head mask has {} entries for {} heads", masked.size(), cfg_.num_heads);
  head_mask_ = std::move(masked);
}

namespace {

// Checks a mask's dtype and returns whether it is bool.
bool mask_is_bool(const Tensor& m, std::string_view what) {
  check<ShapeError>(m.dtype() == DType::kBool || m.dtype() == DType::kF32, "{} must be BOOL or F32, got {}", what,
                    dtype_name(m.dtype()));
  return m.dtype() == DType::kBool;
}

// Appends bias (or zeros when bias is null) as one more position:
// dst (B, S+1, E) = cat(src (B, S, E), bias (E)). src has row stride ld_src.
template <typename T>
void append_position(T* dst, const T* src, std::int64_t ld_src, const float* bias, std::int64_t B, std::int64_t S,
                     std::int64_t E) {
  for (std::int64_t b = 0; b < B; ++b) {
    T* d = dst + b * (S + 1) * E;
    for (std::int64_t s = 0; s < S; ++s) std::memcpy(d + s * E, src + (b * S + s) * ld_src, sizeof(T) * E);
    if (bias) narrow(d + S * E, bias, E);
    else std::memset(d + S * E, 0, sizeof(T) * E);
  }
}

}  // namespace

// Zeroes the columns of masked heads in rows of width E (any float storage:
// zero bits are +0 in each).
void MultiheadAttention::zero_masked_heads(Tensor& t, std::int64_t head_dim) const {
  if (head_mask_.empty()) return;
  const std::int64_t E = t.dim(-1), rows = t.numel() / E;
  const std::size_t es = dtype_size(t.dtype());
  char* p = static_cast<char*>(t.raw());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::size_t h = 0; h < head_mask_.size(); ++h)
      if (head_mask_[h])
        std::memset(p + (r * E + static_cast<std::int64_t>(h) * head_dim) * static_cast<std::int64_t>(es), 0,
                    es * static_cast<std::size_t>(head_dim));
}

// Self-attention keeps q, k, v side by side in one (B, L, E + 2 KE) buffer.
template <typename T>
HeadsView<const T> MultiheadAttention::q_view() const {
  const auto& d = saved_.dims;
  const std::int64_t E = cfg_.embed_dim, PW = E + 2 * cfg_.kv_dim();
  if (saved_.self) return {saved_.qkv.data<T>(), d.L * PW, PW, d.D};
  return {saved_.q.data<T>(), d.L * E, E, d.D};
}

template <typename T>
HeadsView<const T> MultiheadAttention::k_view() const {
  const auto& d = saved_.dims;
  const std::int64_t E = cfg_.embed_dim, KE = cfg_.kv_dim(), PW = E + 2 * KE, g = cfg_.group();
  if (saved_.k_ext.defined()) return {saved_.k_ext.data<T>(), d.S * KE, KE, d.D, g};
  if (saved_.self) return {saved_.qkv.data<T>() + E, d.L * PW, PW, d.D, g};
  return {saved_.k.data<T>(), d.S * KE, KE, d.D, g};
}

template <typename T>
HeadsView<const T> MultiheadAttention::v_view() const {
  const auto& d = saved_.dims;
  const std::int64_t E = cfg_.embed_dim, KE = cfg_.kv_dim(), PW = E + 2 * KE, g = cfg_.group();
  if (saved_.v_ext.defined()) return {saved_.v_ext.data<T>(), d.S * KE, KE, d.Dv, g};
  if (saved_.self) return {saved_.qkv.data<T>() + E + KE, d.L * PW, PW, d.Dv, g};
  return {saved_.v.data<T>(), d.S * KE, KE, d.Dv, g};
}

AttentionMasks<float> MultiheadAttention::input_masks(const Tensor* key_padding_mask, const Tensor* attn_mask,
                                                      CausalAlign causal, std::int64_t B, std::int64_t L,
                                                      std::int64_t S) const {
  const std::int64_t H = cfg_.num_heads;
  AttentionMasks<float> masks;
  masks.masked_cols = S;
  masks.causal = causal;
  if (key_padding_mask) {
    expect_shape(*key_padding_mask, {B, S}, "key_padding_mask");
    if (mask_is_bool(*key_padding_mask, "key_padding_mask"))
      masks.key_padding_bool = key_padding_mask->data<std::uint8_t>();
    else masks.key_padding_add = key_padding_mask->f32();
  }
  if (attn_mask) {
    const Shape& s = attn_mask->shape();
    bool ok2 = s == Shape{L, S}, ok3 = s == Shape{B * H, L, S};
    check<ShapeError>(ok2 || ok3, "attn_mask has shape {}, expected ({}, {}) or ({}, {}, {})", shape_text(s), L, S,
                      B * H, L, S);
    masks.attn_per_head = ok3;
    if (mask_is_bool(*attn_mask, "attn_mask")) masks.attn_bool = attn_mask->data<std::uint8_t>();
    else masks.attn_add = attn_mask->f32();
  }
  return masks;
}

void MultiheadAttention::start_saved(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const MultiheadAttentionCall& call) {
  const std::int64_t B = query.dim(0), L = query.dim(1), S = key.dim(1);
  saved_ = Saved{};
  Saved& c = saved_;
  c.self = &query == &key && &key == &value && cfg_.packed_in_proj();
  c.store = call.precision != Precision::kF32 && call.impl == AttentionImpl::kFused &&
                    cfg_.variant != AttentionVariant::kLinear
                ? storage_dtype(call.precision)
                : DType::kF32;
  c.query.save(query, c.store);
  if (!c.self) {
    c.key.save(key, c.store);
    if (&value != &key) c.value.save(value, c.store);
  }
  c.S_in = S;
  const std::int64_t extra = (cfg_.add_bias_kv ? 1 : 0) + (cfg_.add_zero_attn ? 1 : 0);
  c.dims = AttentionDims{B, cfg_.num_heads, L, S + extra, cfg_.head_dim(), cfg_.head_dim()};
  if (call.training && cfg_.dropout > 0.0)
    c.dropout = AttentionDropout{static_cast<float>(cfg_.dropout), call.dropout_seed, call.dropout_stream};
  c.query_offset = call.query_offset;
  c.impl = call.impl;
  c.tiles = call.tiles;
  // Block-sparse tiles on the block grid: every tile is then wholly inside
  // or wholly outside the pattern, and no score needs masking one by one.
  if (cfg_.variant == AttentionVariant::kBlockSparse && c.tiles.q_block == AttentionTiles{}.q_block &&
      c.tiles.k_block == AttentionTiles{}.k_block && S == L)
    c.tiles.q_block = c.tiles.k_block = cfg_.sparse_block;
}

void MultiheadAttention::project_inputs(const Tensor& query, const Tensor& key, const Tensor& value) {
  Saved& c = saved_;
  const std::int64_t E = cfg_.embed_dim, KE = cfg_.kv_dim(), PW = E + 2 * KE;
  const std::int64_t B = c.dims.B, L = c.dims.L, S = c.S_in;
  // Self-attention: one (B*L, E) x (E, E + 2 KE) GEMM into the packed
  // (B, L, E + 2 KE) buffer; the heads are read from it in place.
  const float* b_in = cfg_.bias ? store_->data(in_proj_bias_) : nullptr;
  // Rows of q, k, v in the packed weight and bias: 0, E and E + KE.
  const std::int64_t row0[3] = {0, E, E + KE};
  auto bias_part = [&](int i) { return b_in ? b_in + row0[i] : nullptr; };
  // In bf16 the products read the rounded inputs kept for backward.
  // Computing in bf16 without rotary positions (which turn the fp32
  // projections), the products write Q, K and V rounded to bf16 directly:
  // store_projections then has nothing to narrow.
  const bool bf16_out = computes_in_bf16(c.store) && cfg_.positions != AttentionPositions::kRope;
  const DType out_type = bf16_out ? DType::kBF16 : DType::kF32;
  // A projection's weight: parameter h from row `row` on.
  struct Weight {
    ParamStore::Handle h;
    std::int64_t row;
  };
  auto project = [&](Tensor& y, std::int64_t offset, std::int64_t ldy, const Tensor& x, const SavedTensor& saved,
                     Weight w, const float* b, std::int64_t N, std::int64_t in, std::int64_t out) {
    if (bf16_out) {
      // The store's bf16 copy where it has one (frozen, ParamStore::bf16), else W rounded here.
      const BF16* w16 = store_->bf16(w.h);
      const Tensor wb = w16 != nullptr ? Tensor() : bf16_weights(store_->data(w.h) + w.row * in, out, in);
      linear_forward_bf16(y.data<BF16>() + offset, ldy, saved.stored().data<BF16>(), in,
                          w16 != nullptr ? w16 + w.row * in : wb.data<BF16>(), b, N, in, out);
    } else if (computes_in_bf16(c.store)) {
      linear_forward_param<BF16>(y.f32() + offset, ldy, saved.stored().data<BF16>(), in, *store_, w.h, w.row, b, N, in,
                                 out);
    } else {
      linear_forward_param<float>(y.f32() + offset, ldy, x.f32(), in, *store_, w.h, w.row, b, N, in, out);
    }
  };
  if (c.self) {
    c.qkv = Tensor::empty({B, L, PW}, out_type);
    project(c.qkv, 0, PW, query, c.query, Weight{in_proj_weight_, 0}, b_in, B * L, E, PW);
    return;
  }
  const bool packed = cfg_.packed_in_proj();
  const Weight wq = packed ? Weight{in_proj_weight_, 0} : Weight{q_proj_weight_, 0};
  const Weight wk = packed ? Weight{in_proj_weight_, E} : Weight{k_proj_weight_, 0};
  const Weight wv = packed ? Weight{in_proj_weight_, E + KE} : Weight{v_proj_weight_, 0};
  c.q = Tensor::empty({B, L, E}, out_type);
  c.k = Tensor::empty({B, S, KE}, out_type);
  c.v = Tensor::empty({B, S, KE}, out_type);
  const SavedTensor& saved_value = c.value.defined() ? c.value : c.key;
  project(c.q, 0, E, query, c.query, wq, bias_part(0), B * L, E, E);
  project(c.k, 0, KE, key, c.key, wk, bias_part(1), B * S, cfg_.key_dim(), KE);
  project(c.v, 0, KE, value, saved_value, wv, bias_part(2), B * S, cfg_.value_dim(), KE);
}

ScorePositions<float> MultiheadAttention::score_positions(std::int64_t query_offset) const {
  ScorePositions<float> p;
  p.query_offset = query_offset;
  if (cfg_.positions == AttentionPositions::kAlibi) p.alibi_slopes = alibi_slopes_.data();
  if (cfg_.positions == AttentionPositions::kRelative) {
    p.relative.rel_k = store_->data(relative_key_);
    p.relative.rel_v = relative_value_ != kNone ? store_->data(relative_value_) : nullptr;
    p.relative.clip = cfg_.relative_clip;
  }
  return p;
}

void MultiheadAttention::add_positions(ScoreTerms<float>& terms) {
  Saved& c = saved_;
  const std::int64_t E = cfg_.embed_dim, KE = cfg_.kv_dim(), PW = E + 2 * KE, L = c.dims.L, S = c.S_in;
  // Rotary positions turn the projected queries and keys in place, before
  // the extra positions are appended (bias_k has no position).
  if (cfg_.positions == AttentionPositions::kRope) {
    float* qp = c.self ? c.qkv.f32() : c.q.f32();
    float* kp = c.self ? c.qkv.f32() + E : c.k.f32();
    const std::int64_t ldq = c.self ? PW : E, ldk = c.self ? PW : KE;
    rotate({qp, L * ldq, ldq, c.dims.D}, {kp, S * ldk, ldk, c.dims.D}, S, false);
  }
  terms.positions = score_positions(c.query_offset);
  add_pattern(terms.masks);
}

void MultiheadAttention::store_projections() {
  Saved& c = saved_;
  const std::int64_t E = cfg_.embed_dim, KE = cfg_.kv_dim(), PW = E + 2 * KE, B = c.dims.B, S = c.S_in;
  // 16-bit storage from here on: the projections are narrowed once, and the
  // kernels read them in 16 bits.
  const Tensor& first = c.self ? c.qkv : c.q;
  if (c.store != DType::kF32 && first.dtype() == DType::kF32) {
    if (c.self) c.qkv = narrow_tensor(c.qkv, c.store);
    else c.q = narrow_tensor(c.q, c.store), c.k = narrow_tensor(c.k, c.store), c.v = narrow_tensor(c.v, c.store);
  }
  // Extra key/value positions, in PyTorch's order: bias_k/bias_v, then zeros.
  if (!cfg_.add_bias_kv && !cfg_.add_zero_attn) return;
  visit_float_storage(c.store, [&](auto tag) {
    using T = decltype(tag);
    const T* k_src = c.self ? c.qkv.data<T>() + E : c.k.data<T>();
    const T* v_src = c.self ? c.qkv.data<T>() + E + KE : c.v.data<T>();
    std::int64_t ld = c.self ? PW : KE;
    std::int64_t s_cur = S;
    if (cfg_.add_bias_kv) {
      Tensor k1 = Tensor::empty({B, s_cur + 1, KE}, c.store), v1 = Tensor::empty({B, s_cur + 1, KE}, c.store);
      append_position(k1.data<T>(), k_src, ld, store_->data(bias_k_), B, s_cur, KE);
      append_position(v1.data<T>(), v_src, ld, store_->data(bias_v_), B, s_cur, KE);
      c.k_ext = std::move(k1);
      c.v_ext = std::move(v1);
      k_src = c.k_ext.data<T>(), v_src = c.v_ext.data<T>(), ld = KE, ++s_cur;
    }
    if (cfg_.add_zero_attn) {
      Tensor k1 = Tensor::empty({B, s_cur + 1, KE}, c.store), v1 = Tensor::empty({B, s_cur + 1, KE}, c.store);
      append_position(k1.data<T>(), k_src, ld, nullptr, B, s_cur, KE);
      append_position(v1.data<T>(), v_src, ld, nullptr, B, s_cur, KE);
      c.k_ext = std::move(k1);
      c.v_ext = std::move(v1);
    }
  });
}

void MultiheadAttention::attend(const ScoreTerms<float>& terms, bool need_weights) {
  Saved& c = saved_;
  const AttentionDims& d = c.dims;
  const std::int64_t E = cfg_.embed_dim, B = d.B, H = d.H, L = d.L, S = c.S_in;
  c.terms = terms;
  const AttentionMasks<float>& masks = terms.masks;
  c.attn = Tensor::empty({B, L, E}, c.store);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  if (cfg_.variant == AttentionVariant::kLinear) {
    check<ConfigError>(!need_weights, "linear attention has no attention weights; call with need_weights off");
    check<ConfigError>(!masks.attn_bool && !masks.attn_add && !masks.key_padding_add && d.S == S,
                       "linear attention takes a bool key_padding_mask and the causal flag only");
    LinearAttentionArgs<float> la;
    la.key_padding = masks.key_padding_bool;
    la.causal = masks.causal != CausalAlign::kNone;
    check<ConfigError>(masks.causal != CausalAlign::kTopLeft || L == S,
                       "linear attention aligns causal masks bottom-right; top-left needs L == S");
    linear_attention_forward<float>({c.attn.f32(), L * E, E, d.Dv}, q_view<float>(), k_view<float>(), v_view<float>(),
                                    d, la);
  } else if (c.impl == AttentionImpl::kFused) {
    c.lse = Tensor::empty({B, H, L});
    // The forward records the dropout mask, a bit per weight, so that the
    // backward need not draw it again, when the bits take no more memory
    // than the attention output: memory stays linear in the length.
    const std::int64_t keep_words = B * H * L * AttentionDropout::keep_words(d.S);
    if (c.dropout.active() && static_cast<std::size_t>(keep_words) * 8 <= c.attn.nbytes()) {
      c.keep_bits = Tensor::zeros({keep_words}, DType::kI64);
      c.dropout.keep_bits = reinterpret_cast<std::uint64_t*>(c.keep_bits.data<std::int64_t>());
    }
    visit_float_storage(c.store, [&](auto tag) {
      using T = decltype(tag);
      attention_stored_forward<T>({c.attn.data<T>(), L * E, E, d.Dv}, c.lse.f32(), q_view<T>(), k_view<T>(),
                                  v_view<T>(), terms, d, scale, c.dropout, c.tiles);
    });
  } else {
    c.probs = Tensor::empty({B, H, L, d.S});
    attention_ref_forward<float>({c.attn.f32(), L * E, E, d.Dv}, c.probs.f32(), q_view<float>(), k_view<float>(),
                                 v_view<float>(), terms, d, scale, c.dropout);
  }
  zero_masked_heads(c.attn, d.Dv);
}

MultiheadAttentionOutput MultiheadAttention::output(const MultiheadAttentionCall& call) const {
  const Saved& c = saved_;
  const AttentionDims& d = c.dims;
  const std::int64_t E = cfg_.embed_dim, B = d.B, H = d.H, L = d.L;
  MultiheadAttentionOutput out;
  out.output = Tensor::empty({B, L, E});
  visit_float_storage(c.store, [&](auto tag) {
    using T = decltype(tag);
    linear_forward_param<T>(out.output.f32(), E, c.attn.data<T>(), E, *store_, out_proj_weight_, 0,
                            cfg_.bias ? store_->data(out_proj_bias_) : nullptr, B * L, E, E);
  });
  if (call.need_weights) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
    out.weights = call.average_attn_weights ? Tensor::empty({B, L, d.S}) : Tensor::empty({B, H, L, d.S});
    if (c.impl == AttentionImpl::kFused)
      visit_float_storage(c.store, [&](auto tag) {
        using T = decltype(tag);
        attention_fused_weights<T>(out.weights.f32(), call.average_attn_weights, c.lse.f32(), q_view<T>(), k_view<T>(),
                                   c.terms, d, scale, c.dropout, c.tiles);
      });
    else attention_weights_from_probs(out.weights.f32(), c.probs.f32(), d, call.average_attn_weights, c.dropout);
  }
  return out;
}

MultiheadAttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                     const Tensor* key_padding_mask, const Tensor* attn_mask,
                                                     const MultiheadAttentionCall& call) {
  const std::int64_t E = cfg_.embed_dim;
  check<ShapeError>(query.ndim() == 3 && query.dim(2) == E, "query has shape {}, expected (B, L, {})",
                    shape_text(query.shape()), E);
  const std::int64_t B = query.dim(0), L = query.dim(1);
  check<ShapeError>(key.ndim() == 3 && key.dim(0) == B && key.dim(2) == cfg_.key_dim(),
                    "key has shape {}, expected ({}, S, {})", shape_text(key.shape()), B, cfg_.key_dim());
  const std::int64_t S = key.dim(1);
  check<ShapeError>(value.ndim() == 3 && value.dim(0) == B && value.dim(1) == S && value.dim(2) == cfg_.value_dim(),
                    "value has shape {}, expected ({}, {}, {})", shape_text(value.shape()), B, S, cfg_.value_dim());
  for (const auto& [t, name] : {std::pair{&query, "query"}, std::pair{&key, "key"}, std::pair{&value, "value"}})
    check<ShapeError>(t->dtype() == DType::kF32, "{} has dtype {}, expected {}", name, dtype_name(t->dtype()),
                      dtype_name(DType::kF32));
  ScoreTerms<float> terms(input_masks(key_padding_mask, attn_mask, call.causal, B, L, S));
  start_saved(query, key, value, call);
  project_inputs(query, key, value);
  add_positions(terms);
  store_projections();
  attend(terms, call.need_weights);
  MultiheadAttentionOutput out = output(call);
  saved_.valid = true;
  return out;
}

// The backward pass (multi_head_attention_backward.cpp) reads the cache through these too.
#define MULTIHEAD_INSTANTIATE(T)                                     \
  template HeadsView<const T> MultiheadAttention::q_view<T>() const; \
  template HeadsView<const T> MultiheadAttention::k_view<T>() const; \
  template HeadsView<const T> MultiheadAttention::v_view<T>() const;
MULTIHEAD_INSTANTIATE(float)
MULTIHEAD_INSTANTIATE(BF16)
MULTIHEAD_INSTANTIATE(F16)
#undef MULTIHEAD_INSTANTIATE

}  // namespace multihead
