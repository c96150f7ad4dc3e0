#include "commands.h"

#include <cstdio>

#include <fmt/format.h>

#include "multihead/train/checkpoint.h"

namespace multihead::cli {

void add_trained_run_options(CLI::App& sub, std::string& run, AnswerSettings& s) {
  sub.add_option("--run", run, "Run directory of multihead train (text classifier, language model or pronunciation)")
      ->required();
  sub.add_option("--tokens", s.tokens, "Language models: tokens to generate")->capture_default_str();
  sub.add_option("--temperature", s.sampling.temperature, "Language models: 0 for greedy")->capture_default_str();
  sub.add_option("--top-k", s.sampling.top_k, "Language models: sample among the k most likely (0: all)");
  sub.add_option("--top-p", s.sampling.top_p, "Language models: nucleus mass")->capture_default_str();
  sub.add_option("--seed", s.sampling.seed, "Language models: sampling seed")->check(kUnsigned64)->capture_default_str();
  sub.add_option("--n-best", s.n_best, "Pronunciation runs: pronunciations per word, each with its score")
      ->capture_default_str();
  sub.add_option("--beam", s.beam, "Pronunciation runs: beam width (default: the run's, at least --n-best)");
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
