// SPDX-License-Identifier: Apache-2.0
// Tokenizers: text to token ids and back. Ids 0..3 are the same special
// tokens in every tokenizer: <pad> 0, <unk> 1, <cls> 2 (also begin of
// sequence), <eos> 3.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace multihead {

inline constexpr std::int64_t kPadId = 0, kUnkId = 1, kClsId = 2, kEosId = 3;

// How a tokenizer's ids become a model's input: `before` and `after` frame
// each sequence (a sequence cut to fit keeps its frame), `pad` fills the
// batch after it and `unk` stands for an empty text. Multihead's own
// tokenizers put <cls> before; BERT's, [CLS] before and [SEP] after.
struct TokenFrame {
  std::vector<std::int64_t> before, after;
  std::int64_t pad = kPadId, unk = kUnkId;
};

// encode and decode are const and share no state between calls: threads may
// call them at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<std::int64_t> encode(std::string_view text) const = 0;
  // The first n tokens of encode(text), reading only as much of the text as
  // they need (a model that reads 384 tokens of a 1 MB e-mail tokenises a
  // few KB of it) where tokens never span white space, so that a prefix cut
  // at white space encodes to the first tokens of the whole; the whole text
  // is encoded where they may.
  std::vector<std::int64_t> encode_prefix(std::string_view text, std::size_t n) const;
  // Whether no token spans ASCII white space: true of words, characters and
  // SentencePiece's pieces (which begin at white space); a Hugging Face
  // tokenizer says by its pre-tokeniser and normalisers.
  virtual bool tokens_end_at_white_space() const { return true; }
  virtual std::string decode(const std::vector<std::int64_t>& ids) const = 0;
  virtual std::string piece(std::int64_t id) const = 0;  // a printable label, for heatmaps
  virtual std::int64_t vocab_size() const = 0;
  virtual std::string kind() const = 0;
  virtual TokenFrame frame() const { return {{kClsId}, {}, kPadId, kUnkId}; }
  // Writes the tokenizer into folder `dir` (tokenizer.json, and
  // tokenizer.model for SentencePiece); load() reads it back.
  virtual void save(const std::string& dir) const = 0;
  static std::unique_ptr<Tokenizer> load(const std::string& dir);
};

enum class TokenizerKind { kSentencePiece, kChar, kWord, kWordPiece, kBpe, kUnigram };
// "sentencepiece", "char", "word", or "wordpiece", "hf_bpe" and "hf_unigram" (Hugging Face's,
// read from a checkpoint, never trained); anything else is a ConfigError.
TokenizerKind parse_tokenizer_kind(const std::string& s);
const char* tokenizer_kind_name(TokenizerKind k);

struct TokenizerConfig {
  TokenizerKind kind = TokenizerKind::kSentencePiece;
  std::string model_type = "bpe";  // sentencepiece: bpe | unigram
  std::int64_t vocab_size = 8000;  // a cap for char and word
  bool lowercase = true;           // word only
  // A run directory whose tokenizer a new run takes instead of training one
  // (fine-tuning); the other keys are then that run's.
  std::string from;

  // The keys of a job config's "tokenizer" section (io/json_config.h).
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& t) {
    k.named("kind", t.kind, tokenizer_kind_name, parse_tokenizer_kind)
        .doc("how text becomes tokens: a SentencePiece model trained on the data, characters or words");
    k("model_type", t.model_type).doc("the SentencePiece model: bpe or unigram");
    k("vocab_size", t.vocab_size).doc("the vocabulary's size (for char and word a cap)");
    k("from", t.from).doc("a run or checkpoint directory whose tokenizer is taken instead of training one");
  }
};

// Trains on `texts` (the training split only).
std::unique_ptr<Tokenizer> train_tokenizer(const TokenizerConfig& cfg, const std::vector<std::string>& texts);

// A run directory's tokenizer: run_dir/tokenizer, or a Hugging Face
// checkpoint's files beside its weights.
std::unique_ptr<Tokenizer> load_tokenizer_of_run(const std::string& run_dir);

// A run directory's tokenizer (load_tokenizer_of_run), checked against the
// vocabulary size its config.json records: a run where they differ was
// edited or mixed from two runs, and every command that loads it refuses it
// the same way (IoError naming `run_dir`).
std::unique_ptr<Tokenizer> load_run_tokenizer(const std::string& run_dir, std::int64_t config_vocab_size);

}  // namespace multihead
