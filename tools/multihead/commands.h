// Subcommands of the multihead CLI. Each registers itself and its flags on
// the app and returns the function that runs it; the work is in the library.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "multihead/tasks/answers.h"

namespace multihead::cli {

struct Command {
  CLI::App* app;
  std::function<void()> run;
};

// For a path flag: an empty value is refused, never read as "the default".
inline const CLI::Validator kNotEmpty(
    [](std::string& s) { return s.empty() ? std::string("must name a path, not ''") : std::string(); }, "PATH");

// A trained run (--run) and the settings of its answers (--tokens,
// --temperature, ..., --n-best, --beam), as predict and serve both take them.
void add_trained_run_options(CLI::App& sub, std::string& run, AnswerSettings& s);

Command add_apply(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_demo(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_experiment(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_keys(CLI::App& app);
Command add_predict(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_train(CLI::App& app);

}  // namespace multihead::cli
