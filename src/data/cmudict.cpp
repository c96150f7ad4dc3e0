// SPDX-License-Identifier: Apache-2.0
#include "multihead/data/cmudict.h"

#include <cctype>
#include <unordered_map>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/data/text_datasets.h"
#include "multihead/io/atomic_file.h"

namespace multihead {

namespace {

// Latin-1 bytes as UTF-8 (ASCII unchanged).
std::string latin1_to_utf8(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

// An ARPAbet symbol: capital letters, then for vowels one stress digit 0-2.
bool is_phoneme(const std::string& p) {
  std::size_t i = 0;
  while (i < p.size() && std::isupper(static_cast<unsigned char>(p[i]))) ++i;
  if (i == 0) return false;
  return i == p.size() || (i + 1 == p.size() && p[i] >= '0' && p[i] <= '2');
}

}  // namespace

std::int64_t CmuDict::pronunciations() const {
  std::int64_t n = 0;
  for (const CmuWord& w : words) n += static_cast<std::int64_t>(w.pronunciations.size());
  return n;
}

CmuDict parse_cmudict(const std::string& text, const std::string& source, bool keep_stress) {
  // cmudict 0.7b itself is Latin-1; copies converted to UTF-8 are read as they are.
  const bool latin1 = !is_utf8(text);
  auto utf8 = [&](const std::string& s) { return latin1 ? latin1_to_utf8(s) : s; };
  CmuDict dict;
  std::unordered_map<std::string, std::size_t> index;  // word -> its place in dict.words
  std::size_t at = 0;
  for (std::int64_t line_no = 1; at < text.size(); ++line_no) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind(";;;", 0) == 0) continue;
    auto fail = [&](const std::string& why) {
      return IoError(fmt::format("{}:{}: {}: \"{}\"", source, line_no, why, utf8(line)));
    };
    const std::size_t space = line.find(' ');
    if (space == std::string::npos || space == 0) throw fail("expected a word, then its phonemes");
    std::string word = line.substr(0, space);
    // WORD(n): the n-th further pronunciation of WORD.
    if (const std::size_t open = word.rfind('('); open != std::string::npos && word.back() == ')') {
      const std::string n = word.substr(open + 1, word.size() - open - 2);
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || open == 0)
        throw fail("a variant is written WORD(n)");
      word.resize(open);
    }
    std::vector<std::string> phonemes;
    for (std::size_t p = space; p < line.size();) {
      p = line.find_first_not_of(' ', p);
      if (p == std::string::npos) break;
      const std::size_t q = std::min(line.find(' ', p), line.size());
      std::string ph = line.substr(p, q - p);
      if (!is_phoneme(ph)) throw fail(fmt::format("'{}' is not an ARPAbet symbol", utf8(ph)));
      if (!keep_stress && std::isdigit(static_cast<unsigned char>(ph.back()))) ph.pop_back();
      phonemes.push_back(std::move(ph));
      p = q;
    }
    if (phonemes.empty()) throw fail("no phonemes");
    word = utf8(word);
    auto [it, fresh] = index.try_emplace(word, dict.words.size());
    if (fresh) dict.words.push_back({word, {}});
    dict.words[it->second].pronunciations.push_back(std::move(phonemes));
  }
  check<IoError>(!dict.words.empty(), "{}: no pronunciations", source);
  return dict;
}

CmuDict load_cmudict(const std::string& path, bool keep_stress) {
  return parse_cmudict(read_file(path), path, keep_stress);
}

std::string regular_spelling_dictionary(std::int64_t words, std::int64_t extra_letters) {
  static const char* const kSounds[] = {"AE1", "B", "K", "D", "IY0", "F"};
  check<ConfigError>(words > 0 && words <= 180 && extra_letters >= 0, "a regular dictionary holds 1 to 180 words");
  std::string text = ";;; regular spellings: one phoneme a letter\n";
  for (std::int64_t n = 0; n < words; ++n) {
    // Three base-6 digits of n + 36 keep the words distinct; then up to extra_letters more.
    std::vector<std::int64_t> letters = {(n + 36) / 36 % 6, (n + 36) / 6 % 6, (n + 36) % 6};
    for (std::int64_t i = 0; i < n % (extra_letters + 1); ++i) letters.push_back((n * 5 + i) % 6);
    std::string word, pron;
    for (const std::int64_t c : letters) {
      word += static_cast<char>('A' + c);
      if (!pron.empty()) pron += ' ';
      pron += kSounds[c];
    }
    text += word + "  " + pron + "\n";
    if (n % 10 == 0) text += word + "(1)  " + pron + " IY0\n";
  }
  return text;
}

}  // namespace multihead
