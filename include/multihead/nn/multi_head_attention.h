// SPDX-License-Identifier: Apache-2.0
// torch.nn.MultiheadAttention, batch-first: inputs and output are (B, L, E).
//
// Mask polarity follows nn.MultiheadAttention, not F.scaled_dot_product_attention:
// a bool True means "masked out" in both key_padding_mask and attn_mask; a
// float mask is added to the scores (use -inf to mask).
//
// One deliberate difference from PyTorch 1.13: a query whose keys are all
// masked attends to nothing. Its attention output row (before out_proj) is
// zero, its weights are zero and its gradients are finite, where PyTorch 1.13
// returns NaN; newer PyTorch SDPA and FlashAttention also return zeros.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include "multihead/core/precision.h"
#include "multihead/core/tensor.h"
#include "multihead/io/config_keys.h"
#include "multihead/kernels/attention_fused.h"
#include "multihead/kernels/attention_types.h"
#include "multihead/kernels/linear_attention.h"
#include "multihead/kernels/positions.h"
#include "multihead/nn/backward_observer.h"
#include "multihead/nn/module.h"
#include "multihead/nn/saved_tensor.h"

namespace multihead {

// Positions that act inside attention (absolute ones are added to the input
// by the model instead):
//   rope:     queries and keys rotate by position (Su et al. 2021);
//   alibi:    a per-head linear distance penalty on the scores (Press et al. 2022);
//   relative: learned embeddings of the clipped distance j - i for keys and,
//             optionally, values (Shaw et al. 2018), in parameters
//             "relative_key" and "relative_value" of shape (2 * clip + 1, head_dim).
enum class AttentionPositions : std::uint8_t { kNone, kRope, kAlibi, kRelative };

// Which keys each query attends to, and how:
//   full:           every key (as nn.MultiheadAttention);
//   sliding_window: keys within window_left before and window_right after
//                   the query's position (-1: unlimited), FlashAttention's
//                   convention, bottom-right aligned when L != S;
//   block_sparse:   the keys of its own block of sparse_block positions and
//                   of sparse_neighbours blocks on each side, plus the first
//                   global_tokens positions, which see and are seen by all;
//   linear:         linear attention, phi(x) = elu(x) + 1 (no weights, no
//                   attention dropout; key padding and causal masks only).
enum class AttentionVariant : std::uint8_t { kFull, kSlidingWindow, kBlockSparse, kLinear };
AttentionVariant parse_attention_variant(std::string_view name);
std::string_view attention_variant_name(AttentionVariant v);

// The variant and its parameters, shared by every config that carries an
// attention (module, layer, model).
struct AttentionPattern {
  AttentionVariant variant = AttentionVariant::kFull;
  std::int64_t window_left = 64, window_right = 64;
  std::int64_t sparse_block = 64, sparse_neighbours = 1, global_tokens = 0;
  // Grouped-query attention: key/value heads, each shared by
  // num_heads / num_kv_heads query heads (1: multi-query). 0: num_heads.
  std::int64_t num_kv_heads = 0;

  // Linear attention computes no weights to show (inspect, reports).
  bool has_weights() const { return variant != AttentionVariant::kLinear; }

  // The pattern's config keys (io/json_config.h), in every config that
  // carries an attention: "attention", "window_left", "window_right",
  // "sparse_block", "sparse_neighbours", "global_tokens", "num_kv_heads".
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& p) {
    k.named("attention", p.variant, attention_variant_name, parse_attention_variant)
        .doc("which keys each query attends to: all, a window, sparse blocks, or linear attention");
    k("window_left", p.window_left, between(-1, kMaxLength))
        .doc("sliding_window: keys before the query it sees (-1: unlimited)");
    k("window_right", p.window_right, between(-1, kMaxLength))
        .doc("sliding_window: keys after the query it sees (-1: unlimited)");
    k("sparse_block", p.sparse_block, between(1, kMaxLength)).doc("block_sparse: positions a block");
    k("sparse_neighbours", p.sparse_neighbours, between(0, kMaxLength))
        .doc("block_sparse: blocks on each side a query's block sees");
    k("global_tokens", p.global_tokens, between(0, kMaxLength))
        .doc("block_sparse: first positions that see and are seen by all");
    k("num_kv_heads", p.num_kv_heads, between(0, kMaxWidth))
        .doc("grouped-query attention's key/value heads, each shared by num_heads / num_kv_heads (0: num_heads)");
  }
};

// Constructor arguments, named as in PyTorch (positions and the pattern are multihead's own).
struct MultiheadAttentionConfig : AttentionPattern {
  std::int64_t embed_dim = 0;
  std::int64_t num_heads = 1;
  double dropout = 0.0;  // on the attention weights
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  std::int64_t kdim = 0;  // 0: embed_dim
  std::int64_t vdim = 0;  // 0: embed_dim
  AttentionPositions positions = AttentionPositions::kNone;
  double rope_theta = 10000.0;
  std::int64_t relative_clip = 16;
  bool relative_values = true;

  // The constructor's keys as PyTorch names them (apply's module JSON):
  // embed_dim and num_heads have no default there; kdim and vdim may be
  // null (None, embed_dim's). Positions are the layer's and the model's to
  // set. num_heads's bound follows embed_dim and is validate()'s.
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& c) {
    k.required("embed_dim", c.embed_dim, between(1, kMaxWidth)).doc("the query's and output's width");
    k.required("num_heads", c.num_heads, between(1, kMaxWidth)).doc("heads (embed_dim divisible by it)");
    k("dropout", c.dropout, between(0, 1)).doc("dropout on the attention weights");
    k("bias", c.bias).doc("biases on the input and output projections");
    k("add_bias_kv", c.add_bias_kv).doc("a learned key and value appended to the sequence");
    k("add_zero_attn", c.add_zero_attn).doc("a zero key and value appended to the sequence");
    k.or_null("kdim", c.kdim, 0).doc("the keys' width (null: embed_dim)");
    k.or_null("vdim", c.vdim, 0).doc("the values' width (null: embed_dim)");
    AttentionPattern::keys(
        k, static_cast<std::conditional_t<std::is_const_v<Self>, const AttentionPattern, AttentionPattern>&>(c));
  }

  std::int64_t key_dim() const { return kdim > 0 ? kdim : embed_dim; }
  std::int64_t value_dim() const { return vdim > 0 ? vdim : embed_dim; }
  std::int64_t head_dim() const { return embed_dim / num_heads; }
  std::int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  std::int64_t kv_dim() const { return kv_heads() * head_dim(); }  // width of projected keys and values
  std::int64_t group() const { return num_heads / kv_heads(); }
  // PyTorch's _qkv_same_embed_dim: one (3E, E) in_proj_weight instead of three.
  bool packed_in_proj() const { return key_dim() == embed_dim && value_dim() == embed_dim; }
  // Throws ConfigError naming the offending sizes.
  void validate() const;
};

// Which attention kernel runs. The fused kernel is the default; the
// reference kernel materialises the (L, S) weights and is the test oracle.
enum class AttentionImpl : std::uint8_t { kFused, kReference };

// Per-call options of forward(), as in MultiheadAttention.forward.
struct MultiheadAttentionCall {
  bool need_weights = true;
  bool average_attn_weights = true;
  CausalAlign causal = CausalAlign::kNone;
  bool training = false;  // dropout is applied only when training
  std::uint64_t dropout_seed = 0;
  std::uint64_t dropout_stream = 0;  // e.g. (step, layer): distinct masks per call site
  AttentionImpl impl = AttentionImpl::kFused;
  AttentionTiles tiles;           // fused kernel only
  std::int64_t query_offset = 0;  // position of query 0 among the keys (cached decoding)
  // bf16 / fp16: the projected Q, K, V, the attention output O and the saved
  // inputs are kept in 16 bits (fused kernel; linear attention and the
  // reference kernel keep fp32).
  Precision precision = Precision::kF32;
};

struct MultiheadAttentionOutput {
  Tensor output;   // (B, L, E)
  Tensor weights;  // (B, L, S') averaged or (B, H, L, S') per head; undefined unless need_weights
};

struct MultiheadAttentionGrads {
  Tensor query;  // (B, L, E); for self-attention, the whole input gradient
  Tensor key;    // (B, S, kdim); undefined for self-attention
  Tensor value;  // (B, S, vdim); undefined for self-attention
};

// Keys and values of the positions decoded so far, for incremental
// self-attention (generation): each step projects only its new tokens.
struct KvCache {
  Tensor k, v;                                      // (B, capacity, kv_dim): only the key/value heads; F32, BF16 or F16
  std::int64_t length = 0;                          // positions filled
  std::vector<LinearAttentionState<float>> linear;  // linear attention: a constant-size state per (b, head)
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(ParamStore& store, const std::string& prefix, const MultiheadAttentionConfig& cfg);

  const MultiheadAttentionConfig& config() const { return cfg_; }

  // PyTorch's _reset_parameters: xavier_uniform in-projections, zero biases,
  // nn.Linear's default for out_proj.weight, xavier_normal bias_k and bias_v.
  void init(Rng& rng) override;
  void release_saved() override;

  // Cross-attention, or self-attention when key and value are the same object
  // as query (then one fused QKV GEMM, as PyTorch's `query is key` check).
  // key_padding_mask: (B, S) bool or float, or null. attn_mask: (L, S) or
  // (B*H, L, S), bool or float, or null. The inputs and masks must stay alive
  // until backward, which reads them again.
  MultiheadAttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor* key_padding_mask, const Tensor* attn_mask,
                                   const MultiheadAttentionCall& call);
  MultiheadAttentionOutput forward_self(const Tensor& x, const Tensor* key_padding_mask, const Tensor* attn_mask,
                                        const MultiheadAttentionCall& call) {
    return forward(x, x, x, key_padding_mask, attn_mask, call);
  }

  // grad_output: (B, L, E). Adds into the parameter gradients.
  MultiheadAttentionGrads backward(const Tensor& grad_output);

  // Causal self-attention of T new positions (B, T, E) over the cache plus
  // themselves, in eval mode; appends their keys and values to the cache
  // (allocated with `capacity` positions on first use). Gives the same
  // output as the rows of an uncached causal forward over the whole sequence.
  // In bf16 / fp16 the cache holds 16-bit keys and values (precision p is
  // fixed when the cache is allocated). weights, when given, receives the
  // per-head weights (B, H, T, positions cached after the call), zero for
  // the keys after each query; linear attention has none.
  Tensor forward_cached(const Tensor& x, KvCache& cache, std::int64_t capacity, Precision p = Precision::kF32,
                        Tensor* weights = nullptr);

  // Cross-attention over a fixed memory (an encoder's output) in decoding:
  // cache_memory projects the memory (B, S, E) into keys and values once,
  // stored as precision p; forward_memory attends T new queries (B, T, E)
  // to them, in eval mode, equal to forward(x, memory, memory, mask) then.
  // key_padding_mask: (B, S) or null. weights, when given, receives the
  // per-head weights (B, H, T, S). Plain full attention only.
  void cache_memory(const Tensor& memory, KvCache& cache, Precision p = Precision::kF32) const;
  Tensor forward_memory(const Tensor& x, const KvCache& memory, const Tensor* key_padding_mask,
                        Tensor* weights = nullptr);

  // Head ablation (Michel et al. 2019): heads h with masked[h] != 0 give a
  // zero attention output before out_proj, and get zero gradients. Empty: none.
  void set_head_mask(std::vector<std::uint8_t> masked);

  // Each backward shows *observer what it asks for (the heads' shares of
  // the input's gradient: nn/backward_observer.h) until set to null.
  void set_backward_observer(BackwardObserver* observer) { observer_ = observer; }

 private:
  struct Saved {
    SavedTensor query, key, value;  // the inputs; self-attention saves query only
    bool self = false;
    DType store = DType::kF32;  // of qkv, q, k, v, k_ext, v_ext and attn
    AttentionDims dims;         // S here is S' = S + extra positions
    std::int64_t S_in = 0;      // key length as given
    AttentionDropout dropout;
    ScoreTerms<float> terms;  // the masks and the positions acting on the scores
    AttentionImpl impl = AttentionImpl::kFused;
    AttentionTiles tiles;
    std::int64_t query_offset = 0;
    Tensor qkv;           // self: (B, L, 3E)
    Tensor q, k, v;       // cross: (B, L, E), (B, S, E), (B, S, E)
    Tensor k_ext, v_ext;  // with extra positions: (B, S', E)
    Tensor probs;         // reference: (B, H, L, S')
    Tensor lse;           // fused: (B, H, L) log-sum-exp per query row
    Tensor keep_bits;     // fused, dropout: the mask, AttentionDropout::keep_bits
    Tensor attn;          // (B, L, E), before out_proj
    bool valid = false;
  };

  // The steps of forward, in order. The masks the caller gave, checked
  // against (B, L, S):
  AttentionMasks<float> input_masks(const Tensor* key_padding_mask, const Tensor* attn_mask, CausalAlign causal,
                                    std::int64_t B, std::int64_t L, std::int64_t S) const;
  // Fresh saved activations: what backward reads, sizes, precision, dropout, tiles.
  void start_saved(const Tensor& query, const Tensor& key, const Tensor& value, const MultiheadAttentionCall& call);
  // Q, K, V = the in-projections of query, key, value, into the saved activations (fp32).
  void project_inputs(const Tensor& query, const Tensor& key, const Tensor& value);
  // Positions: RoPE rotates Q and K; ALiBi and relative positions go into
  // the score terms' positions, the variant's pattern into their masks.
  void add_positions(ScoreTerms<float>& terms);
  // ALiBi's slopes and the relative-position tables, for queries starting
  // at query_offset among the keys.
  ScorePositions<float> score_positions(std::int64_t query_offset) const;
  // Q, K, V in their storage precision, with bias_k / zero positions appended.
  void store_projections();
  // The attention output before out_proj, (B, L, E), into the saved activations.
  void attend(const ScoreTerms<float>& terms, bool need_weights);
  // out_proj of the attention output, and the weights when asked for.
  MultiheadAttentionOutput output(const MultiheadAttentionCall& call) const;

  // The steps of backward. Gradients of the projected q, k, v: packed
  // (B, L, E + 2 KE) for self-attention, else (B, L, E), (B, S, KE) twice.
  struct ProjectionGrads {
    Tensor qkv, q, k, v;
  };
  // Through out_proj: the gradient of the attention output, (B, L, E).
  Tensor out_proj_backward(const Tensor& grad_output);
  // Through the attention core, the extra positions and RoPE.
  ProjectionGrads attend_backward(Tensor d_attn);
  // Through the in-projections: the inputs' gradients.
  MultiheadAttentionGrads in_proj_backward(const ProjectionGrads& dp);
  // The heads' shares of the input's gradient (BackwardObserver::head_shares), (H, B, L, E).
  Tensor head_shares(const ProjectionGrads& dp) const;

  // Eval-mode projections for cached decoding: x (..., E) through rows
  // [first, first + count) of the packed in-projection, multiplied as
  // storage st does (bf16 products on the rounded input where the CPU has
  // them); the attention output (..., E), as stored, through out_proj.
  Tensor project_packed(const Tensor& x, std::int64_t first, std::int64_t count, DType st) const;
  Tensor project_output(const Tensor& attn) const;

  // Rotates the projected queries and keys (RoPE), or their gradients back.
  void rotate(HeadsView<float> q, HeadsView<float> k, std::int64_t S, bool inverse) const;  // k: kv heads
  // Applies the variant's pattern to the masks.
  void add_pattern(AttentionMasks<float>& masks) const;
  // Zeroes the columns of the heads set_head_mask masked, in rows of width E.
  void zero_masked_heads(Tensor& t, std::int64_t head_dim) const;
  // Head views of the projected, possibly extended, q/k/v in the saved activations, stored as T.
  template <typename T>
  HeadsView<const T> q_view() const;
  template <typename T>
  HeadsView<const T> k_view() const;
  template <typename T>
  HeadsView<const T> v_view() const;

  MultiheadAttentionConfig cfg_;
  ParamStore* store_;
  // Handles; absent ones stay kNone.
  static constexpr ParamStore::Handle kNone = static_cast<ParamStore::Handle>(-1);
  ParamStore::Handle in_proj_weight_ = kNone;   // (3E, E)
  ParamStore::Handle q_proj_weight_ = kNone;    // (E, E)
  ParamStore::Handle k_proj_weight_ = kNone;    // (E, kdim)
  ParamStore::Handle v_proj_weight_ = kNone;    // (E, vdim)
  ParamStore::Handle in_proj_bias_ = kNone;     // (3E)
  ParamStore::Handle out_proj_weight_ = kNone;  // (E, E)
  ParamStore::Handle out_proj_bias_ = kNone;    // (E)
  ParamStore::Handle bias_k_ = kNone;           // (1, 1, E)
  ParamStore::Handle bias_v_ = kNone;           // (1, 1, E)
  ParamStore::Handle relative_key_ = kNone;     // (2 * clip + 1, head_dim)
  ParamStore::Handle relative_value_ = kNone;   // (2 * clip + 1, head_dim)
  std::vector<float> alibi_slopes_;             // (H)
  std::vector<std::uint8_t> head_mask_;         // (H) or empty
  BackwardObserver* observer_ = nullptr;
  Saved saved_;
  mutable RopeTable rope_;  // RoPE's pairs by position, kept between calls (rotate is const)
};

}  // namespace multihead
