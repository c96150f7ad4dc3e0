// multihead: command-line front end. It parses flags and dispatches; any
// error becomes one line on stderr and exit code 2.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/kernels/machine.h"
#include "multihead/train/fit.h"

int main(int argc, char** argv) {
  CLI::App app{"multihead: Transformer multi-head attention on the CPU"};
  // The version, and what this build runs on: figures differ between CPUs.
  app.set_version_flag("--version", [] {
    return fmt::format("multihead {}\n{}", MULTIHEAD_VERSION, multihead::machine_details(multihead::machine_info()));
  });
  app.require_subcommand(1);
  std::vector<multihead::cli::Command> commands = {multihead::cli::add_train(app), multihead::cli::add_eval(app), multihead::cli::add_generate(app),
                                                     multihead::cli::add_inspect(app), multihead::cli::add_predict(app),
                                                     multihead::cli::add_apply(app), multihead::cli::add_bench(app),
                                                     multihead::cli::add_demo(app),
                                                     multihead::cli::add_experiment(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "multihead: error: {} (see --help)\n", e.what());
    return 2;
  }
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) c.run();
  } catch (const multihead::Interrupted& e) {
    fmt::print(stderr, "multihead: {}\n", e.what());
    return 128 + e.signal();  // as the shell reports a process the signal ended
  } catch (const std::exception& e) {
    fmt::print(stderr, "multihead: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
