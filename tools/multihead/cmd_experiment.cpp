// SPDX-License-Identifier: Apache-2.0
// multihead experiment NAME [--quick]
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/experiments/experiments.h"

namespace multihead::cli {

Command add_experiment(CLI::App& app) {
  struct Opts {
    std::string name;
    ExperimentOptions opt;
  };
  auto o = std::make_shared<Opts>();
  std::string names, claims;
  for (const ExperimentKind& k : experiment_kinds()) {
    names += fmt::format("{}{}", names.empty() ? "" : ", ", k.name);
    claims += fmt::format("\n  {}: {}", k.name, k.claim);
  }
  CLI::App* sub = app.add_subcommand("experiment", "Measure a claim about attention: " + names);
  sub->add_option("name", o->name, "The experiment:" + claims)->required();
  sub->add_flag("--quick", o->opt.quick, "Tiny sizes, seconds long (checks the pipeline; the numbers mean nothing)");
  sub->add_option("--out", o->opt.out, "Results folder; the experiment writes OUT/NAME/")
      ->check(kNotEmpty)
      ->capture_default_str();
  sub->add_option("--seeds", o->opt.seeds, "Seeds per setting")->capture_default_str();
  sub->add_option("--threads", o->opt.threads, "Threads (0: all cores)");
  sub->add_option("--spam", o->opt.spam_dir, "SpamAssassin data folder (default: where setup.sh --data puts it)");
  sub->add_option("--imdb", o->opt.imdb_dir, "aclImdb folder: heads also runs on IMDb");
  sub->add_option("--fashion", o->opt.fashion_dir, "Fashion-MNIST folder");
  sub->add_flag("--quiet", o->opt.quiet, "No progress lines");
  return {sub, [o] {
            const ContextScope context(command_context(o->opt.threads));
            ExperimentReport r = run_experiment(o->name, o->opt);
            for (const auto& t : r.tables) fmt::print("{}\n", t.markdown());
            fmt::print("results: {}/table.md\n", r.dir);
          }};
}

}  // namespace multihead::cli
