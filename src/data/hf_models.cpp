// SPDX-License-Identifier: Apache-2.0
#include "hf_models.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hf_text.h"
#include "multihead/core/error.h"
#include "multihead/io/json_config.h"

namespace multihead::hf {
namespace {

using json = nlohmann::json;

void read_vocab(const json& model, const std::string& path, Vocab& vocab) {
  check<IoError>(model.contains("vocab") && model["vocab"].is_object() && !model["vocab"].empty(),
                 "{}: model.vocab is not a map of tokens to ids", path);
  for (const auto& [token, id] : model["vocab"].items()) {
    check<IoError>(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < kMaxVocab,
                   "{}: the id of '{}' is not a token id", path, token);
    vocab[token] = id.get<std::int64_t>();
  }
}

// A string member, or `fallback` where it is absent or null.
std::string string_or(const json& j, const char* key, const std::string& fallback, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  check<IoError>(j[key].is_string(), "{}: model.{} is not a string", path, key);
  return j[key].get<std::string>();
}

// Byte fallback: the <0xXX> token of each of s's bytes appended to out, where the vocabulary has
// them all (true); else nothing.
bool append_bytes(const Vocab& vocab, const std::string& s, std::vector<std::int64_t>& out) {
  std::vector<std::int64_t> bytes;
  for (unsigned char b : s) {
    const auto it = vocab.find(fmt::format("<0x{:02X}>", b));
    if (it == vocab.end()) return false;
    bytes.push_back(it->second);
  }
  out.insert(out.end(), bytes.begin(), bytes.end());
  return true;
}

class WordPiece : public SubwordModel {
 public:
  WordPiece(const json& model, const std::string& path) {
    read_vocab(model, path, vocab_);
    prefix_ = string_or(model, "continuing_subword_prefix", "##", path);
    max_chars_ = model.value("max_input_chars_per_word", std::int64_t{100});
    const std::string unk = string_or(model, "unk_token", "[UNK]", path);
    const auto u = vocab_.find(unk);
    check<IoError>(u != vocab_.end(), "{}: model.unk_token '{}' is not in the vocabulary", path, unk);
    unk_ = u->second;
  }

  // Greedy longest-match-first pieces, or the unknown token for the whole
  // word when some part has none.
  void encode_word(const std::string& utf8, std::vector<std::int64_t>& out) const override {
    const std::u32string word = decode_utf8(utf8);
    if (static_cast<std::int64_t>(word.size()) > max_chars_) {
      out.push_back(unk_);
      return;
    }
    const std::size_t mark = out.size();
    for (std::size_t start = 0; start < word.size();) {
      std::size_t end = word.size();
      std::int64_t found = -1;
      for (; end > start; --end) {
        std::string sub = encode_utf8(std::u32string_view(word).substr(start, end - start));
        if (start > 0) sub = prefix_ + sub;
        const auto it = vocab_.find(sub);
        if (it != vocab_.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) {
        out.resize(mark);
        out.push_back(unk_);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }
  std::string type() const override { return "WordPiece"; }

 private:
  std::string prefix_;
  std::int64_t max_chars_ = 100;
};

class Bpe : public SubwordModel {
 public:
  Bpe(const json& model, const std::string& path) {
    read_vocab(model, path, vocab_);
    const json dropout = model.value("dropout", json());
    check<IoError>(dropout.is_null() || (dropout.is_number() && dropout.get<double>() == 0.0),
                   "{}: model.dropout is set: a BPE that drops merges at random is not read here", path);
    prefix_ = string_or(model, "continuing_subword_prefix", "", path);
    suffix_ = string_or(model, "end_of_word_suffix", "", path);
    fuse_unk_ = model.value("fuse_unk", false);
    byte_fallback_ = model.value("byte_fallback", false);
    ignore_merges_ = model.value("ignore_merges", false);
    const std::string unk = string_or(model, "unk_token", "", path);
    if (!unk.empty()) {
      const auto u = vocab_.find(unk);
      check<IoError>(u != vocab_.end(), "{}: model.unk_token '{}' is not in the vocabulary", path, unk);
      unk_ = u->second;
    }
    check<IoError>(model.contains("merges") && model["merges"].is_array(), "{}: model.merges is not a list", path);
    std::int64_t rank = 0;
    for (const json& m : model["merges"]) {
      std::string a, b;
      if (m.is_string()) {  // "a b", the older form
        const std::string s = m.get<std::string>();
        const std::size_t space = s.find(' ');
        check<IoError>(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                       "{}: the merge '{}' is not two tokens", path, s);
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else {
        check<IoError>(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                       "{}: a merge is neither \"a b\" nor [a, b]", path);
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      const std::string joined = a + b.substr(std::min(prefix_.size(), b.size()));
      merges_[pair_key(id_of(a, path), id_of(b, path))] = {rank++, id_of(joined, path)};
    }
  }

  void encode_word(const std::string& word, std::vector<std::int64_t>& out) const override {
    if (ignore_merges_) {
      const auto it = vocab_.find(word);
      if (it != vocab_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    std::vector<Symbol> symbols = initial_symbols(word);
    merge(symbols);
    for (const Symbol& s : symbols)
      if (!s.gone) out.push_back(s.id);
  }
  std::string type() const override { return "BPE"; }

 private:
  struct Symbol {
    std::int64_t id;
    std::int64_t prev, next;  // neighbours in the word, -1 at its ends
    bool gone;
  };
  struct Merge {
    std::int64_t rank, new_id;
  };

  static std::uint64_t pair_key(std::int64_t a, std::int64_t b) {
    return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint64_t>(b);
  }

  std::int64_t id_of(const std::string& token, const std::string& path) const {
    const auto it = vocab_.find(token);
    check<IoError>(it != vocab_.end(), "{}: the merge token '{}' is not in the vocabulary", path, token);
    return it->second;
  }

  // A symbol for each character (with the prefix after the first and the
  // suffix on the last); a character outside the vocabulary becomes its
  // bytes' <0xXX> tokens (byte fallback), else the unknown token (one for a
  // run of them when fuse_unk), else nothing.
  std::vector<Symbol> initial_symbols(const std::string& word) const {
    std::vector<std::int64_t> ids;
    const std::u32string chars = decode_utf8(word);
    bool last_unk = false;
    for (std::size_t i = 0; i < chars.size(); ++i) {
      std::string s = encode_utf8(std::u32string_view(chars).substr(i, 1));
      const std::string raw = s;
      if (i > 0) s = prefix_ + s;
      if (i + 1 == chars.size()) s += suffix_;
      if (const auto it = vocab_.find(s); it != vocab_.end()) {
        ids.push_back(it->second);
        last_unk = false;
        continue;
      }
      if (byte_fallback_ && append_bytes(vocab_, raw, ids)) {
        last_unk = false;
        continue;
      }
      if (unk_ >= 0 && !(fuse_unk_ && last_unk)) ids.push_back(unk_);
      last_unk = unk_ >= 0;
    }
    std::vector<Symbol> symbols;
    for (std::size_t i = 0; i < ids.size(); ++i)
      symbols.push_back({ids[i], static_cast<std::int64_t>(i) - 1,
                         i + 1 < ids.size() ? static_cast<std::int64_t>(i) + 1 : -1, false});
    return symbols;
  }

  // Merges the pair of lowest rank, the leftmost of equals, until none is
  // left: a queue of candidate merges, each checked still to hold when its
  // turn comes.
  void merge(std::vector<Symbol>& symbols) const {
    struct Candidate {
      std::int64_t rank, pos, new_id;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto offer = [&](std::int64_t pos) {
      const std::int64_t next = symbols[static_cast<std::size_t>(pos)].next;
      if (next < 0) return;
      const auto it =
          merges_.find(pair_key(symbols[static_cast<std::size_t>(pos)].id, symbols[static_cast<std::size_t>(next)].id));
      if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
    };
    for (std::size_t i = 0; i < symbols.size(); ++i) offer(static_cast<std::int64_t>(i));
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& left = symbols[static_cast<std::size_t>(c.pos)];
      if (left.gone || left.next < 0) continue;
      Symbol& right = symbols[static_cast<std::size_t>(left.next)];
      const auto it = merges_.find(pair_key(left.id, right.id));
      if (it == merges_.end() || it->second.new_id != c.new_id) continue;
      left.id = c.new_id;
      right.gone = true;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = c.pos;
      if (left.prev >= 0) offer(left.prev);
      offer(c.pos);
    }
  }

  std::unordered_map<std::uint64_t, Merge> merges_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

// Unigram (SentencePiece's model, as `tokenizers` runs it): the split of a
// word into vocabulary pieces whose scores sum highest (Viterbi over its
// characters), a character no piece covers scoring the lowest score less 10
// as the unknown token, runs of unknown characters one token; with byte
// fallback, a piece outside the vocabulary becomes its bytes' <0xXX> tokens.
class Unigram : public SubwordModel {
 public:
  Unigram(const json& model, const std::string& path) {
    check<IoError>(model.contains("vocab") && model["vocab"].is_array() && !model["vocab"].empty(),
                   "{}: model.vocab is not a list of [piece, score]", path);
    double min_score = std::numeric_limits<double>::infinity();
    for (const json& entry : model["vocab"]) {
      check<IoError>(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_number(),
                     "{}: model.vocab is not a list of [piece, score]", path);
      const std::int64_t id = static_cast<std::int64_t>(scores_.size());
      check<IoError>(id < kMaxVocab, "{}: model.vocab holds more than {} pieces", path, kMaxVocab);
      const std::string piece = entry[0].get<std::string>();
      scores_.push_back(entry[1].get<double>());
      vocab_.emplace(piece, id);  // the first of equal pieces, as tokenizers keeps it
      longest_ = std::max(longest_, piece.size());
      min_score = std::min(min_score, scores_.back());
    }
    const json unk = model.value("unk_id", json());
    check<IoError>(unk.is_null() || (unk.is_number_integer() && unk.get<std::int64_t>() >= 0 &&
                                     unk.get<std::int64_t>() < static_cast<std::int64_t>(scores_.size())),
                   "{}: model.unk_id is not a piece's id", path);
    if (unk.is_number_integer()) unk_ = unk.get<std::int64_t>();
    unk_score_ = min_score - 10.0;
    byte_fallback_ = model.value("byte_fallback", false);
  }

  void encode_word(const std::string& word, std::vector<std::int64_t>& out) const override {
    for (const std::string& piece : best_split(word)) {
      if (const auto it = vocab_.find(piece); it != vocab_.end()) {
        out.push_back(it->second);
        continue;
      }
      if (byte_fallback_ && append_bytes(vocab_, piece, out)) continue;
      check<IoError>(unk_ >= 0, "a Unigram tokenizer without an unknown token meets '{}', which it cannot split",
                     piece);
      out.push_back(unk_);
    }
  }
  std::string type() const override { return "Unigram"; }

 private:
  // The best path's pieces, as strings (a run of unknown characters joined into one).
  std::vector<std::string> best_split(const std::string& s) const {
    struct Best {
      double score = 0;
      std::int64_t from = -1, id = -1;  // where its last piece starts; -1: not reached
    };
    const std::size_t n = s.size();
    std::vector<Best> best(n + 1);
    best[0].from = 0;
    for (std::size_t at = 0; at < n; at = next_char(s, at)) {
      if (best[at].from < 0) continue;
      const double here = best[at].score;
      const std::size_t char_end = next_char(s, at);
      bool single = false;
      // Every piece that begins here, shortest first.
      for (std::size_t len = 1; len <= longest_ && at + len <= n; ++len) {
        const auto it = vocab_.find(std::string_view(s).substr(at, len));
        if (it == vocab_.end()) continue;
        relax(best[at + len], here + scores_[static_cast<std::size_t>(it->second)], at, it->second);
        single = single || at + len == char_end;
      }
      if (!single) relax(best[char_end], here + unk_score_, at, unk_);
    }
    std::vector<std::string> pieces;
    std::string unknown;  // a run of unknown characters, gathered backwards
    for (std::size_t end = n; end > 0;) {
      const auto from = static_cast<std::size_t>(best[end].from);
      if (unk_ >= 0 && best[end].id == unk_) {
        unknown.insert(0, s, from, end - from);
      } else {
        if (!unknown.empty()) pieces.push_back(std::move(unknown)), unknown.clear();
        pieces.push_back(s.substr(from, end - from));
      }
      end = from;
    }
    if (!unknown.empty()) pieces.push_back(std::move(unknown));
    std::reverse(pieces.begin(), pieces.end());
    return pieces;
  }

  // The first path to reach a position keeps it against later ones of equal score.
  static void relax(auto& node, double score, std::size_t from, std::int64_t id) {
    if (node.from >= 0 && score <= node.score) return;
    node.score = score;
    node.from = static_cast<std::int64_t>(from);
    node.id = id;
  }

  static std::size_t next_char(const std::string& s, std::size_t at) {
    std::size_t k = at + 1;
    while (k < s.size() && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) ++k;
    return k;
  }

  std::vector<double> scores_;
  std::size_t longest_ = 0;
  double unk_score_ = 0;
  bool byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<SubwordModel> read_subword_model(const json& model, const std::string& path) {
  check<IoError>(model.is_object() && model.contains("type") && model["type"].is_string(), "{}: model has no \"type\"",
                 path);
  const std::string type = model["type"].get<std::string>();
  if (type == "WordPiece") return std::make_unique<WordPiece>(model, path);
  if (type == "BPE") return std::make_unique<Bpe>(model, path);
  if (type == "Unigram") return std::make_unique<Unigram>(model, path);
  throw IoError(fmt::format("{}: model.type \"{}\" is not read here (WordPiece, BPE and Unigram are)", path, type));
}

}  // namespace multihead::hf
