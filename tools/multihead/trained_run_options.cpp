#include "commands.h"

#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "multihead/core/threading.h"
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
  sub.add_option("--seed", s.sampling.seed, "Language models: sampling seed")->check(kUnsigned64)->capture_default_str();
  sub.add_option("--n-best", s.n_best, "Pronunciation runs: pronunciations per word, each with its score")
      ->capture_default_str();
  sub.add_option("--beam", s.beam, "Pronunciation runs: beam width (default: the run's, at least --n-best)");
}

std::vector<std::pair<std::int64_t, std::string>> read_items(const std::string& path) {
  std::vector<std::pair<std::int64_t, std::string>> items;
  for (NumberedLine& l : read_lines(path))
    if (!l.text.empty()) items.emplace_back(l.number, std::move(l.text));
  return items;
}

std::unique_ptr<TrainedRun> load_for_answers(const std::string& run, const std::string& precision, int threads) {
  std::optional<Precision> p;
  if (!precision.empty()) p = parse_precision(precision);
  set_num_threads(threads);
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
