// SPDX-License-Identifier: Apache-2.0
#include "hf_text.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "multihead/core/error.h"

namespace multihead::hf {
namespace {

// --- Characters as `tokenizers` classifies them -----------------------------

// Assigned by Unicode 8.0: `tokenizers` reads punctuation, marks and control
// characters from tables of that version.
bool assigned_by_unicode_8(char32_t c) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] <= 8;
}

bool is_whitespace(char32_t c) {
  return c == '\t' || c == '\n' || c == '\r' || u_isUWhiteSpace(static_cast<UChar32>(c));
}

// Cc, Cf and Co, but not the white space among them.
bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto t = u_charType(static_cast<UChar32>(c));
  return (t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_PRIVATE_USE_CHAR) && assigned_by_unicode_8(c);
}

bool is_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION: return assigned_by_unicode_8(c);
    default: return false;
  }
}

bool is_nonspacing_mark(char32_t c) {
  return u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK && assigned_by_unicode_8(c);
}

bool is_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// GPT-2's classes: \p{L}, \p{N} and \s as the regular expression reads them.
bool is_letter(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0; }
bool is_number(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0; }
bool is_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

// GPT-2's byte alphabet: the printable bytes stand for themselves, the rest
// for U+0100 on, in byte order.
struct ByteAlphabet {
  std::array<std::string, 256> of_byte;  // as UTF-8
  std::array<int, 0x144> byte_of;        // code point to byte, -1 outside the alphabet
  ByteAlphabet() {
    byte_of.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : next++;
      of_byte[static_cast<std::size_t>(b)] = encode_utf8(std::u32string_view(&c, 1));
      byte_of[c] = b;
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet a;
  return a;
}

// The length of GPT-2's next piece in s from `i` on, as its pattern matches:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::size_t gpt2_piece(std::u32string_view s, std::size_t i) {
  const std::size_t n = s.size();
  if (s[i] == U'\'') {
    for (std::u32string_view c : {U"s", U"t", U"re", U"ve", U"m", U"ll", U"d"})
      if (s.substr(i + 1, c.size()) == c) return 1 + c.size();
  }
  const std::size_t j = i + (s[i] == U' ' && i + 1 < n ? 1 : 0);  // the optional space
  auto run = [&](auto in_class) {
    std::size_t k = j;
    while (k < n && in_class(s[k])) ++k;
    return k > j ? k - i : 0;
  };
  if (std::size_t m = run(is_letter)) return m;
  if (std::size_t m = run(is_number)) return m;
  if (std::size_t m = run([](char32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); })) return m;
  // White space: the whole run where it ends the text or a run of one, else
  // all of it but the last character (which goes with what follows).
  std::size_t k = i;
  while (k < n && is_space(s[k])) ++k;
  return k == n || k - i == 1 ? k - i : k - i - 1;
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const std::uint8_t*>(s.data());
  const auto n = static_cast<std::int32_t>(s.size());
  for (std::int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(p, i, n, c);
    out.push_back(c < 0 ? U'\uFFFD' : static_cast<char32_t>(c));
  }
  return out;
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) {
    char buf[4];
    std::int32_t k = 0;
    UBool error = false;
    U8_APPEND(reinterpret_cast<std::uint8_t*>(buf), k, 4, static_cast<UChar32>(c), error);
    if (error) continue;  // a surrogate or a value past U+10FFFF: not a character
    out.append(buf, static_cast<std::size_t>(k));
  }
  return out;
}

std::u32string BertNormalizer::operator()(std::u32string_view in) const {
  std::u32string s;
  s.reserve(in.size());
  for (char32_t c : in) {
    if (clean_text && (c == 0 || c == 0xFFFD || is_control(c))) continue;
    if (clean_text && is_whitespace(c)) c = ' ';
    if (chinese && is_chinese(c)) {
      s += U' ';
      s += c;
      s += U' ';
    } else {
      s += c;
    }
  }
  if (strip_accents) {
    std::u32string d = normal_form(s, "NFD");
    s.clear();
    for (char32_t c : d)
      if (!is_nonspacing_mark(c)) s += c;
  }
  return lowercase ? lower_case(s) : s;
}

std::u32string lower_case(std::u32string_view s) {
  std::u32string l;
  l.reserve(s.size());
  for (char32_t c : s) {
    if (c == 0x130) {  // İ: the one unconditional lower case of two characters
      l += U"i\u0307";
    } else {
      l += static_cast<char32_t>(u_tolower(static_cast<UChar32>(c)));
    }
  }
  return l;
}

std::u32string normal_form(std::u32string_view s, const std::string& form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = form == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                 : form == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                 : form == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                                  : icu::Normalizer2::getNFKDInstance(status);
  check<IoError>(U_SUCCESS(status), "ICU's {} normaliser is not available: {}", form, u_errorName(status));
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(s.data()), static_cast<std::int32_t>(s.size()));
  const icu::UnicodeString out = norm->normalize(in, status);
  check<IoError>(U_SUCCESS(status), "{} normalisation failed: {}", form, u_errorName(status));
  std::u32string r(static_cast<std::size_t>(out.countChar32()), U'\0');
  out.toUTF32(reinterpret_cast<UChar32*>(r.data()), static_cast<std::int32_t>(r.size()), status);
  return r;
}

std::vector<std::string> metaspace_pre_tokenize(std::u32string_view text, char32_t replacement, bool prepend,
                                                bool split) {
  std::u32string s(text);
  std::replace(s.begin(), s.end(), U' ', replacement);
  if (prepend && (s.empty() || s[0] != replacement)) s.insert(s.begin(), replacement);
  if (!split) return {encode_utf8(s)};
  // Split before each replacement character, which begins the piece after it.
  std::vector<std::string> pieces;
  std::size_t begin = 0;
  for (std::size_t i = 1; i <= s.size(); ++i) {
    if (i < s.size() && s[i] != replacement) continue;
    pieces.push_back(encode_utf8(std::u32string_view(s).substr(begin, i - begin)));
    begin = i;
  }
  return pieces;
}

std::string metaspace_decode(const std::vector<std::string>& tokens, char32_t replacement, bool prepended) {
  std::u32string out;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (char32_t c : decode_utf8(tokens[i])) {
      if (c != replacement) out += c;
      else if (i > 0 || !prepended) out += U' ';  // the first token's replacements are the prepended space
    }
  return encode_utf8(out);
}

std::vector<std::string> bert_pre_tokenize(std::u32string_view s) {
  std::vector<std::string> words;
  std::u32string w;
  auto flush = [&] {
    if (!w.empty()) words.push_back(encode_utf8(w));
    w.clear();
  };
  for (char32_t c : s) {
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      words.push_back(encode_utf8(std::u32string_view(&c, 1)));
    } else {
      w += c;
    }
  }
  flush();
  return words;
}

std::vector<std::string> byte_level_pre_tokenize(std::u32string_view text, bool add_prefix_space, bool use_regex) {
  std::u32string s;
  if (add_prefix_space && (text.empty() || text[0] != U' ')) s.push_back(U' ');
  s += text;
  const ByteAlphabet& alphabet = byte_alphabet();
  std::vector<std::string> pieces;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = use_regex ? gpt2_piece(s, i) : s.size() - i;
    std::string piece;
    for (unsigned char b : encode_utf8(std::u32string_view(s).substr(i, len))) piece += alphabet.of_byte[b];
    pieces.push_back(std::move(piece));
    i += len;
  }
  return pieces;
}

std::string byte_level_decode(const std::vector<std::string>& tokens) {
  const ByteAlphabet& alphabet = byte_alphabet();
  std::string bytes;
  for (const std::string& t : tokens) {
    std::string b;
    bool in_alphabet = true;
    for (char32_t c : decode_utf8(t)) {
      if (c >= alphabet.byte_of.size() || alphabet.byte_of[c] < 0) {
        in_alphabet = false;
        break;
      }
      b += static_cast<char>(alphabet.byte_of[c]);
    }
    bytes += in_alphabet ? b : t;
  }
  return encode_utf8(decode_utf8(bytes));
}

namespace {

// The clean-up of the spaces before punctuation and English contractions.
std::string cleanup(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    // Every match of the text as it was before this rule, left to right (Rust's str::replace).
    std::string out;
    std::size_t done = 0;
    for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, done)) {
      out.append(s, done, at - done).append(to);
      done = at + std::strlen(from);
    }
    s = out.append(s, done);
  }
  return s;
}

}  // namespace

std::string wordpiece_decode(const std::vector<std::string>& tokens, const std::string& prefix, bool clean) {
  std::string s;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::string p = tokens[i];
    if (i > 0) {
      if (p.starts_with(prefix)) {
        p.erase(0, prefix.size());
      } else {
        p.insert(0, 1, ' ');
      }
    }
    s += clean ? cleanup(std::move(p)) : p;
  }
  return s;
}

}  // namespace multihead::hf
