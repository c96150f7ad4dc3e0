// Subcommands of the multihead CLI. Each registers itself and its flags on
// the app and returns the function that runs it; the work is in the library.
#pragma once

#include <charconv>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "multihead/tasks/answers.h"
#include "multihead/tasks/trained_run.h"

namespace multihead::cli {

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

// The input's non-empty lines (a trailing \r dropped), with their line
// numbers; "-" is standard input. A device (other than a terminal) or an
// endless line is refused.
std::vector<std::pair<std::int64_t, std::string>> read_items(const std::string& path);

// A trained run loaded for answers with --precision (empty: the run's own)
// and --threads, its load's warnings on stderr.
std::unique_ptr<TrainedRun> load_for_answers(const std::string& run, const std::string& precision, int threads);

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
