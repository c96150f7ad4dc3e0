#include "multihead/data/hf_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"

namespace multihead {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// --- Characters as `tokenizers` classifies them -----------------------------

// Assigned by Unicode 8.0: `tokenizers` reads punctuation, marks and control
// characters from tables of that version.
bool assigned_by_unicode_8(char32_t c) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return age[0] <= 8;
}

bool is_whitespace(char32_t c) { return c == '\t' || c == '\n' || c == '\r' || u_isUWhiteSpace(static_cast<UChar32>(c)); }

// Cc, Cf and Co, but not the white space among them.
bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto t = u_charType(static_cast<UChar32>(c));
  return (t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_PRIVATE_USE_CHAR) && assigned_by_unicode_8(c);
}

bool is_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONNECTOR_PUNCTUATION: case U_DASH_PUNCTUATION: case U_START_PUNCTUATION: case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION: case U_FINAL_PUNCTUATION: case U_OTHER_PUNCTUATION:
      return assigned_by_unicode_8(c);
    default:
      return false;
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

// UTF-8 to code points; a byte that is not UTF-8 becomes U+FFFD.
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

std::u32string nfd(const std::u32string& s) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = icu::Normalizer2::getNFDInstance(status);
  check<IoError>(U_SUCCESS(status), "ICU's NFD normaliser is not available: {}", u_errorName(status));
  const icu::UnicodeString in = icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(s.data()),
                                                              static_cast<std::int32_t>(s.size()));
  const icu::UnicodeString out = norm->normalize(in, status);
  check<IoError>(U_SUCCESS(status), "NFD normalisation failed: {}", u_errorName(status));
  std::u32string r(static_cast<std::size_t>(out.countChar32()), U'\0');
  out.toUTF32(reinterpret_cast<UChar32*>(r.data()), static_cast<std::int32_t>(r.size()), status);
  return r;
}

// --- The pipeline's stages, as tokenizer.json names them ---------------------

struct BertNormalizer {
  bool clean_text = true, chinese = true, strip_accents = true, lowercase = true;

  std::u32string operator()(std::u32string_view in) const {
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
      std::u32string d = nfd(s);
      s.clear();
      for (char32_t c : d)
        if (!is_nonspacing_mark(c)) s += c;
    }
    if (lowercase) {
      std::u32string l;
      l.reserve(s.size());
      for (char32_t c : s) {
        if (c == 0x130) {  // İ: the one unconditional lower case of two characters
          l += U"i\u0307";
        } else {
          l += static_cast<char32_t>(u_tolower(static_cast<UChar32>(c)));
        }
      }
      s = std::move(l);
    }
    return s;
  }
};

// Words split at white space (dropped) and around each punctuation mark (kept).
std::vector<std::u32string> bert_pre_tokenize(const std::u32string& s) {
  std::vector<std::u32string> words;
  std::u32string w;
  auto flush = [&] {
    if (!w.empty()) words.push_back(std::move(w));
    w.clear();
  };
  for (char32_t c : s) {
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      words.emplace_back(1, c);
    } else {
      w += c;
    }
  }
  flush();
  return words;
}

struct AddedToken {
  std::string content;
  std::int64_t id;
  bool special, lstrip, rstrip, single_word;
};

// --- The tokenizer -----------------------------------------------------------

const json& member(const json& j, const char* key, const std::string& where) {
  check<IoError>(j.is_object() && j.contains(key), "{}: no \"{}\"", where, key);
  return j[key];
}

std::string type_of(const json& j, const std::string& where) {
  const json& t = member(j, "type", where);
  check<IoError>(t.is_string(), "{}: \"type\" is not a string", where);
  return t.get<std::string>();
}

class WordPieceTokenizer : public Tokenizer {
 public:
  WordPieceTokenizer(json source, const std::string& path) : source_(std::move(source)) {
    const json& model = member(source_, "model", path);
    const std::string model_type = type_of(model, path + ": model");
    check<IoError>(model_type == "WordPiece",
                   "{}: model.type \"{}\" is not read here (WordPiece is)", path, model_type);
    const json& vocab = member(model, "vocab", path + ": model");
    check<IoError>(vocab.is_object() && !vocab.empty(), "{}: model.vocab is not a map of tokens to ids", path);
    for (const auto& [token, id] : vocab.items()) {
      check<IoError>(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < kMaxVocab,
                     "{}: the id of '{}' is not a token id", path, token);
      ids_[token] = id.get<std::int64_t>();
    }
    prefix_ = model.value("continuing_subword_prefix", std::string("##"));
    max_chars_ = model.value("max_input_chars_per_word", std::int64_t{100});
    const std::string unk = model.value("unk_token", std::string("[UNK]"));
    const auto u = ids_.find(unk);
    check<IoError>(u != ids_.end(), "{}: model.unk_token '{}' is not in the vocabulary", path, unk);
    unk_ = u->second;

    if (source_.contains("added_tokens") && !source_["added_tokens"].is_null()) {
      for (const json& a : source_["added_tokens"]) {
        AddedToken t{a.value("content", std::string()), a.value("id", std::int64_t{-1}), a.value("special", false),
                     a.value("lstrip", false), a.value("rstrip", false), a.value("single_word", false)};
        check<IoError>(!t.content.empty() && t.id >= 0 && t.id < kMaxVocab, "{}: an added token lacks its content or id",
                       path);
        check<IoError>(!a.value("normalized", false) || t.special || ids_.contains(t.content),
                       "{}: the added token '{}' is matched after normalisation, which is not read here", path,
                       t.content);
        ids_[t.content] = t.id;
        if (!a.value("normalized", false)) added_.push_back(t);
      }
    }
    // Longest first: the leftmost match that is longest wins, as in `tokenizers`.
    std::stable_sort(added_.begin(), added_.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
    for (const auto& [token, id] : ids_) {
      vocab_size_ = std::max(vocab_size_, id + 1);
    }
    pieces_.assign(static_cast<std::size_t>(vocab_size_), std::string());
    for (const auto& [token, id] : ids_) pieces_[static_cast<std::size_t>(id)] = token;
    for (const AddedToken& t : added_)
      if (t.special) special_ids_.push_back(t.id);

    read_normalizer(source_.value("normalizer", json()), path);
    read_pre_tokenizer(source_.value("pre_tokenizer", json()), path);
    read_post_processor(source_.value("post_processor", json()), path);
    read_decoder(source_.value("decoder", json()), path);
    frame_.unk = unk_;
    frame_.pad = pad_id(path);
  }

  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> out;
    std::size_t done = 0;
    while (done < text.size()) {
      const Match m = next_added(text, done);
      encode_plain(text.substr(done, m.begin - done), out);
      if (m.token == nullptr) break;
      out.push_back(m.token->id);
      done = m.end;
    }
    return out;
  }

  // As `tokenizers` decodes, skipping special tokens: every token but the
  // first loses its continuation prefix or gains a space before it, and each
  // is cleaned up on its own.
  std::string decode(const std::vector<std::int64_t>& ids) const override {
    std::string s;
    bool first = true;
    for (std::int64_t id : ids) {
      if (id < 0 || id >= vocab_size_ || std::find(special_ids_.begin(), special_ids_.end(), id) != special_ids_.end())
        continue;
      std::string p = pieces_[static_cast<std::size_t>(id)];
      if (!first) {
        if (decoder_prefix_ && p.starts_with(*decoder_prefix_)) {
          p.erase(0, decoder_prefix_->size());
        } else {
          p.insert(0, 1, ' ');
        }
      }
      first = false;
      s += decoder_cleanup_ ? cleanup(std::move(p)) : p;
    }
    return s;
  }

  std::string piece(std::int64_t id) const override {
    return id >= 0 && id < vocab_size_ ? pieces_[static_cast<std::size_t>(id)] : "<?>";
  }
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::string kind() const override { return "wordpiece"; }
  TokenFrame frame() const override { return frame_; }
  void save(const std::string& dir) const override {
    write_file_atomic((fs::path(dir) / "tokenizer.json").string(), source_.dump(2) + "\n");
  }

 private:
  struct Match {
    std::size_t begin, end;
    const AddedToken* token;
  };

  // The first added token in text from `from` on (with the white space its
  // lstrip and rstrip take), or {text.size(), text.size(), null}.
  Match next_added(std::string_view text, std::size_t from) const {
    for (std::size_t i = from; i < text.size() && !added_.empty(); ++i) {
      for (const AddedToken& t : added_) {
        if (text.compare(i, t.content.size(), t.content) != 0) continue;
        std::size_t b = i, e = i + t.content.size();
        if (t.single_word) {
          auto word_char = [](unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; };
          if ((b > 0 && word_char(static_cast<unsigned char>(text[b - 1]))) ||
              (e < text.size() && word_char(static_cast<unsigned char>(text[e]))))
            continue;
        }
        if (t.lstrip)
          while (b > from && std::isspace(static_cast<unsigned char>(text[b - 1]))) --b;
        if (t.rstrip)
          while (e < text.size() && std::isspace(static_cast<unsigned char>(text[e]))) ++e;
        return {b, e, &t};
      }
    }
    return {text.size(), text.size(), nullptr};
  }

  void encode_plain(std::string_view text, std::vector<std::int64_t>& out) const {
    if (text.empty()) return;
    std::u32string s = decode_utf8(text);
    if (normalizer_) s = (*normalizer_)(s);
    for (const std::u32string& w : bert_pre_tokenize(s)) word_pieces(w, out);
  }

  // Greedy longest-match-first pieces of one word, or [UNK] for all of it
  // when some part has none.
  void word_pieces(const std::u32string& word, std::vector<std::int64_t>& out) const {
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
        const auto it = ids_.find(sub);
        if (it != ids_.end()) {
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

  void read_normalizer(const json& n, const std::string& path) {
    if (n.is_null()) return;
    const std::string type = type_of(n, path + ": normalizer");
    check<IoError>(type == "BertNormalizer", "{}: normalizer.type \"{}\" is not read here (BertNormalizer is)", path,
                   type);
    BertNormalizer b;
    b.clean_text = n.value("clean_text", true);
    b.chinese = n.value("handle_chinese_chars", true);
    b.lowercase = n.value("lowercase", true);
    const json sa = n.value("strip_accents", json());
    b.strip_accents = sa.is_boolean() ? sa.get<bool>() : b.lowercase;
    normalizer_ = b;
  }

  // No decoder joins the tokens with spaces; WordPiece's glues its
  // continuations on and may clean up.
  void read_decoder(const json& d, const std::string& path) {
    if (d.is_null()) return;
    const std::string type = type_of(d, path + ": decoder");
    check<IoError>(type == "WordPiece", "{}: decoder.type \"{}\" is not read here (WordPiece is)", path, type);
    decoder_prefix_ = d.value("prefix", std::string("##"));
    decoder_cleanup_ = d.value("cleanup", true);
  }

  void read_pre_tokenizer(const json& p, const std::string& path) {
    const std::string type = p.is_null() ? "none" : type_of(p, path + ": pre_tokenizer");
    check<IoError>(type == "BertPreTokenizer",
                   "{}: pre_tokenizer.type \"{}\" is not read here with a WordPiece model (BertPreTokenizer is)", path,
                   type);
  }

  std::vector<std::int64_t> ids_of(const std::string& token, const std::string& path) const {
    const auto it = ids_.find(token);
    check<IoError>(it != ids_.end(), "{}: the post-processor's token '{}' is not in the vocabulary", path, token);
    return {it->second};
  }

  void read_post_processor(const json& p, const std::string& path) {
    if (p.is_null()) return;
    const std::string type = type_of(p, path + ": post_processor");
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      const json& cls = member(p, "cls", path + ": post_processor");
      const json& sep = member(p, "sep", path + ": post_processor");
      check<IoError>(cls.is_array() && cls.size() == 2 && sep.is_array() && sep.size() == 2,
                     "{}: post_processor's cls and sep are not [token, id] pairs", path);
      frame_.before = {cls[1].get<std::int64_t>()};
      frame_.after = {sep[1].get<std::int64_t>()};
      return;
    }
    check<IoError>(type == "TemplateProcessing",
                   "{}: post_processor.type \"{}\" is not read here (TemplateProcessing, BertProcessing and "
                   "RobertaProcessing are)", path, type);
    const json& single = member(p, "single", path + ": post_processor");
    const json specials = p.value("special_tokens", json::object());
    bool seen_sequence = false;
    for (const json& item : single) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      check<IoError>(item.contains("SpecialToken"), "{}: post_processor.single holds an item of an unknown kind", path);
      const std::string token = item["SpecialToken"].value("id", std::string());
      std::vector<std::int64_t> ids = specials.contains(token) ? specials[token].value("ids", std::vector<std::int64_t>{})
                                                               : ids_of(token, path);
      auto& to = seen_sequence ? frame_.after : frame_.before;
      to.insert(to.end(), ids.begin(), ids.end());
    }
  }

  std::int64_t pad_id(const std::string&) const {
    const json padding = source_.value("padding", json());
    if (padding.is_object() && padding.contains("pad_id")) return padding["pad_id"].get<std::int64_t>();
    for (const char* t : {"[PAD]", "<pad>"}) {
      const auto it = ids_.find(t);
      if (it != ids_.end()) return it->second;
    }
    return 0;
  }

  // The WordPiece decoder's clean-up of the spaces before punctuation and
  // English contractions.
  static std::string cleanup(std::string s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
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

  json source_;
  std::unordered_map<std::string, std::int64_t> ids_;
  std::vector<std::string> pieces_;
  std::vector<AddedToken> added_;
  std::vector<std::int64_t> special_ids_;
  std::string prefix_;
  std::int64_t max_chars_ = 100, unk_ = 0, vocab_size_ = 0;
  std::optional<BertNormalizer> normalizer_;
  std::optional<std::string> decoder_prefix_;
  bool decoder_cleanup_ = false;
  TokenFrame frame_{{}, {}, 0, 0};
};

json read_json_file(const std::string& path) { return ConfigReader::parse(read_file(path), path); }

// The tokenizer.json that transformers' BertTokenizerFast makes of a vocab.txt
// and the settings of tokenizer_config.json.
json tokenizer_json_of_vocab(const std::string& dir) {
  const std::string vocab_path = (fs::path(dir) / "vocab.txt").string();
  json settings = json::object();
  const fs::path config = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(config)) settings = read_json_file(config.string());
  check<IoError>(settings.is_object(), "{}: not a JSON object", config.string());
  json vocab = json::object();
  std::int64_t id = 0;
  for (const NumberedLine& line : read_lines(vocab_path)) vocab[line.text] = id++;
  check<IoError>(id > 0, "{}: no tokens", vocab_path);
  auto token = [&](const char* key, const char* fallback) {
    const json t = settings.value(key, json(fallback));
    return t.is_object() ? t.value("content", std::string(fallback)) : t.get<std::string>();
  };
  const std::string cls = token("cls_token", "[CLS]"), sep = token("sep_token", "[SEP]");
  json added = json::array();
  for (const char* key : {"pad_token", "unk_token", "cls_token", "sep_token", "mask_token"}) {
    const std::string t = token(key, key == std::string("pad_token")   ? "[PAD]"
                                      : key == std::string("unk_token") ? "[UNK]"
                                      : key == std::string("cls_token") ? "[CLS]"
                                      : key == std::string("sep_token") ? "[SEP]"
                                                                         : "[MASK]");
    if (vocab.contains(t))
      added.push_back({{"id", vocab[t]}, {"content", t}, {"special", true}, {"normalized", false},
                       {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  }
  check<IoError>(vocab.contains(cls) && vocab.contains(sep), "{}: lacks {} or {}", vocab_path, cls, sep);
  const bool lowercase = settings.value("do_lower_case", true);
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer",
           {{"type", "BertNormalizer"},
            {"clean_text", true},
            {"handle_chinese_chars", settings.value("tokenize_chinese_chars", true)},
            {"strip_accents", settings.value("strip_accents", json())},
            {"lowercase", lowercase}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor", {{"type", "BertProcessing"}, {"sep", {sep, vocab[sep]}}, {"cls", {cls, vocab[cls]}}}},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", token("unk_token", "[UNK]")},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 100},
            {"vocab", vocab}}}};
}

}  // namespace

bool is_hf_tokenizer_json(const nlohmann::json& j) { return j.is_object() && j.contains("model") && !j.contains("type"); }

bool has_hf_tokenizer(const std::string& dir) {
  return fs::exists(fs::path(dir) / "tokenizer.json") || fs::exists(fs::path(dir) / "vocab.txt");
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& dir) {
  const fs::path file = fs::path(dir) / "tokenizer.json";
  if (fs::exists(file)) {
    json j = read_json_file(file.string());
    check<IoError>(is_hf_tokenizer_json(j), "{}: not a tokenizer of Hugging Face's format (no \"model\")", file.string());
    return std::make_unique<WordPieceTokenizer>(std::move(j), file.string());
  }
  check<IoError>(fs::exists(fs::path(dir) / "vocab.txt"), "{}: no tokenizer.json or vocab.txt", dir);
  return std::make_unique<WordPieceTokenizer>(tokenizer_json_of_vocab(dir), (fs::path(dir) / "vocab.txt").string());
}

}  // namespace multihead
