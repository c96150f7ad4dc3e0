// SPDX-License-Identifier: Apache-2.0
// multihead: command-line front end. It parses flags and dispatches; any
// error becomes one line on stderr and exit code 2. Under mpirun (train and
// bench train) a rank's error also ends the other ranks (MPI_Abort), which
// would otherwise wait for it forever.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "multihead/core/allocator.h"
#include "multihead/core/error.h"
#include "multihead/core/suggest.h"
#include "multihead/kernels/machine.h"
#include "multihead/train/distributed.h"
#include "multihead/train/fit.h"
#include "multihead/version.h"

namespace {

// "multihead: error: ..." on stderr; rank r > 0 of several says which it is.
void print_error(const char* what) {
  const multihead::ProcessGroup& g = multihead::process_group();
  if (g.size() > 1 && !g.primary()) fmt::print(stderr, "multihead (rank {}): error: {}\n", g.rank(), what);
  else fmt::print(stderr, "multihead: error: {}\n", what);
}

int fail(const char* what, int code) {
  print_error(what);
  std::fflush(stderr);
  if (multihead::process_group().size() > 1) multihead::process_group().abort(code);
  return code;
}

// The subcommand of `app` called `name`, or null.
CLI::App* subcommand_named(CLI::App& app, std::string_view name) {
  for (CLI::App* sub : app.get_subcommands({}))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

// The deepest subcommand the command line names (argv read as CLI11 will).
CLI::App* deepest_command(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  for (int i = 1; i < argc; ++i)
    if (CLI::App* sub = subcommand_named(*at, argv[i])) at = sub;
  return at;
}

std::vector<std::string> command_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

// " (did you mean --epochs?)" for the first flag the command does not take
// that is near one it does; "" otherwise.
std::string flag_suggestion(CLI::App& app, int argc, char** argv) {
  CLI::App* command = deepest_command(app, argc, argv);
  std::vector<std::string> flags;
  for (const CLI::App* level = command; level; level = level->get_parent())
    for (const CLI::Option* opt : level->get_options())
      for (const std::string& name : opt->get_lnames()) flags.push_back("--" + name);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) continue;
    arg = arg.substr(0, arg.find('='));
    if (std::find(flags.begin(), flags.end(), arg) != flags.end()) continue;
    const std::string near = multihead::closest_name(arg, flags);
    if (!near.empty()) return fmt::format(" (did you mean {}?)", near);
  }
  return {};
}

// `multihead help [COMMAND ...]`: that command's help, as --help prints it.
// An unknown name: the error, with the nearest command.
int print_help(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  for (int i = 2; i < argc; ++i) {
    CLI::App* sub = subcommand_named(*at, argv[i]);
    if (!sub)
      return fail(fmt::format("unknown command '{}'{}; the commands are: {}", multihead::clip_text(argv[i]),
                              multihead::did_you_mean(argv[i], command_names(*at)), fmt::join(command_names(*at), ", "))
                      .c_str(),
                  2);
    at = sub;
  }
  fmt::print("{}", at->help());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // oneDNN's sgemm mallocs and frees its packing buffers on every call; kept
  // in the heap they are not faulted in again each time (17 000 page faults
  // an fp32 `bench train` step otherwise).
  multihead::keep_freed_heap_memory();
  std::optional<multihead::DistributedSession> mpi_session;
  try {
    mpi_session.emplace();
  } catch (const std::exception& e) {
    return fail(e.what(), 2);
  }
  // Every command runs under a context naming the session's ranks; each sets
  // its own thread count in a ContextScope inside this binding.
  multihead::RuntimeContext root;
  root.group = &mpi_session->group();
  const multihead::ContextBinding bound(root);
  CLI::App app{"multihead: Transformer multi-head attention on the CPU", "multihead"};
  // The version, and what this build runs on: figures differ between CPUs.
  app.set_version_flag("-V,--version", [] {
    const std::string mpi = multihead::mpi_built() ? multihead::mpi_library() : "not built (MULTIHEAD_MPI=OFF)";
    return fmt::format("multihead {}\n{}\nMPI (data-parallel train): {}", MULTIHEAD_VERSION,
                       multihead::machine_details(multihead::machine_info()), mpi);
  });
  app.require_subcommand(1);
  // Every option's default in --help, whatever its command (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  std::vector<multihead::cli::Command> commands = {
      multihead::cli::add_train(app), multihead::cli::add_eval(app),    multihead::cli::add_generate(app),
      multihead::cli::add_keys(app),  multihead::cli::add_inspect(app), multihead::cli::add_predict(app),
      multihead::cli::add_serve(app), multihead::cli::add_apply(app),   multihead::cli::add_bench(app),
      multihead::cli::add_demo(app),  multihead::cli::add_embed(app),   multihead::cli::add_experiment(app),
      multihead::cli::add_export(app)};
  app.footer("multihead help COMMAND (or COMMAND --help) shows a command's flags and their defaults.\n");
  // `help`, and a first word that names no command, before CLI11 (which
  // would answer "A subcommand is required" to both).
  if (argc >= 2 && std::string_view(argv[1]) == "help") return print_help(app, argc, argv);
  // The version is a flag: `version`, `-v` and `--verison` are pointed at it.
  const std::string_view first = argc >= 2 ? argv[1] : "";
  const std::vector<std::string> top_flags = {"--help", "--version"};
  if (first == "-v" || first == "version" ||
      (first.starts_with("--") && !multihead::closest_name(first, top_flags).empty()))
    return fail(
        fmt::format("unknown {} '{}' (did you mean {}?)", first.starts_with("-") ? "flag" : "command",
                    multihead::clip_text(std::string(first)),
                    first == "-v" || first == "version" ? "--version" : multihead::closest_name(first, top_flags))
            .c_str(),
        2);
  if (argc >= 2 && argv[1][0] != '-' && !subcommand_named(app, argv[1]))
    return fail(fmt::format("unknown command '{}'{}; the commands are: {}", multihead::clip_text(argv[1]),
                            multihead::did_you_mean(argv[1], command_names(app)), fmt::join(command_names(app), ", "))
                    .c_str(),
                2);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string near = flag_suggestion(app, argc, argv);
    return fail(fmt::format("{}{} (see --help)", e.what(), near).c_str(), 2);
  }
  try {
    if (multihead::process_group().size() > 1) {
      // Several ranks of any other command would each do the whole job.
      const bool train = app.got_subcommand("train");
      const bool bench_train = app.got_subcommand("bench") && app.get_subcommand("bench")->got_subcommand("train");
      multihead::check<multihead::ConfigError>(train || bench_train,
                                               "under mpirun only train and bench train run (data-parallel)");
    }
    for (const auto& c : commands)
      if (c.app->parsed()) c.run();
  } catch (const multihead::Interrupted& e) {
    // Every rank stopped after the same step (fit agrees on it).
    if (multihead::process_group().primary()) fmt::print(stderr, "multihead: {}\n", e.what());
    return 128 + e.signal();  // as the shell reports a process the signal ended
  } catch (const std::exception& e) {
    return fail(e.what(), 2);
  }
  return 0;
}
