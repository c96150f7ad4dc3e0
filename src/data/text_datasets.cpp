// SPDX-License-Identifier: Apache-2.0
#include "multihead/data/text_datasets.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include <fmt/ranges.h>

#include "multihead/core/error.h"
#include "multihead/core/rng.h"
#include "multihead/core/suggest.h"
#include "multihead/io/atomic_file.h"

namespace multihead {

namespace fs = std::filesystem;

namespace {

// Length of the UTF-8 sequence starting at s[i], or 0 if it is not valid there.
std::size_t utf8_sequence(const std::string& s, std::size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

}  // namespace

// The byte where s stops being valid UTF-8, or s.size().
std::size_t utf8_prefix(const std::string& s) {
  std::size_t i = 0;
  for (std::size_t n; i < s.size() && (n = utf8_sequence(s, i)) > 0;) i += n;
  return i;
}

void check_utf8(const std::string& s, const std::string& where) {
  const std::size_t i = utf8_prefix(s);
  check<IoError>(i == s.size(), "{}: invalid UTF-8 at byte {}", where, i);
}

bool is_utf8(const std::string& s) { return utf8_prefix(s) == s.size(); }

std::string sanitize_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

TextDataset load_aclimdb(const std::string& root, const std::string& split) {
  check<IoError>(split == "train" || split == "test", "aclImdb split must be train or test, got '{}'", split);
  TextDataset ds;
  ds.label_names = {"neg", "pos"};
  for (int label = 0; label < 2; ++label) {
    const fs::path dir = fs::path(root) / split / ds.label_names[static_cast<std::size_t>(label)];
    check<IoError>(fs::is_directory(dir), "{}: not a directory (expected the aclImdb layout {}/{{pos,neg}})",
                   dir.string(), split);
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      // <id>_<rating>.txt: the rating says which side of the split it is on.
      const std::string stem = f.stem().string();
      const auto us = stem.find('_');
      check<IoError>(us != std::string::npos && us > 0 && us + 1 < stem.size(),
                     "{}: file name is not <id>_<rating>.txt", f.string());
      int rating = 0;
      try {
        rating = std::stoi(stem.substr(us + 1));
      } catch (const std::exception&) {
        throw IoError(f.string() + ": rating in the file name is not a number");
      }
      check<IoError>(rating >= 1 && rating <= 10, "{}: rating {} is outside 1..10", f.string(), rating);
      std::string text = read_file(f.string());
      check_utf8(text, f.string());
      ds.examples.push_back({std::move(text), label});
    }
  }
  check<IoError>(!ds.examples.empty(), "{}/{}: no reviews found", root, split);
  return ds;
}

namespace {

// RFC 4180 records; line numbers are 1-based, of the record's first line.
struct Record {
  std::vector<std::string> fields;
  std::int64_t line = 0;
};

std::vector<Record> parse_delimited(const std::string& text, char delim, const std::string& path) {
  std::vector<Record> records;
  Record cur;
  std::string field;
  bool quoted = false, field_started = false;
  std::int64_t line = 1;
  cur.line = 1;
  auto end_field = [&] {
    cur.fields.push_back(std::move(field));
    field.clear();
    field_started = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && !field_started) {
      quoted = true;
      field_started = true;
    } else if (c == delim) {
      end_field();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_field();
      if (!(cur.fields.size() == 1 && cur.fields[0].empty())) records.push_back(std::move(cur));
      cur = Record{};
      cur.line = ++line;
    } else {
      field += c;
      field_started = true;
    }
  }
  check<IoError>(!quoted, "{}: line {}: unterminated quoted field", path, cur.line);
  if (field_started || !cur.fields.empty()) {
    end_field();
    records.push_back(std::move(cur));
  }
  return records;
}

}  // namespace

TextDataset load_delimited(const std::string& path, char delimiter, const std::string& text_column,
                           const std::string& label_column) {
  return parse_delimited_dataset(read_file(path), delimiter, text_column, label_column, path);
}

namespace {

// "'text' (the columns are: body, category; --text-column names another)":
// what a user needs to fix a column name, at once.
std::string missing_name(const std::string& name, const std::vector<std::string>& found, std::string_view noun,
                         std::string_view flag) {
  std::vector<std::string> quoted;
  for (const auto& f : found) quoted.push_back("'" + clip_text(f, 40) + "'");
  const std::string near = closest_name(name, found);
  const std::string mean = near.empty() ? "" : fmt::format("did you mean '{}'? ", clip_text(near, 40));
  return fmt::format("no {} named '{}' ({}the {}s are: {}; {} names another)", noun, clip_text(name, 40), mean, noun,
                     fmt::join(quoted, ", "), flag);
}

std::string_view flag_for(const std::string& name, const std::string& text_column) {
  return name == text_column ? "--text-column" : "--label-column";
}

// A label is a class's name: printable text, never a control character (a NUL
// inside one made a class that printed as another).
void check_label(const std::string& label, const std::string& path, std::int64_t line) {
  check<IoError>(!label.empty(), "{}: line {}: empty label", path, line);
  for (const char c : label) {
    const auto u = static_cast<unsigned char>(c);
    check<IoError>(u >= 0x20 && u != 0x7f,
                   "{}: line {}: the label has a control character (byte 0x{:02x}); labels are printable text", path,
                   line, static_cast<unsigned>(u));
  }
}

bool blank(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

}  // namespace

TextDataset labelled_dataset(std::vector<std::string> texts, const std::vector<std::string>& labels,
                             const std::string& path) {
  check<IoError>(!texts.empty(), "{}: no examples", path);
  check<IoError>(!std::all_of(texts.begin(), texts.end(), blank),
                 "{}: every text is empty (or only white space): there is nothing to learn from", path);
  TextDataset ds;
  for (auto& t : texts) ds.examples.push_back({std::move(t), 0});
  // Integer labels name classes in numeric order ("1".."5" are classes 0..4,
  // named "1".."5"): only the values present are classes, so a class with
  // no examples never enters the model, its F1 or the macro average. Other
  // labels are numbered in order of appearance. label_names records the
  // mapping (results.json's "labels").
  const bool all_int = std::all_of(labels.begin(), labels.end(), [](const std::string& l) {
    return !l.empty() && l.size() <= 18 &&
           std::all_of(l.begin(), l.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  });
  if (all_int) {
    std::map<std::int64_t, std::int64_t> ids;  // value -> class, in numeric order
    std::vector<std::int64_t> values(labels.size());
    for (std::size_t i = 0; i < labels.size(); ++i) {
      values[i] = std::stoll(labels[i]);  // "007" is 7
      ids.emplace(values[i], 0);
      check<IoError>(static_cast<std::int64_t>(ids.size()) <= kMaxClasses,
                     "{}: more than {} distinct labels; a classifier takes at most {} classes", path, kMaxClasses,
                     kMaxClasses);
    }
    for (auto& [value, id] : ids) {
      id = static_cast<std::int64_t>(ds.label_names.size());
      ds.label_names.push_back(std::to_string(value));
    }
    for (std::size_t i = 0; i < labels.size(); ++i) ds.examples[i].label = ids[values[i]];
  } else {
    std::map<std::string, std::int64_t> ids;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      auto [it, fresh] = ids.emplace(labels[i], static_cast<std::int64_t>(ds.label_names.size()));
      if (fresh) {
        check<IoError>(static_cast<std::int64_t>(ds.label_names.size()) < kMaxClasses,
                       "{}: more than {} distinct labels; a classifier takes at most {} classes", path, kMaxClasses,
                       kMaxClasses);
        ds.label_names.push_back(labels[i]);
      }
      ds.examples[i].label = it->second;
    }
  }
  return ds;
}

namespace {

// The named columns of a CSV or TSV file's rows, each name with the flag
// that names another in errors: rows[r][c] is row r's value of columns[c].
struct Columns {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::int64_t> lines;  // each row's first line in the file
};
Columns delimited_columns(const std::string& text, char delimiter,
                          const std::vector<std::pair<std::string, std::string_view>>& columns,
                          const std::string& path) {
  check_utf8(text, path);
  // A UTF-8 byte-order mark (spreadsheet exports write one) is not part of the first column's name.
  const std::string_view bom = "\xEF\xBB\xBF";
  const bool has_bom = text.starts_with(bom);
  std::vector<Record> records = parse_delimited(has_bom ? text.substr(bom.size()) : text, delimiter, path);
  check<IoError>(!records.empty(), "{}: empty file (expected a header row)", path);
  const auto& header = records.front().fields;
  // A file of the other delimiter reads as one column with the other inside: say so.
  const char other = delimiter == ',' ? '\t' : ',';
  const std::string hint =
      header.size() == 1 && header.front().find(other) != std::string::npos
          ? fmt::format("; its header has {} and no {}: give --source {}", other == '\t' ? "tabs" : "commas",
                        other == '\t' ? "commas" : "tabs", other == '\t' ? "tsv" : "csv")
          : "";
  std::vector<std::size_t> at;
  for (const auto& [name, flag] : columns) {
    auto it = std::find(header.begin(), header.end(), name);
    check<IoError>(it != header.end(), "{}: line 1: {}{}", path, missing_name(name, header, "column", flag), hint);
    at.push_back(static_cast<std::size_t>(it - header.begin()));
  }
  Columns out;
  for (std::size_t r = 1; r < records.size(); ++r) {
    const Record& rec = records[r];
    check<IoError>(rec.fields.size() == header.size(), "{}: line {}: {} fields, the header has {}", path, rec.line,
                   rec.fields.size(), header.size());
    std::vector<std::string> values;
    for (std::size_t c : at) values.push_back(rec.fields[c]);
    out.rows.push_back(std::move(values));
    out.lines.push_back(rec.line);
  }
  check<IoError>(!out.rows.empty(), "{}: no data rows after the header", path);
  return out;
}

// The named keys of a JSON Lines file's records (blank lines skipped), as
// delimited_columns: rows[r][c] is record r's value under keys[c].
struct JsonColumns {
  std::vector<std::vector<nlohmann::json>> rows;
  std::vector<std::int64_t> lines;
};
JsonColumns json_lines_columns(const std::string& bytes,
                               const std::vector<std::pair<std::string, std::string_view>>& keys,
                               const std::string& path) {
  check_utf8(bytes, path);
  JsonColumns out;
  std::int64_t line = 0;
  for (std::size_t at = 0; at < bytes.size();) {
    std::size_t end = bytes.find('\n', at);
    if (end == std::string::npos) end = bytes.size();
    std::string_view row(bytes.data() + at, end - at);
    at = end + 1;
    ++line;
    if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // a blank line
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(row);
    } catch (const nlohmann::json::exception& e) {
      // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 9: ... invalid string: ..."
      const std::string why = e.what();
      const std::size_t colon = why.find("] ");
      throw IoError(fmt::format("{}: line {}: not valid JSON ({})", path, line,
                                clip_text(colon == std::string::npos ? why : why.substr(colon + 2), 200)));
    }
    check<IoError>(j.is_object(), "{}: line {}: not a JSON object", path, line);
    std::vector<nlohmann::json> values;
    for (const auto& [key, flag] : keys) {
      if (!j.contains(key)) {
        std::vector<std::string> found;
        for (const auto& [k, v] : j.items()) found.push_back(k);
        throw IoError(fmt::format("{}: line {}: {}", path, line, missing_name(key, found, "key", flag)));
      }
      values.push_back(j[key]);  // a copy: the text and label may be one key
    }
    out.rows.push_back(std::move(values));
    out.lines.push_back(line);
  }
  check<IoError>(!out.rows.empty(), "{}: no records (expected one JSON object a line)", path);
  return out;
}

}  // namespace

TextDataset parse_delimited_dataset(const std::string& text, char delimiter, const std::string& text_column,
                                    const std::string& label_column, const std::string& path) {
  const Columns c = delimited_columns(
      text, delimiter,
      {{text_column, flag_for(text_column, text_column)}, {label_column, flag_for(label_column, text_column)}}, path);
  std::vector<std::string> texts, labels;
  for (std::size_t r = 0; r < c.rows.size(); ++r) {
    check_label(c.rows[r][1], path, c.lines[r]);
    texts.push_back(c.rows[r][0]);
    labels.push_back(c.rows[r][1]);
  }
  return labelled_dataset(std::move(texts), labels, path);
}

TextDataset parse_json_lines_dataset(const std::string& bytes, const std::string& text_key,
                                     const std::string& label_key, const std::string& path) {
  const JsonColumns c = json_lines_columns(
      bytes, {{text_key, flag_for(text_key, text_key)}, {label_key, flag_for(label_key, text_key)}}, path);
  std::vector<std::string> texts, labels;
  for (std::size_t r = 0; r < c.rows.size(); ++r) {
    const nlohmann::json& t = c.rows[r][0];
    const nlohmann::json& l = c.rows[r][1];
    check<IoError>(t.is_string(), "{}: line {}: '{}' is not a string", path, c.lines[r], text_key);
    check<IoError>(l.is_string() || l.is_number_unsigned(), "{}: line {}: '{}' is not a string or a class number", path,
                   c.lines[r], label_key);
    std::string label = l.is_string() ? l.get<std::string>() : std::to_string(l.get<std::uint64_t>());
    check_label(label, path, c.lines[r]);
    texts.push_back(t.get<std::string>());
    labels.push_back(std::move(label));
  }
  return labelled_dataset(std::move(texts), labels, path);
}

std::vector<NumberedText> parse_text_column(const std::string& bytes, const std::string& format,
                                            const std::string& column, const std::string& path) {
  check<ConfigError>(format == "csv" || format == "tsv" || format == "jsonl",
                     "a file read by column is csv, tsv or jsonl, not '{}'", format);
  std::vector<NumberedText> out;
  if (format == "jsonl") {
    const JsonColumns c = json_lines_columns(bytes, {{column, "--text-column"}}, path);
    for (std::size_t r = 0; r < c.rows.size(); ++r) {
      check<IoError>(c.rows[r][0].is_string(), "{}: line {}: '{}' is not a string", path, c.lines[r], column);
      out.push_back({c.lines[r], c.rows[r][0].get<std::string>()});
    }
    return out;
  }
  const Columns c = delimited_columns(bytes, format == "csv" ? ',' : '\t', {{column, "--text-column"}}, path);
  for (std::size_t r = 0; r < c.rows.size(); ++r) out.push_back({c.lines[r], c.rows[r][0]});
  return out;
}

void check_two_classes(const TextDataset& ds, const std::string& path) {
  const auto& ex = ds.examples;
  check<IoError>(ex.empty() || std::any_of(ex.begin(), ex.end(),
                                           [&](const TextExample& e) { return e.label != ex.front().label; }),
                 "{}: every row has the label '{}'; a classifier needs at least two classes", path,
                 ds.label_names[static_cast<std::size_t>(ex.front().label)]);
}

std::string labelled_format_of(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".csv") return "csv";
  if (ext == ".tsv" || ext == ".tab") return "tsv";
  if (ext == ".jsonl" || ext == ".ndjson") return "jsonl";
  return "";
}

TextDataset load_labelled_file(const std::string& path, const std::string& format, const std::string& text_column,
                               const std::string& label_column) {
  if (format == "jsonl") return parse_json_lines_dataset(read_file(path), text_column, label_column, path);
  check<ConfigError>(format == "csv" || format == "tsv", "a labelled file is csv, tsv or jsonl, not '{}'", format);
  return load_delimited(path, format == "csv" ? ',' : '\t', text_column, label_column);
}

std::string strip_mail_headers(const std::string& message) {
  for (const char* sep : {"\n\n", "\r\n\r\n"}) {
    const auto pos = message.find(sep);
    if (pos != std::string::npos) return message.substr(pos + std::string(sep).size());
  }
  return message;
}

TextDataset load_spamassassin(const std::string& data_dir, bool strip_headers) {
  static const std::pair<const char*, int> kGroups[] = {
      {"easy-ham-1", 0}, {"easy-ham-2", 0}, {"hard-ham-1", 0}, {"spam-1", 1}, {"spam-2", 1}};
  TextDataset ds;
  ds.label_names = {"ham", "spam"};
  for (const auto& [group, label] : kGroups) {
    const fs::path dir = fs::path(data_dir) / group;
    check<IoError>(fs::is_directory(dir), "{}: not a directory (run scripts/setup.sh --data to fetch the corpus)",
                   dir.string());
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(read_file(f.string()));
      } catch (const nlohmann::json::exception& e) {
        throw IoError(fmt::format("{}: not valid JSON ({})", f.string(), e.what()));
      }
      check<IoError>(j.is_object() && j.contains("text") && j["text"].is_string(),
                     "{}: record has no string field \"text\"", f.string());
      std::string text = j["text"].get<std::string>();
      // Mail comes in many charsets; bytes that are not UTF-8 become U+FFFD.
      ds.examples.push_back({sanitize_utf8(strip_headers ? strip_mail_headers(text) : text), label});
    }
  }
  check<IoError>(!ds.examples.empty(), "{}: no messages found", data_dir);
  return ds;
}

std::string load_text_corpus(const std::string& path) {
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    check<IoError>(!files.empty(), "{}: no .txt files in the folder", path);
  } else {
    files.push_back(path);
  }
  std::string text;
  for (const auto& f : files) {
    std::string part = read_file(f.string());
    check_utf8(part, f.string());
    if (!text.empty()) text += "\n\n";
    text += part;
  }
  check<IoError>(!text.empty(), "{}: empty text", path);
  return text;
}

namespace {

// 0 .. n - 1 in the seed's shuffled order (Fisher-Yates).
std::vector<std::int64_t> shuffled_indices(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = i;
  Rng rng(seed, 0x5b117);
  for (std::int64_t i = n - 1; i > 0; --i)
    std::swap(idx[static_cast<std::size_t>(i)], idx[rng.next_u32() % static_cast<std::uint32_t>(i + 1)]);
  return idx;
}

void check_fractions(double validation_fraction, double test_fraction) {
  check<ConfigError>(validation_fraction >= 0 && test_fraction >= 0 && validation_fraction + test_fraction < 1,
                     "validation and test fractions must be >= 0 and leave a training split");
}

// floor(fraction * n) shared among classes of sizes `sizes` in proportion,
// the remainder to the largest fractional parts (the first class on a tie),
// never more than `room` of a class.
std::vector<std::int64_t> quotas(const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& room,
                                 double fraction, std::int64_t n) {
  std::int64_t left = static_cast<std::int64_t>(fraction * static_cast<double>(n));
  std::vector<std::int64_t> q(sizes.size());
  std::vector<std::pair<double, std::size_t>> parts;
  for (std::size_t c = 0; c < sizes.size(); ++c) {
    const double exact = fraction * static_cast<double>(sizes[c]);
    q[c] = std::min(room[c], static_cast<std::int64_t>(exact));
    left -= q[c];
    parts.emplace_back(-(exact - static_cast<double>(q[c])), c);
  }
  std::stable_sort(parts.begin(), parts.end());
  for (std::size_t k = 0; left > 0 && k < parts.size(); ++k)
    if (q[parts[k].second] < room[parts[k].second]) ++q[parts[k].second], --left;
  return q;
}

}  // namespace

SplitIndices stratified_split_indices(const std::vector<std::int64_t>& labels, double validation_fraction,
                                      double test_fraction, std::uint64_t seed) {
  check_fractions(validation_fraction, test_fraction);
  const std::int64_t n = static_cast<std::int64_t>(labels.size());
  const std::vector<std::int64_t> order = shuffled_indices(n, seed);
  std::int64_t classes = 0;
  for (std::int64_t l : labels) classes = std::max(classes, l + 1);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(classes));
  for (std::int64_t l : labels) ++sizes[static_cast<std::size_t>(l)];
  const std::vector<std::int64_t> test = quotas(sizes, sizes, test_fraction, n);
  std::vector<std::int64_t> room(sizes.size());
  for (std::size_t c = 0; c < sizes.size(); ++c) room[c] = sizes[c] - test[c];
  const std::vector<std::int64_t> validation = quotas(sizes, room, validation_fraction, n);
  // Each class's examples in the shuffled order: its first test[c] to test, the next validation[c] to
  // validation, the rest to training; every split in the shuffled order.
  std::vector<std::int64_t> seen(sizes.size());
  SplitIndices s;
  for (std::int64_t i : order) {
    const std::size_t c = static_cast<std::size_t>(labels[static_cast<std::size_t>(i)]);
    const std::int64_t k = seen[c]++;
    (k < test[c] ? s.test : k < test[c] + validation[c] ? s.validation : s.train).push_back(i);
  }
  return s;
}

SplitIndices split_indices(std::int64_t n, double validation_fraction, double test_fraction, std::uint64_t seed) {
  check_fractions(validation_fraction, test_fraction);
  const std::vector<std::int64_t> idx = shuffled_indices(n, seed);
  const std::int64_t n_test = static_cast<std::int64_t>(test_fraction * static_cast<double>(n));
  const std::int64_t n_val = static_cast<std::int64_t>(validation_fraction * static_cast<double>(n));
  SplitIndices s;
  s.test.assign(idx.begin(), idx.begin() + n_test);
  s.validation.assign(idx.begin() + n_test, idx.begin() + n_test + n_val);
  s.train.assign(idx.begin() + n_test + n_val, idx.end());
  return s;
}

}  // namespace multihead
