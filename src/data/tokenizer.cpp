// SPDX-License-Identifier: Apache-2.0
#include "multihead/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "multihead/core/error.h"
#include "multihead/core/suggest.h"
#include "multihead/data/hf_tokenizer.h"
#include "multihead/io/atomic_file.h"

namespace multihead {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const char* const kSpecials[] = {"<pad>", "<unk>", "<cls>", "<eos>"};
constexpr std::int64_t kNumSpecials = 4;

// UTF-8 code points of s; bytes that are not UTF-8 become U+FFFD.
std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (std::size_t k = 1; k < n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      ok = ok && (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    out.push_back(ok ? cp : 0xFFFD);
    i += ok ? n : 1;
  }
  return out;
}

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A tokenizer over a fixed list of tokens after the specials.
class VocabTokenizer : public Tokenizer {
 public:
  VocabTokenizer(std::string kind, std::vector<std::string> tokens, bool lowercase)
      : kind_(std::move(kind)), tokens_(std::move(tokens)), lowercase_(lowercase) {
    for (std::size_t i = 0; i < tokens_.size(); ++i)
      ids_.emplace(tokens_[i], static_cast<std::int64_t>(i) + kNumSpecials);
  }
  std::int64_t vocab_size() const override { return kNumSpecials + static_cast<std::int64_t>(tokens_.size()); }
  std::string kind() const override { return kind_; }
  std::string piece(std::int64_t id) const override {
    if (id >= 0 && id < kNumSpecials) return kSpecials[id];
    if (id >= kNumSpecials && id < vocab_size()) return tokens_[static_cast<std::size_t>(id - kNumSpecials)];
    return "<?>";
  }
  std::int64_t id(const std::string& t) const {
    auto it = ids_.find(t);
    return it == ids_.end() ? kUnkId : it->second;
  }
  void save(const std::string& dir) const override {
    json j = {{"type", kind_}, {"tokens", tokens_}, {"lowercase", lowercase_}, {"specials", kSpecials}};
    write_file_atomic((fs::path(dir) / "tokenizer.json").string(), j.dump(1) + "\n");
  }

 protected:
  std::string kind_;
  std::vector<std::string> tokens_;
  bool lowercase_;
  std::unordered_map<std::string, std::int64_t> ids_;
};

class CharTokenizer : public VocabTokenizer {
 public:
  explicit CharTokenizer(std::vector<std::string> chars) : VocabTokenizer("char", std::move(chars), false) {}
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> out;
    for (char32_t cp : code_points(text)) out.push_back(id(utf8(cp)));
    return out;
  }
  std::string decode(const std::vector<std::int64_t>& ids) const override {
    std::string s;
    for (std::int64_t i : ids)
      if (i >= kNumSpecials) s += piece(i);
    return s;
  }
};

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    std::size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) words.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

class WordTokenizer : public VocabTokenizer {
 public:
  WordTokenizer(std::vector<std::string> words, bool lowercase) : VocabTokenizer("word", std::move(words), lowercase) {}
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> out;
    for (const auto& w : split_words(lowercase_ ? lower_ascii(text) : std::string(text))) out.push_back(id(w));
    return out;
  }
  std::string decode(const std::vector<std::int64_t>& ids) const override {
    std::string s;
    for (std::int64_t i : ids) {
      if (i < kNumSpecials && i != kUnkId) continue;
      if (!s.empty()) s += ' ';
      s += piece(i);
    }
    return s;
  }
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string proto) : proto_(std::move(proto)) {
    const auto status = sp_.LoadFromSerializedProto(proto_);
    check<IoError>(status.ok(), "cannot load the SentencePiece model: {}", status.ToString());
  }
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    check<Error>(status.ok(), "SentencePiece encode failed: {}", status.ToString());
    return {ids.begin(), ids.end()};
  }
  std::string decode(const std::vector<std::int64_t>& ids) const override {
    std::vector<int> v;
    for (std::int64_t i : ids) {
      // Checked before narrowing to SentencePiece's int: 2^40 + 7 is no id 7.
      check<ShapeError>(i < vocab_size(), "token id {} is outside the vocabulary [0, {})", i, vocab_size());
      if (i >= kNumSpecials) v.push_back(static_cast<int>(i));
    }
    std::string out;
    const auto status = sp_.Decode(v, &out);
    check<Error>(status.ok(), "SentencePiece decode failed: {}", status.ToString());
    return out;
  }
  std::string piece(std::int64_t id) const override {
    if (id < 0 || id >= vocab_size()) return "<?>";
    return sp_.IdToPiece(static_cast<int>(id));
  }
  std::int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  std::string kind() const override { return "sentencepiece"; }
  void save(const std::string& dir) const override {
    write_file_atomic((fs::path(dir) / "tokenizer.model").string(), proto_);
    write_file_atomic((fs::path(dir) / "tokenizer.json").string(),
                      json{{"type", "sentencepiece"}, {"model", "tokenizer.model"}}.dump(1) + "\n");
  }

 private:
  std::string proto_;
  sentencepiece::SentencePieceProcessor sp_;
};

// Feeds the training texts to SentencePiece line by line.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& texts) : texts_(texts) { advance(); }
  bool done() const override { return text_ >= texts_.size(); }
  void Next() override {
    pos_ = end_ + 1;
    advance();
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (text_ < texts_.size()) {
      const std::string& t = texts_[text_];
      if (pos_ > t.size()) {
        ++text_, pos_ = 0;
        continue;
      }
      end_ = t.find('\n', pos_);
      if (end_ == std::string::npos) end_ = t.size();
      line_ = t.substr(pos_, end_ - pos_);
      if (!line_.empty()) return;
      pos_ = end_ + 1;
    }
  }
  const std::vector<std::string>& texts_;
  std::size_t text_ = 0, pos_ = 0, end_ = 0;
  std::string line_;
};

// SentencePiece's trainer logs its arguments to stderr whatever its log
// level; a library must not print, so stderr is closed while it runs (its
// errors still come back as a status, which we turn into an exception).
class QuietStderr {
 public:
  QuietStderr() : saved_(::dup(2)) {
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved_ >= 0 && null >= 0) ::dup2(null, 2);
    if (null >= 0) ::close(null);
  }
  ~QuietStderr() {
    if (saved_ >= 0) {
      ::dup2(saved_, 2);
      ::close(saved_);
    }
  }
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_;
};

std::vector<std::string> most_frequent(const std::map<std::string, std::int64_t>& counts, std::int64_t cap) {
  std::vector<std::pair<std::string, std::int64_t>> v(counts.begin(), counts.end());
  // Most frequent first; ties in byte order, so the vocabulary is the same everywhere.
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> out;
  for (const auto& [t, n] : v) {
    if (static_cast<std::int64_t>(out.size()) >= cap) break;
    out.push_back(t);
  }
  return out;
}

}  // namespace

TokenizerKind parse_tokenizer_kind(const std::string& s) {
  if (s == "sentencepiece") return TokenizerKind::kSentencePiece;
  if (s == "char") return TokenizerKind::kChar;
  if (s == "word") return TokenizerKind::kWord;
  if (s == "wordpiece") return TokenizerKind::kWordPiece;
  if (s == "hf_bpe") return TokenizerKind::kBpe;
  if (s == "hf_unigram") return TokenizerKind::kUnigram;
  throw ConfigError(
      fmt::format("tokenizer must be sentencepiece, char, word, wordpiece, hf_bpe or hf_unigram, got \"{}\"{}", s,
                  did_you_mean(s, {"sentencepiece", "char", "word", "wordpiece", "hf_bpe", "hf_unigram"})));
}

const char* tokenizer_kind_name(TokenizerKind k) {
  switch (k) {
    case TokenizerKind::kChar: return "char";
    case TokenizerKind::kWord: return "word";
    case TokenizerKind::kWordPiece: return "wordpiece";
    case TokenizerKind::kBpe: return "hf_bpe";
    case TokenizerKind::kUnigram: return "hf_unigram";
    case TokenizerKind::kSentencePiece: break;
  }
  return "sentencepiece";
}

std::unique_ptr<Tokenizer> train_tokenizer(const TokenizerConfig& cfg, const std::vector<std::string>& texts) {
  check<ConfigError>(
      cfg.kind != TokenizerKind::kWordPiece && cfg.kind != TokenizerKind::kBpe && cfg.kind != TokenizerKind::kUnigram,
      "a {} tokenizer is a pretrained checkpoint's: name that checkpoint (--init-from or "
      "--tokenizer-from) rather than train one",
      tokenizer_kind_name(cfg.kind));
  check<ConfigError>(cfg.vocab_size > kNumSpecials, "vocab_size must exceed the {} special tokens, got {}",
                     kNumSpecials, cfg.vocab_size);
  check<IoError>(!texts.empty(), "cannot train a tokenizer on no text");
  const std::int64_t cap = cfg.vocab_size - kNumSpecials;
  if (cfg.kind == TokenizerKind::kChar) {
    std::map<std::string, std::int64_t> counts;
    for (const auto& t : texts)
      for (char32_t cp : code_points(t)) ++counts[utf8(cp)];
    return std::make_unique<CharTokenizer>(most_frequent(counts, cap));
  }
  if (cfg.kind == TokenizerKind::kWord) {
    std::map<std::string, std::int64_t> counts;
    for (const auto& t : texts)
      for (const auto& w : split_words(cfg.lowercase ? lower_ascii(t) : t)) ++counts[w];
    return std::make_unique<WordTokenizer>(most_frequent(counts, cap), cfg.lowercase);
  }
  check<ConfigError>(cfg.model_type == "bpe" || cfg.model_type == "unigram",
                     "SentencePiece model_type must be bpe or unigram, got \"{}\"{}", cfg.model_type,
                     did_you_mean(cfg.model_type, {"bpe", "unigram"}));
  const std::string args = fmt::format(
      "--model_type={} --vocab_size={} --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3 --pad_piece=<pad> "
      "--unk_piece=<unk> --bos_piece=<cls> --eos_piece=<eos> --character_coverage=0.9995 "
      "--input_sentence_size=200000 --shuffle_input_sentence=true --max_sentence_length=4096 "
      "--hard_vocab_limit=false --num_threads=2 --minloglevel=2 --seed_sentencepiece_size=200000",
      cfg.model_type, cfg.vocab_size);
  LineIterator lines(texts);
  std::string proto;
  sentencepiece::util::Status status;
  {
    QuietStderr quiet;
    status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &proto);
  }
  check<Error>(status.ok(), "SentencePiece training failed: {}", status.ToString());
  return std::make_unique<SentencePieceTokenizer>(std::move(proto));
}

std::unique_ptr<Tokenizer> load_tokenizer_of_run(const std::string& run_dir) {
  // A Hugging Face checkpoint keeps its tokenizer files beside the weights.
  const fs::path own = fs::path(run_dir) / "tokenizer";
  return !fs::exists(own) && has_hf_tokenizer(run_dir) ? load_hf_tokenizer(run_dir) : Tokenizer::load(own.string());
}

std::unique_ptr<Tokenizer> load_run_tokenizer(const std::string& run_dir, std::int64_t config_vocab_size) {
  std::unique_ptr<Tokenizer> tok = load_tokenizer_of_run(run_dir);
  check<IoError>(config_vocab_size == tok->vocab_size(),
                 "{}: config.json has vocab_size {} but the run's tokenizer has {} tokens", run_dir, config_vocab_size,
                 tok->vocab_size());
  return tok;
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& dir) {
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::exists(path) && fs::exists(fs::path(dir) / "vocab.txt")) return load_hf_tokenizer(dir);
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    throw IoError(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
  if (is_hf_tokenizer_json(j)) return load_hf_tokenizer(dir);
  check<IoError>(j.is_object() && j.contains("type") && j["type"].is_string(), "{}: no tokenizer type", path);
  const std::string type = j["type"];
  if (type == "sentencepiece")
    return std::make_unique<SentencePieceTokenizer>(read_file((fs::path(dir) / "tokenizer.model").string()));
  check<IoError>(type == "char" || type == "word", "{}: unknown tokenizer type \"{}\"", path, type);
  check<IoError>(j.contains("tokens") && j["tokens"].is_array(), "{}: no token list", path);
  std::vector<std::string> tokens;
  for (const auto& t : j["tokens"]) {
    check<IoError>(t.is_string(), "{}: tokens must be strings", path);
    tokens.push_back(t.get<std::string>());
  }
  check<IoError>(!tokens.empty(), "{}: empty token list", path);
  if (type == "char") return std::make_unique<CharTokenizer>(std::move(tokens));
  return std::make_unique<WordTokenizer>(std::move(tokens), j.value("lowercase", true));
}

std::vector<std::int64_t> Tokenizer::encode_prefix(std::string_view text, std::size_t n) const {
  // Prefixes of 6 bytes a token to begin with (English text takes about 4
  // with a vocabulary of thousands), doubled until they hold more than n
  // tokens: at most about twice the work of the prefix needed.
  for (std::size_t want = std::max<std::size_t>(6 * n, 64); tokens_end_at_white_space() && want < text.size();
       want *= 2) {
    const std::size_t cut = text.find_first_of(" \t\n\v\f\r", want);
    if (cut == std::string_view::npos) break;
    std::vector<std::int64_t> ids = encode(text.substr(0, cut));
    if (ids.size() > n) {
      ids.resize(n);
      return ids;
    }
  }
  std::vector<std::int64_t> ids = encode(text);
  if (ids.size() > n) ids.resize(n);
  return ids;
}

}  // namespace multihead
