// SPDX-License-Identifier: Apache-2.0
// Subcommands of the multihead CLI. Each registers itself and its flags on
// the app and returns the function that runs it; the work is in the library.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "multihead/core/context.h"
#include "multihead/core/error.h"

#include "multihead/tasks/answers.h"
#include "multihead/tasks/trained_run.h"

namespace multihead::cli {

// The context a command runs under (bound with a ContextScope for as long
// as it runs): main's (the MPI session's ranks) with the command's threads.
inline RuntimeContext command_context(int threads, GemmBackend gemm = GemmBackend::kOneDnn) {
  RuntimeContext c = context();
  c.threads = threads;
  c.gemm = gemm;
  return c;
}

struct Command {
  CLI::App* app;
  std::function<void()> run;
};

// For a path flag: an empty value is refused, never read as "the default".
inline const CLI::Validator kNotEmpty(
    [](std::string& s) { return s.empty() ? std::string("must name a path, not ''") : std::string(); }, "PATH");

// For an unsigned 64-bit flag (a seed): decimal digits of a value below
// 2^64, checked before CLI11 converts it (which wraps -1 and 2^64 silently).
inline const CLI::Validator kUnsigned64(
    [](std::string& s) {
      std::uint64_t v = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      return !s.empty() && ec == std::errc() && end == s.data() + s.size()
                 ? std::string()
                 : std::string("must be a whole number from 0 to 18446744073709551615");
    },
    "UINT64");

// A trained run (--run) and the settings of its answers (--tokens,
// --temperature, ..., --n-best, --beam), as predict and serve both take them.
void add_trained_run_options(CLI::App& sub, std::string& run, AnswerSettings& s);

// Before a command loads the run in run_dir: a warning on stderr when its
// checkpoint is of an older format (train/checkpoint.h). A checkpoint that
// cannot be read says nothing here: the load names the problem.
void warn_about_run(const std::string& run_dir);

// Where predict and embed read their texts: --input (a file, or "-" for
// standard input), read a line at a time, or by column (--text-column)
// when --source is given or the file's extension names CSV, TSV or JSON
// Lines: then a record each, whatever its lines.
struct InputOptions {
  std::string input = "-", source, text_column;
};
void add_input_options(CLI::App& sub, InputOptions& o, const char* items);

// One item of the input: its line (a record's first), its text; a blank
// line of a line-a-line input is an item with `blank` set, answered with an
// empty line (or a JSON object saying so) to keep output and input aligned.
struct InputItem {
  std::int64_t line = 0;
  std::string text;
  bool blank = false;
};
// The items o names: a line each, or a record each, its text in
// --text-column (default `run_dir`'s data.text_column, else "text"). A device
// (other than a terminal) or an endless line is refused.
std::vector<InputItem> read_inputs(const InputOptions& o, const std::string& run_dir);

// The answer lines of `items` in order: make(texts) answers a chunk of the
// non-blank ones (an InputError naming the input's line is a ConfigError),
// line(item, answer) formats one, and a blank item is "" in plain
// output, {"line": N, "blank": true} in JSON. Every line is made before any
// is printed: a bad item leaves no partial output.
template <typename Answers, typename Make, typename Line>
std::vector<std::string> answer_lines(const std::vector<InputItem>& items, const InputOptions& o, bool json,
                                      Make&& make, Line&& line) {
  constexpr std::size_t kChunk = 2048;  // the memory of a chunk's answers is bounded, not the file's
  std::vector<std::string> out(items.size());
  std::vector<std::size_t> to_answer;  // the non-blank items, by index
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!items[i].blank) to_answer.push_back(i);
    else if (json) out[i] = nlohmann::json{{"line", items[i].line}, {"blank", true}}.dump();
  }
  for (std::size_t c0 = 0; c0 < to_answer.size(); c0 += kChunk) {
    const std::size_t c1 = std::min(to_answer.size(), c0 + kChunk);
    std::vector<std::string> texts;
    for (std::size_t c = c0; c < c1; ++c) texts.push_back(items[to_answer[c]].text);
    Answers answers;
    try {
      answers = make(texts);
    } catch (const InputError& e) {
      throw ConfigError(fmt::format("{} line {}: {}", o.input == "-" ? "input" : o.input,
                                    items[to_answer[c0 + e.index]].line, e.what()));
    }
    for (std::size_t c = c0; c < c1; ++c) out[to_answer[c]] = line(items[to_answer[c]], answers[c - c0]);
  }
  return out;
}

// A trained run loaded for answers with --precision (empty: the run's own)
// and --threads, its load's warnings on stderr.
std::unique_ptr<TrainedRun> load_for_answers(const std::string& run, const std::string& precision);

Command add_apply(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_demo(CLI::App& app);
Command add_embed(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_experiment(CLI::App& app);
Command add_export(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_keys(CLI::App& app);
Command add_predict(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_train(CLI::App& app);

}  // namespace multihead::cli
