// SPDX-License-Identifier: Apache-2.0
#include "multihead/data/hf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "hf_models.h"
#include "hf_text.h"
#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"

namespace multihead {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

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

// tokenizer.json's pipeline: added tokens split out of the text first, the
// rest normalised, pre-tokenised into words and each word split by the
// subword model; then framed as the post-processor says. Decoding skips the
// special tokens and runs the decoder.
class HfTokenizer : public Tokenizer {
 public:
  HfTokenizer(json source, const std::string& path) : source_(std::move(source)) {
    model_ = hf::read_subword_model(member(source_, "model", path), path);
    ids_ = model_->vocab();
    if (source_.contains("added_tokens") && !source_["added_tokens"].is_null()) {
      for (const json& a : source_["added_tokens"]) {
        AddedToken t{a.value("content", std::string()), a.value("id", std::int64_t{-1}), a.value("special", false),
                     a.value("lstrip", false),          a.value("rstrip", false),        a.value("single_word", false)};
        check<IoError>(!t.content.empty() && t.id >= 0 && t.id < kMaxVocab,
                       "{}: an added token lacks its content or id", path);
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
    for (const auto& [token, id] : ids_) vocab_size_ = std::max(vocab_size_, id + 1);
    pieces_.assign(static_cast<std::size_t>(vocab_size_), std::string());
    for (const auto& [token, id] : ids_) pieces_[static_cast<std::size_t>(id)] = token;
    for (const AddedToken& t : added_)
      if (t.special) special_ids_.push_back(t.id);

    read_normalizer(source_.value("normalizer", json()), path);
    read_pre_tokenizer(source_.value("pre_tokenizer", json()), path);
    read_post_processor(source_.value("post_processor", json()), path);
    read_decoder(source_.value("decoder", json()), path);
    frame_.unk = model_->unk() >= 0 ? model_->unk() : 0;
    frame_.pad = pad_id();
  }

  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> out;
    std::size_t done = 0;
    while (done < text.size()) {
      const Match m = next_added(text, done);
      encode_plain(text.substr(done, m.begin - done), done == 0, out);
      if (m.token == nullptr) break;
      out.push_back(m.token->id);
      done = m.end;
    }
    return out;
  }

  std::string decode(const std::vector<std::int64_t>& ids) const override {
    std::vector<std::string> tokens;
    for (std::int64_t id : ids)
      if (id >= 0 && id < vocab_size_ && std::find(special_ids_.begin(), special_ids_.end(), id) == special_ids_.end())
        tokens.push_back(pieces_[static_cast<std::size_t>(id)]);
    switch (decoder_) {
      case Decoder::kWordPiece: return hf::wordpiece_decode(tokens, decoder_prefix_, decoder_cleanup_);
      case Decoder::kByteLevel: return hf::byte_level_decode(tokens);
      case Decoder::kMetaspace:
        return hf::metaspace_decode(tokens, decoder_metaspace_.replacement,
                                    decoder_metaspace_.prepend != Prepend::kNever);
      case Decoder::kNone: break;
    }
    std::string s;
    for (std::size_t i = 0; i < tokens.size(); ++i) s += (i > 0 ? " " : "") + tokens[i];
    return s;
  }

  std::string piece(std::int64_t id) const override {
    if (id < 0 || id >= vocab_size_) return "<?>";
    const std::string& p = pieces_[static_cast<std::size_t>(id)];
    // A byte-level token shown as the text it stands for.
    return pre_tokenizer_ == PreTokenizer::kByteLevel ? hf::byte_level_decode({p}) : p;
  }
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::string kind() const override {
    const std::string t = model_->type();
    return t == "BPE" ? "hf_bpe" : t == "Unigram" ? "hf_unigram" : "wordpiece";
  }
  TokenFrame frame() const override { return frame_; }
  // Words split at white space (BERT's, GPT-2's expression, Metaspace's
  // split) and no Replace that matches or writes it; without a pre-tokeniser,
  // or with ByteLevel's use_regex or Metaspace's split off, a token may
  // cross it.
  bool tokens_end_at_white_space() const override {
    const bool splits = pre_tokenizer_ == PreTokenizer::kBert ||
                        (pre_tokenizer_ == PreTokenizer::kByteLevel && use_regex_) ||
                        (pre_tokenizer_ == PreTokenizer::kMetaspace && pre_metaspace_.split);
    return splits && !replace_touches_space_;
  }
  void save(const std::string& dir) const override {
    write_file_atomic((fs::path(dir) / "tokenizer.json").string(), source_.dump(2) + "\n");
  }

 private:
  enum class PreTokenizer { kNone, kBert, kByteLevel, kMetaspace };
  enum class Decoder { kNone, kWordPiece, kByteLevel, kMetaspace };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Metaspace {
    char32_t replacement = U'\u2581';
    Prepend prepend = Prepend::kAlways;
    bool split = true;
  };
  using Normalizer = std::function<std::u32string(const std::u32string&)>;
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

  // A stretch of text between added tokens; `at_start`: at the text's beginning.
  void encode_plain(std::string_view text, bool at_start, std::vector<std::int64_t>& out) const {
    if (text.empty()) return;
    std::u32string s = hf::decode_utf8(text);
    for (const Normalizer& n : normalizers_) s = n(s);
    std::vector<std::string> words;
    switch (pre_tokenizer_) {
      case PreTokenizer::kBert: words = hf::bert_pre_tokenize(s); break;
      case PreTokenizer::kByteLevel: words = hf::byte_level_pre_tokenize(s, add_prefix_space_, use_regex_); break;
      case PreTokenizer::kMetaspace:
        words = hf::metaspace_pre_tokenize(
            s, pre_metaspace_.replacement,
            pre_metaspace_.prepend == Prepend::kAlways || (pre_metaspace_.prepend == Prepend::kFirst && at_start),
            pre_metaspace_.split);
        break;
      case PreTokenizer::kNone:
        if (!s.empty()) words = {hf::encode_utf8(s)};
        break;
    }
    for (const std::string& w : words) model_->encode_word(w, out);
  }

  // One normaliser, or a Sequence of them, appended to normalizers_.
  void read_normalizer(const json& n, const std::string& path) {
    if (n.is_null()) return;
    const std::string type = type_of(n, path + ": normalizer");
    if (type == "Sequence") {
      for (const json& each : member(n, "normalizers", path + ": normalizer")) read_normalizer(each, path);
      return;
    }
    if (type == "BertNormalizer") {
      hf::BertNormalizer b;
      b.clean_text = n.value("clean_text", true);
      b.chinese = n.value("handle_chinese_chars", true);
      b.lowercase = n.value("lowercase", true);
      const json sa = n.value("strip_accents", json());
      b.strip_accents = sa.is_boolean() ? sa.get<bool>() : b.lowercase;
      normalizers_.push_back([b](const std::u32string& s) { return b(s); });
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
      normalizers_.push_back([type](const std::u32string& s) { return hf::normal_form(s, type); });
    } else if (type == "Lowercase") {
      normalizers_.push_back([](const std::u32string& s) { return hf::lower_case(s); });
    } else if (type == "Prepend") {
      const std::u32string p = hf::decode_utf8(n.value("prepend", std::string()));
      normalizers_.push_back([p](const std::u32string& s) { return s.empty() ? s : p + s; });
    } else if (type == "Replace") {
      const json& pattern = member(n, "pattern", path + ": normalizer");
      check<IoError>(pattern.contains("String") && pattern["String"].is_string(),
                     "{}: a Replace normaliser by regular expression is not read here (by string is)", path);
      const std::u32string from = hf::decode_utf8(pattern["String"].get<std::string>()),
                           to = hf::decode_utf8(n.value("content", std::string()));
      check<IoError>(!from.empty(), "{}: a Replace normaliser of the empty string", path);
      const auto spaced = [](const std::u32string& t) {
        return t.find_first_of(U" \t\n\v\f\r") != std::u32string::npos;
      };
      replace_touches_space_ = replace_touches_space_ || spaced(from) || spaced(to);
      normalizers_.push_back([from, to](std::u32string s) {
        for (std::size_t at = s.find(from); at != std::u32string::npos; at = s.find(from, at + to.size()))
          s.replace(at, from.size(), to);
        return s;
      });
    } else {
      throw IoError(
          fmt::format("{}: normalizer.type \"{}\" is not read here (BertNormalizer, NFC, NFD, NFKC, NFKD, "
                      "Lowercase, Prepend, Replace and Sequence are)",
                      path, type));
    }
  }

  // Metaspace's settings, in either of the forms tokenizers has written: prepend_scheme, or add_prefix_space.
  static Metaspace read_metaspace(const json& p, const std::string& path, const char* what) {
    Metaspace m;
    const std::u32string r = hf::decode_utf8(p.value("replacement", std::string("\u2581")));
    check<IoError>(r.size() == 1, "{}: {}.replacement is not one character", path, what);
    m.replacement = r[0];
    const std::string scheme = p.contains("prepend_scheme")        ? p.value("prepend_scheme", std::string("always"))
                               : p.value("add_prefix_space", true) ? "always"
                                                                   : "never";
    check<IoError>(scheme == "always" || scheme == "first" || scheme == "never",
                   "{}: {}.prepend_scheme \"{}\" is none of always, first and never", path, what, scheme);
    m.prepend = scheme == "always" ? Prepend::kAlways : scheme == "first" ? Prepend::kFirst : Prepend::kNever;
    m.split = p.value("split", true);
    return m;
  }

  // No decoder joins the tokens with spaces.
  void read_decoder(const json& d, const std::string& path) {
    if (d.is_null()) return;
    const std::string type = type_of(d, path + ": decoder");
    if (type == "ByteLevel") {
      decoder_ = Decoder::kByteLevel;
      return;
    }
    if (type == "Metaspace") {
      decoder_metaspace_ = read_metaspace(d, path, "decoder");
      decoder_ = Decoder::kMetaspace;
      return;
    }
    check<IoError>(type == "WordPiece",
                   "{}: decoder.type \"{}\" is not read here (WordPiece, ByteLevel and Metaspace are)", path, type);
    decoder_ = Decoder::kWordPiece;
    decoder_prefix_ = d.value("prefix", std::string("##"));
    decoder_cleanup_ = d.value("cleanup", true);
  }

  void read_pre_tokenizer(const json& p, const std::string& path) {
    if (p.is_null()) return;
    const std::string type = type_of(p, path + ": pre_tokenizer");
    if (type == "ByteLevel") {
      pre_tokenizer_ = PreTokenizer::kByteLevel;
      add_prefix_space_ = p.value("add_prefix_space", true);
      use_regex_ = p.value("use_regex", true);
      return;
    }
    if (type == "Metaspace") {
      pre_tokenizer_ = PreTokenizer::kMetaspace;
      pre_metaspace_ = read_metaspace(p, path, "pre_tokenizer");
      return;
    }
    check<IoError>(type == "BertPreTokenizer",
                   "{}: pre_tokenizer.type \"{}\" is not read here (BertPreTokenizer, ByteLevel and Metaspace are)",
                   path, type);
    pre_tokenizer_ = PreTokenizer::kBert;
  }

  std::vector<std::int64_t> ids_of(const std::string& token, const std::string& path) const {
    const auto it = ids_.find(token);
    check<IoError>(it != ids_.end(), "{}: the post-processor's token '{}' is not in the vocabulary", path, token);
    return {it->second};
  }

  // ByteLevel's post-processor only trims offsets: no frame.
  void read_post_processor(const json& p, const std::string& path) {
    if (p.is_null()) return;
    const std::string type = type_of(p, path + ": post_processor");
    if (type == "ByteLevel") return;
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
                   "{}: post_processor.type \"{}\" is not read here (TemplateProcessing, BertProcessing, "
                   "RobertaProcessing and ByteLevel are)",
                   path, type);
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
      std::vector<std::int64_t> ids =
          specials.contains(token) ? specials[token].value("ids", std::vector<std::int64_t>{}) : ids_of(token, path);
      auto& to = seen_sequence ? frame_.after : frame_.before;
      to.insert(to.end(), ids.begin(), ids.end());
    }
  }

  // The padding's id where tokenizer.json sets one, else [PAD] or <pad>, else
  // 0 (GPT-2 has no pad token: what pads a batch is masked out).
  std::int64_t pad_id() const {
    const json padding = source_.value("padding", json());
    if (padding.is_object() && padding.contains("pad_id")) return padding["pad_id"].get<std::int64_t>();
    for (const char* t : {"[PAD]", "<pad>"}) {
      const auto it = ids_.find(t);
      if (it != ids_.end()) return it->second;
    }
    return 0;
  }

  json source_;
  std::unique_ptr<hf::SubwordModel> model_;
  hf::Vocab ids_;
  std::vector<std::string> pieces_;
  std::vector<AddedToken> added_;
  std::vector<std::int64_t> special_ids_;
  std::int64_t vocab_size_ = 0;
  std::vector<Normalizer> normalizers_;  // in order
  PreTokenizer pre_tokenizer_ = PreTokenizer::kNone;
  bool add_prefix_space_ = true, use_regex_ = true;  // ByteLevel
  Metaspace pre_metaspace_;                          // Metaspace's pre-tokeniser
  bool replace_touches_space_ = false;               // a Replace normaliser matches or writes white space
  Decoder decoder_ = Decoder::kNone;
  Metaspace decoder_metaspace_;  // Metaspace's decoder, which has settings of its own
  std::string decoder_prefix_ = "##";
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
      added.push_back({{"id", vocab[t]},
                       {"content", t},
                       {"special", true},
                       {"normalized", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"single_word", false}});
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

bool is_hf_tokenizer_json(const nlohmann::json& j) {
  return j.is_object() && j.contains("model") && !j.contains("type");
}

bool has_hf_tokenizer(const std::string& dir) {
  return fs::exists(fs::path(dir) / "tokenizer.json") || fs::exists(fs::path(dir) / "vocab.txt");
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& dir) {
  const fs::path file = fs::path(dir) / "tokenizer.json";
  if (fs::exists(file)) {
    json j = read_json_file(file.string());
    check<IoError>(is_hf_tokenizer_json(j), "{}: not a tokenizer of Hugging Face's format (no \"model\")",
                   file.string());
    return std::make_unique<HfTokenizer>(std::move(j), file.string());
  }
  check<IoError>(fs::exists(fs::path(dir) / "vocab.txt"), "{}: no tokenizer.json or vocab.txt", dir);
  return std::make_unique<HfTokenizer>(tokenizer_json_of_vocab(dir), (fs::path(dir) / "vocab.txt").string());
}

}  // namespace multihead
