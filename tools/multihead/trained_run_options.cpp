// SPDX-License-Identifier: Apache-2.0
#include "commands.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "multihead/data/text_datasets.h"
#include "multihead/io/atomic_file.h"
#include "multihead/train/checkpoint.h"

namespace multihead::cli {

void add_trained_run_options(CLI::App& sub, std::string& run, AnswerSettings& s) {
  sub.add_option("--run", run, "Run directory of multihead train (text classifier, language model or pronunciation)")
      ->required();
  sub.add_option("--tokens", s.tokens, "Language models: tokens to generate")->capture_default_str();
  sub.add_option("--temperature", s.sampling.temperature, "Language models: 0 for greedy")->capture_default_str();
  sub.add_option("--top-k", s.sampling.top_k, "Language models: sample among the k most likely (0: all)");
  sub.add_option("--top-p", s.sampling.top_p, "Language models: nucleus mass")->capture_default_str();
  sub.add_option("--seed", s.sampling.seed, "Language models: sampling seed")
      ->check(kUnsigned64)
      ->capture_default_str();
  sub.add_option("--n-best", s.n_best, "Pronunciation runs: pronunciations per word, each with its score")
      ->capture_default_str();
  sub.add_option("--beam", s.beam, "Pronunciation runs: beam width (default: the run's, at least --n-best)");
  sub.add_option("--threshold", s.threshold,
                 "Two-class classifiers: the positive (second) class from this probability up (default: the likelier "
                 "class; eval prints the threshold that reaches a precision)")
      ->check(CLI::Range(0.0, 1.0));
}

void add_input_options(CLI::App& sub, InputOptions& o, const char* items) {
  sub.add_option("--input", o.input,
                 fmt::format("File of {}: one a line (a blank line answered blank, so that output lines match input "
                             "lines), or a CSV, TSV or JSON Lines file read by column, a record each (default: "
                             "standard input)",
                             items))
      ->check(kNotEmpty);
  sub.add_option("--text-column", o.text_column,
                 "Read --input by column: the column (CSV, TSV) or key (JSON Lines) of the text (default: the run's "
                 "text column, else text)");
  sub.add_option("--source", o.source, "--input's format: csv, tsv or jsonl (default: by its extension)")
      ->check(CLI::IsMember({"csv", "tsv", "jsonl"}));
}

namespace {

// The text column a run was trained on, or "text" (a Hugging Face checkpoint, a run of another kind).
std::string run_text_column(const std::string& run_dir) {
  const std::filesystem::path config = std::filesystem::path(run_dir) / "config.json";
  if (!std::filesystem::is_regular_file(config)) return "text";
  const nlohmann::json j = nlohmann::json::parse(read_file(config.string()), nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_object()) return "text";
  const auto it = j["data"].find("text_column");
  return it != j["data"].end() && it->is_string() ? it->get<std::string>() : "text";
}

}  // namespace

std::vector<InputItem> read_inputs(const InputOptions& o, const std::string& run_dir) {
  std::string format = o.source;
  if (format.empty() && o.input != "-") format = labelled_format_of(o.input);
  check<ConfigError>(!format.empty() || o.text_column.empty(),
                     "--text-column reads the input by column: give --source csv, tsv or jsonl (the input's name "
                     "does not say)");
  std::vector<InputItem> items;
  if (format.empty()) {
    for (NumberedLine& l : read_lines(o.input)) {
      const bool blank = l.text.find_first_not_of(" \t") == std::string::npos;
      items.push_back({l.number, std::move(l.text), blank});
    }
    return items;
  }
  std::string bytes;
  for (const NumberedLine& l : read_lines(o.input)) bytes += l.text + "\n";
  const std::string column = o.text_column.empty() ? run_text_column(run_dir) : o.text_column;
  for (NumberedText& t : parse_text_column(bytes, format, column, o.input == "-" ? "input" : o.input))
    items.push_back({t.line, std::move(t.text), false});
  return items;
}

std::unique_ptr<TrainedRun> load_for_answers(const std::string& run, const std::string& precision) {
  std::optional<Precision> p;
  if (!precision.empty()) p = parse_precision(precision);
  std::unique_ptr<TrainedRun> loaded = TrainedRun::load(run, p);
  for (const std::string& w : loaded->warnings()) fmt::print(stderr, "multihead: warning: {}\n", w);
  return loaded;
}

void warn_about_run(const std::string& run_dir) {
  std::string warning;
  try {
    warning = run_checkpoint_warning(run_dir);
  } catch (const Error&) {
  }
  if (!warning.empty()) fmt::print(stderr, "multihead: warning: {}\n", warning);
}

}  // namespace multihead::cli
