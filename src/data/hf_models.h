// SPDX-License-Identifier: Apache-2.0
// The subword models of Hugging Face's tokenizer.json ("model"): a
// pre-tokenised word to token ids, as the `tokenizers` library splits it.
#pragma once

#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace multihead::hf {

// Token to id, looked up by string_view without a copy (a model's inner
// loops try many substrings of a word).
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, std::int64_t, StringHash, std::equal_to<>>;

class SubwordModel {
 public:
  virtual ~SubwordModel() = default;
  // Appends the ids of one word (UTF-8, as the pre-tokeniser gave it).
  virtual void encode_word(const std::string& word, std::vector<std::int64_t>& out) const = 0;
  const Vocab& vocab() const { return vocab_; }
  // The unknown token's id, or -1 where the model has none (byte-level BPE).
  std::int64_t unk() const { return unk_; }
  // "WordPiece", "BPE" or "Unigram".
  virtual std::string type() const = 0;

 protected:
  Vocab vocab_;
  std::int64_t unk_ = -1;
};

// The model of tokenizer.json's "model" object: WordPiece (greedy longest
// match, "##" continuations), BPE (merges by rank; a continuation prefix,
// end-of-word suffix, unknown token, byte fallback and ignore_merges as
// tokenizer.json sets them) or Unigram (the split of highest score; byte
// fallback). Any other type, or BPE dropout, is an IoError naming `path`.
std::unique_ptr<SubwordModel> read_subword_model(const nlohmann::json& model, const std::string& path);

}  // namespace multihead::hf
