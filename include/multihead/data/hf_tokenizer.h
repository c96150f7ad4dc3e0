// SPDX-License-Identifier: Apache-2.0
// Hugging Face tokenizers, as a checkpoint directory holds them, giving the
// ids that the `tokenizers` library gives:
//   tokenizer.json with a WordPiece model, BERT's normaliser (clean text,
//   Chinese characters apart, accents stripped, lower case) and
//   pre-tokeniser (white space and punctuation), framed as its
//   post-processor says ([CLS] ... [SEP]);
//   tokenizer.json with a BPE model and the ByteLevel pre-tokeniser and
//   decoder (RoBERTa's and GPT-2's), framed as RoBERTa's (<s> ... </s>) or
//   not at all (GPT-2's);
//   tokenizer.json with a Unigram model (SentencePiece's) and the Metaspace
//   pre-tokeniser and decoder, after the normalisers NFC, NFD, NFKC, NFKD,
//   Lowercase, Prepend and Replace (by string), in sequence;
//   vocab.txt with tokenizer_config.json, as transformers' BertTokenizerFast
//   builds the same tokenizer from them.
// Special tokens (added tokens not normalised, such as [CLS] or [MASK])
// written in a text are that token, as in `tokenizers`.
//
// Where `tokenizers` classifies characters by its own tables (Unicode 8.0's
// punctuation, marks and control characters) rather than the current
// standard, so does this: a character assigned since then is neither
// punctuation, nor an accent, nor removed.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "multihead/data/tokenizer.h"

namespace multihead {

// True for a tokenizer.json of Hugging Face's format (a "model" and no multihead "type").
bool is_hf_tokenizer_json(const nlohmann::json& j);

// True when `dir` holds a tokenizer.json of Hugging Face's format or a vocab.txt.
bool has_hf_tokenizer(const std::string& dir);

// The tokenizer of a Hugging Face directory (tokenizer.json first, else
// vocab.txt); a model, normaliser or pre-tokeniser of a kind not read here is
// an IoError naming it.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& dir);

}  // namespace multihead
