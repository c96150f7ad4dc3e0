// SPDX-License-Identifier: Apache-2.0
// The text stages of Hugging Face's tokenizers (tokenizer.json's normalizer,
// pre_tokenizer and decoder), as the `tokenizers` library applies them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace multihead::hf {

// UTF-8 to code points; an ill-formed sequence becomes one U+FFFD for each
// maximal subpart (as Rust's String::from_utf8_lossy reads bytes).
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);

// BertNormalizer: control characters removed and white space made a space
// (clean_text), a space either side of each CJK ideograph, accents stripped
// (NFD, then non-spacing marks dropped), lower case. Characters are classed by
// Unicode 8.0's tables, as `tokenizers` classes them.
struct BertNormalizer {
  bool clean_text = true, chinese = true, strip_accents = true, lowercase = true;
  std::u32string operator()(std::u32string_view in) const;
};

// Lower case as `tokenizers` lowers (each character on its own, by its full
// mapping: İ becomes two characters, a final sigma is σ).
std::u32string lower_case(std::u32string_view s);

// A Unicode normal form: "NFC", "NFD", "NFKC" or "NFKD".
std::u32string normal_form(std::u32string_view s, const std::string& form);

// BertPreTokenizer: words split at white space (dropped) and around each
// punctuation mark (kept), as UTF-8.
std::vector<std::string> bert_pre_tokenize(std::u32string_view s);

// ByteLevel: GPT-2's split ('s 't 're 've 'm 'll 'd, then runs of letters,
// of digits and of other characters, each with the space before it, and runs
// of white space) when `use_regex`, then each piece's UTF-8 bytes written as
// GPT-2's printable byte alphabet. A space goes first when `add_prefix_space`
// and the text does not begin with one.
std::vector<std::string> byte_level_pre_tokenize(std::u32string_view s, bool add_prefix_space, bool use_regex);

// Metaspace (SentencePiece's white space): each space becomes `replacement`
// (▁), which is put first where `prepend` and the text does not begin with
// it; where `split`, the text is cut before each replacement character.
std::vector<std::string> metaspace_pre_tokenize(std::u32string_view s, char32_t replacement, bool prepend, bool split);

// The Metaspace decoder: replacement characters become spaces, but those of
// the first token where a space was `prepended` are dropped.
std::string metaspace_decode(const std::vector<std::string>& tokens, char32_t replacement, bool prepended);

// The ByteLevel decoder: each token's characters back to bytes (a token with
// a character outside the alphabet is its own UTF-8), all read as lossy UTF-8.
std::string byte_level_decode(const std::vector<std::string>& tokens);

// The WordPiece decoder: `prefix` taken off each continuation, a space before
// every other token but the first, and each token cleaned up on its own (the
// space before punctuation and English contractions removed) when `cleanup`.
std::string wordpiece_decode(const std::vector<std::string>& tokens, const std::string& prefix, bool cleanup);

}  // namespace multihead::hf
