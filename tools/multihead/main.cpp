// multihead: command-line front end. It parses flags and dispatches; any
// error becomes one line on stderr and exit code 2. Under mpirun (train and
// bench train) a rank's error also ends the other ranks (MPI_Abort), which
// would otherwise wait for it forever.
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/core/allocator.h"
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
  CLI::App app{"multihead: Transformer multi-head attention on the CPU"};
  // The version, and what this build runs on: figures differ between CPUs.
  app.set_version_flag("--version", [] {
    const std::string mpi = multihead::mpi_built() ? multihead::mpi_library() : "not built (MULTIHEAD_MPI=OFF)";
    return fmt::format("multihead {}\n{}\nMPI (data-parallel train): {}", MULTIHEAD_VERSION,
                       multihead::machine_details(multihead::machine_info()), mpi);
  });
  app.require_subcommand(1);
  std::vector<multihead::cli::Command> commands = {multihead::cli::add_train(app), multihead::cli::add_eval(app), multihead::cli::add_generate(app),
                                                     multihead::cli::add_keys(app),
                                                     multihead::cli::add_inspect(app), multihead::cli::add_predict(app), multihead::cli::add_serve(app),
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
    return fail(fmt::format("{} (see --help)", e.what()).c_str(), 2);
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
