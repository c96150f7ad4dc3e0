// Subcommands of the multihead CLI. Each registers itself and its flags on
// the app and returns the function that runs it; the work is in the library.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace multihead::cli {

struct Command {
  CLI::App* app;
  std::function<void()> run;
};

Command add_apply(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_demo(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_experiment(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_predict(CLI::App& app);
Command add_train(CLI::App& app);

}  // namespace multihead::cli
