// SPDX-License-Identifier: Apache-2.0
// Whole models: token embedding, positions, an encoder stack and a head.
//
//   SequenceClassifier: embedding -> positions -> TransformerEncoder ->
//                       pooling (mean over unpadded tokens, or the first
//                       token as [CLS]) -> "classifier" Linear.
//   LanguageModel:      embedding -> positions -> causal TransformerEncoder
//                       -> "lm_head" Linear (or the embedding matrix, tied).
//
// State dict names: embedding.weight, pos_embedding.weight (learned
// positions), encoder.layers.{i}.*, encoder.norm.*, classifier.*, lm_head.weight.
#pragma once

#include <memory>
#include <string>

#include "multihead/io/config_keys.h"
#include "multihead/nn/encoder.h"

namespace multihead {

// Where token positions come from: added to the input (sinusoidal, learned),
// or inside every self-attention (relative, rope, alibi; see
// AttentionPositions), or nowhere.
enum class PositionKind : std::uint8_t { kNone, kSinusoidal, kLearned, kRelative, kRope, kAlibi };
enum class Pooling : std::uint8_t { kMean, kCls };

PositionKind parse_position_kind(std::string_view name);
std::string_view position_kind_name(PositionKind kind);
// What a kind does inside attention: relative, rope and alibi act there;
// none, sinusoidal and learned do not (kNone: they are added to the embeddings).
AttentionPositions attention_positions(PositionKind kind);
Pooling parse_pooling(std::string_view name);
std::string_view pooling_name(Pooling p);

struct ModelConfig {
  std::int64_t vocab_size = 0;
  std::int64_t num_layers = 2;
  TransformerLayerConfig layer;
  bool final_norm = true;
  PositionKind positions = PositionKind::kSinusoidal;
  std::int64_t max_len = 512;  // absolute positions only
  std::int64_t relative_clip = 16;
  bool relative_values = true;
  double rope_theta = 10000.0;
  // Classifier only.
  std::int64_t num_classes = 2;
  Pooling pooling = Pooling::kMean;
  // Classifier only: "linear", the classifier over the pooled vector; "tanh",
  // "relu", "gelu" or "gelu_tanh", a "pre_classifier" d_model x d_model layer
  // with that activation first (BERT's and RoBERTa's tanh, DistilBERT's relu,
  // ELECTRA's gelu).
  std::string head = "linear";
  // Pretrained encoders' input (BERT's family): a LayerNorm "embedding_norm"
  // (eps layer_norm_eps) and dropout over the summed embeddings; a
  // "token_type_embedding" of token_types rows, of which every token adds
  // row 0 (one segment); and learned positions counted from position_offset
  // (RoBERTa: 2).
  bool embedding_norm = false;
  std::int64_t token_types = 0;
  std::int64_t position_offset = 0;
  // Language model only.
  bool tie_embeddings = false;
  // "pytorch": each module's own PyTorch initialisation; "xavier": then
  // xavier_uniform on every matrix, as nn.Transformer does.
  std::string init = "pytorch";

  // The keys of a job config's "model" section (io/json_config.h). The
  // section's own defaults for the layer: d_model 128, nhead 4 and
  // dim_feedforward 4 x d_model; vocab_size, when absent, is
  // vocab_default (the tokenizer's or the data's).
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& m, std::int64_t vocab_default = 0) {
    k.with_default("vocab_size", m.vocab_size, vocab_default, between(1, kMaxVocab), "the tokenizer's or data's")
        .doc("rows of the token embedding");
    k("num_classes", m.num_classes, between(1, kMaxVocab)).doc("a classifier's classes (set from the data's labels)");
    using Layer = TransformerLayerConfig;
    k.with_default("d_model", m.layer.d_model, std::int64_t{128}, Layer::kWidth, "128").doc("the model's width");
    k.with_default("nhead", m.layer.nhead, std::int64_t{4}, Layer::kHeads, "4")
        .doc("attention heads a layer (d_model divisible by it)");
    k("num_layers", m.num_layers, between(1, kMaxLayers)).doc("Transformer layers");
    k.with_default("dim_feedforward", m.layer.dim_feedforward, 4 * m.layer.d_model, Layer::kFeedforward, "4 x d_model")
        .doc("the feed-forward block's hidden width");
    k("dropout", m.layer.dropout, Layer::kDropout).doc("dropout on the attention weights and the sublayers' outputs");
    k.named("activation", m.layer.activation, activation_name, parse_activation)
        .doc("the feed-forward block's activation");
    k("layer_norm_eps", m.layer.layer_norm_eps, Layer::kNormEps).doc("LayerNorm's epsilon");
    k("norm_first", m.layer.norm_first).doc("pre-LN layers (LayerNorm before each sublayer) instead of post-LN");
    k("final_norm", m.final_norm).doc("a LayerNorm after the last layer (pre-LN stacks)");
    k.named("positions", m.positions, position_kind_name, parse_position_kind)
        .doc("where positions come from: added to the embeddings, inside attention, or none");
    k("max_len", m.max_len, between(1, kMaxLength)).doc("the longest input absolute positions cover");
    k("relative_clip", m.relative_clip, between(0, kMaxLength)).doc("relative positions' largest distance");
    k("relative_values", m.relative_values).doc("relative positions on the values too, not only the keys");
    k("rope_theta", m.rope_theta, positive()).doc("RoPE's base of the rotation frequencies");
    k.named("pooling", m.pooling, pooling_name, parse_pooling)
        .doc("a classifier's summary of the tokens: their mean, or the first (CLS) token");
    k("tie_embeddings", m.tie_embeddings).doc("a language model's output layer shares the token embedding");
    k("init", m.init).doc("\"pytorch\": each module's own initialisation; \"xavier\": xavier_uniform on every matrix");
    k("head", m.head)
        .doc("a classifier's head: \"linear\", or a pre-classifier layer with tanh, relu, gelu or gelu_tanh");
    k("embedding_norm", m.embedding_norm).doc("a LayerNorm and dropout over the summed embeddings (BERT's family)");
    k("token_types", m.token_types, between(0, kMaxVocab)).doc("rows of a token-type embedding (BERT's segments)");
    k("position_offset", m.position_offset, between(0, kMaxLength))
        .doc("the first learned position's row (RoBERTa: 2)");
    AttentionPattern::keys(k, m.layer.pattern);
  }

  void validate() const;
  // The layer config with the attention positions filled in.
  TransformerLayerConfig layer_config() const;
  // "2 layers, d_model 128, 4 heads, sinusoidal positions, 812034 parameters", for logs and reports.
  std::string describe(std::int64_t parameters) const;
};

// Absolute positions added to the token embeddings.
class AbsolutePositions {
 public:
  AbsolutePositions(ParamStore& store, const std::string& prefix, PositionKind kind, std::int64_t max_len,
                    std::int64_t d_model);
  void init(Rng& rng);
  // x (B, L, d) += table[offset : offset + L]; running past max_len is an
  // error naming both.
  void forward_inplace(Tensor& x, std::int64_t offset = 0) const;
  void backward(const Tensor& dy);                              // learned table's gradient
  void backward_offset(const Tensor& dy, std::int64_t offset);  // of a forward_inplace at that offset
  // Sinusoidal only: recompute the table for a longer max_len.
  void extend(std::int64_t max_len);
  std::int64_t max_len() const { return max_len_; }

 private:
  PositionKind kind_;
  std::int64_t max_len_, d_;
  Tensor table_;  // sinusoidal: (max_len, d)
  std::unique_ptr<Embedding> learned_;
  ParamStore* store_;
};

// The input of a classifier: token embeddings, plus absolute positions,
// plus token type 0's row, through a LayerNorm and dropout, as the config
// says (each part optional).
class InputEmbedding {
 public:
  InputEmbedding(ParamStore& store, const ModelConfig& cfg);
  void init(Rng& rng);
  void release_saved();
  Tensor forward(const Tensor& ids, const ForwardContext& ctx);  // (B, L) -> (B, L, d)
  void backward(Tensor dy);
  AbsolutePositions& positions() { return positions_; }

 private:
  ParamStore* store_;
  std::int64_t offset_;
  Embedding embedding_;
  AbsolutePositions positions_;
  std::unique_ptr<Embedding> token_types_;
  std::unique_ptr<LayerNorm> norm_;
  std::unique_ptr<Dropout> dropout_;
  Tensor summed_;  // the embeddings' sum, before the norm
};

class SequenceClassifier : public Module {
 public:
  SequenceClassifier(ParamStore& store, const ModelConfig& cfg);
  void init(Rng& rng) override;
  void release_saved() override;
  // ids (B, L) I64; padding (B, L) bool, true = padding, or null. Returns logits (B, num_classes).
  // ids and padding must outlive backward.
  Tensor forward(const Tensor& ids, const Tensor* padding, const ForwardContext& ctx);
  void backward(const Tensor& dlogits);
  // The encoder's output (B, L, d_model) of the last forward.
  const Tensor& hidden() const { return h_; }
  TransformerEncoder& encoder() { return encoder_; }
  AbsolutePositions& positions() { return input_.positions(); }
  const ModelConfig& config() const { return cfg_; }

 private:
  ModelConfig cfg_;
  ParamStore* store_;
  InputEmbedding input_;
  TransformerEncoder encoder_;
  std::unique_ptr<Linear> pre_classifier_;
  Linear classifier_;
  const Tensor* padding_ = nullptr;
  Tensor x_, h_, pooled_, head_, head_pre_;  // pre_classifier's output activated, and before
  std::vector<float> counts_;                // tokens pooled per sequence
};

class LanguageModel : public Module {
 public:
  LanguageModel(ParamStore& store, const ModelConfig& cfg);
  void init(Rng& rng) override;
  void release_saved() override;
  // ids (B, L) I64. Returns logits (B, L, vocab). Causal (top-left) self-attention.
  Tensor forward(const Tensor& ids, const ForwardContext& ctx);
  void backward(const Tensor& dlogits);
  TransformerEncoder& encoder() { return encoder_; }
  const ModelConfig& config() const { return cfg_; }

  // Incremental decoding with a KV cache per layer: logits (B, T, vocab) of
  // T new tokens (B, T) following the cached ones. Equal to the matching rows
  // of forward() over the whole sequence.
  // p: precision of the activations and of the key/value cache.
  Tensor forward_cached(const Tensor& ids, std::vector<KvCache>& caches, std::int64_t capacity,
                        Precision p = Precision::kF32);

 private:
  // Logits (B, T, vocab) of the final hidden states h (B, T, d_model), in
  // precision p; the tied output layer keeps h for backward in `saved`.
  Tensor logits_of(const Tensor& h, Precision p, SavedTensor& saved);
  ModelConfig cfg_;
  ParamStore* store_;
  Embedding embedding_;
  AbsolutePositions positions_;
  TransformerEncoder encoder_;
  std::unique_ptr<Linear> lm_head_;  // null when tied
  Tensor x_, h_;
  SavedTensor h_saved_;  // tied output layer: h_ as its product reads it
};

}  // namespace multihead

namespace multihead {

// A Vision Transformer (Dosovitskiy et al. 2021) for square images: the
// image is cut into patch x patch squares, each a token through a linear
// "patch_embedding"; a learned "cls_token" goes first; learned
// "pos_embedding" (1, 1 + patches, d); the encoder; the [CLS] output through
// "classifier".
struct VisionConfig {
  std::int64_t image_size = 28, patch = 4, channels = 1;
  std::int64_t num_layers = 4;
  TransformerLayerConfig layer;
  std::int64_t num_classes = 10;

  std::int64_t patches() const { return (image_size / patch) * (image_size / patch); }
  // The keys of an image job's "model" section (io/json_config.h).
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& m) {
    k("image_size", m.image_size, between(1, kMaxLength)).doc("the images' side in pixels (divisible by patch)");
    k("patch", m.patch, between(1, kMaxLength)).doc("the side of a patch, each one token");
    k("channels", m.channels, between(1, kMaxWidth)).doc("the images' channels");
    k("num_layers", m.num_layers, between(1, kMaxLayers)).doc("Transformer layers");
    k("num_classes", m.num_classes, between(1, kMaxVocab)).doc("the classes");
    k("d_model", m.layer.d_model, TransformerLayerConfig::kWidth).doc("the model's width");
    k("nhead", m.layer.nhead, TransformerLayerConfig::kHeads).doc("attention heads a layer (d_model divisible by it)");
    k("dim_feedforward", m.layer.dim_feedforward, TransformerLayerConfig::kFeedforward)
        .doc("the feed-forward block's hidden width");
    k("dropout", m.layer.dropout, TransformerLayerConfig::kDropout)
        .doc("dropout on the attention weights and the sublayers' outputs");
    k("norm_first", m.layer.norm_first).doc("pre-LN layers (LayerNorm before each sublayer) instead of post-LN");
  }
  void validate() const;
  // "ViT, 49 patches of 4x4, 4 layers, d_model 96, 4 heads, 300010 parameters".
  std::string describe(std::int64_t parameters) const;
};

class VisionTransformer : public Module {
 public:
  VisionTransformer(ParamStore& store, const VisionConfig& cfg);
  void init(Rng& rng) override;
  void release_saved() override;
  // images: (B, channels, size, size) F32. Returns logits (B, num_classes).
  Tensor forward(const Tensor& images, const ForwardContext& ctx);
  void backward(const Tensor& dlogits);
  TransformerEncoder& encoder() { return encoder_; }
  const VisionConfig& config() const { return cfg_; }

 private:
  VisionConfig cfg_;
  ParamStore* store_;
  Linear patch_embedding_;
  ParamStore::Handle cls_token_, pos_embedding_;
  TransformerEncoder encoder_;
  Linear classifier_;
  Tensor patches_, x_, h_, cls_out_;
};

}  // namespace multihead
