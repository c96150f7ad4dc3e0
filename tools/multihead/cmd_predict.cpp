// multihead predict: a trained run on new input, one item a line.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "multihead/core/error.h"
#include "multihead/tasks/pronunciation.h"
#include "multihead/tasks/text_classification.h"
#include "multihead/tasks/trained_run.h"

namespace multihead::cli {
namespace {

struct PredictOpts {
  std::string run, input, precision;
  bool json = false;
  std::int64_t tokens = 200;
  std::int64_t n_best = 1, beam = 0;
  SamplingConfig sampling{0.8, 0, 0.95, 0};
  int threads = 0;
};

// The input's non-empty lines (a trailing \r dropped), with their line numbers.
std::vector<std::pair<std::int64_t, std::string>> read_items(const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    check<IoError>(file.is_open(), "cannot open '{}'", path);
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::vector<std::pair<std::int64_t, std::string>> items;
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) items.emplace_back(n, line);
  }
  check<IoError>(!in.bad(), "cannot read '{}'", path);
  return items;
}

// A word's pronunciations: the best's phonemes, or with n_best > 1 each
// one's phonemes and score, tab-separated; JSON: all of them.
std::string pronunciation_line(const std::vector<Pronounced>& ps, const PredictOpts& o, std::int64_t line,
                               const std::string& word) {
  if (o.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const Pronounced& p : ps)
      all.push_back({{"phonemes", fmt::format("{}", fmt::join(p.phonemes, " "))},
                     {"log_prob", p.log_prob},
                     {"score", p.score},
                     {"ended", p.ended}});
    return nlohmann::json{{"line", line}, {"input", word}, {"pronunciations", all}}.dump();
  }
  if (o.n_best == 1) return fmt::format("{}", fmt::join(ps.front().phonemes, " "));
  std::vector<std::string> cells;
  for (const Pronounced& p : ps) cells.push_back(fmt::format("{}\t{:.4f}", fmt::join(p.phonemes, " "), p.score));
  return fmt::format("{}", fmt::join(cells, "\t"));
}

// Every output line is made before any is printed: a bad item (named by its
// line) leaves no partial output.
std::vector<std::string> predict(TrainedRun& run, const PredictOpts& o,
                                 const std::vector<std::pair<std::int64_t, std::string>>& items) {
  std::vector<std::string> out;
  const std::string task = run.task();
  const bool classifier = task == TextClassificationJob::kTask;
  if (task != PronunciationJob::kTask)
    check<ConfigError>(o.n_best == 1 && o.beam == 0, "--n-best and --beam apply to pronunciation runs only");
  if (task == PronunciationJob::kTask) {
    run.pronounce({}, o.n_best, o.beam);  // the options, before any word
    // Words are decoded in batches; a batch that fails is retried word by
    // word, so the error names the line.
    constexpr std::size_t kChunk = 256;
    for (std::size_t i0 = 0; i0 < items.size(); i0 += kChunk) {
      const std::size_t i1 = std::min(items.size(), i0 + kChunk);
      std::vector<std::string> words;
      for (std::size_t i = i0; i < i1; ++i) words.push_back(items[i].second);
      std::vector<std::vector<Pronounced>> got;
      try {
        got = run.pronounce(words, o.n_best, o.beam);
      } catch (const Error&) {
        for (std::size_t i = i0; i < i1; ++i) try {
            run.pronounce({items[i].second}, o.n_best, o.beam);
          } catch (const Error& e) {
            throw ConfigError(
                fmt::format("{} line {}: {}", o.input == "-" ? "input" : o.input, items[i].first, e.what()));
          }
        throw;
      }
      for (std::size_t i = i0; i < i1; ++i)
        out.push_back(pronunciation_line(got[i - i0], o, items[i].first, items[i].second));
    }
    return out;
  }
  for (const auto& [line, text] : items) {
    try {
      if (classifier) {
        const Prediction p = run.predict({text}).front();
        const std::vector<std::string> labels = run.labels();
        double top = 0;
        nlohmann::json probs = nlohmann::json::object();
        for (std::size_t c = 0; c < labels.size(); ++c) {
          probs[labels[c]] = p.probabilities[c];
          if (labels[c] == p.label) top = p.probabilities[c];
        }
        out.push_back(o.json ? nlohmann::json{{"line", line}, {"input", text}, {"label", p.label},
                                              {"probabilities", probs}}
                                   .dump()
                             : fmt::format("{}\t{:.4f}", p.label, top));
      } else {
        const std::string continued = run.generate(text, o.tokens, o.sampling);
        out.push_back(o.json ? nlohmann::json{{"line", line}, {"input", text}, {"output", continued}}.dump()
                             : continued);
      }
    } catch (const Error& e) {
      throw ConfigError(fmt::format("{} line {}: {}", o.input == "-" ? "input" : o.input, line, e.what()));
    }
  }
  return out;
}

}  // namespace

Command add_predict(CLI::App& app) {
  auto o = std::make_shared<PredictOpts>();
  CLI::App* sub = app.add_subcommand(
      "predict",
      "Run a trained model on new input, one item a line: a classifier's label and its probability, a language "
      "model's continuation of each line, or a word's pronunciation");
  sub->add_option("--run", o->run,
                  "Run directory of multihead train (text classifier, language model or pronunciation)")
      ->required();
  sub->add_option("--input", o->input, "File of items, one a line (default: standard input; empty lines skipped)");
  sub->add_flag("--json", o->json, "One JSON object a line: the input, its line number and the prediction");
  sub->add_option("--tokens", o->tokens, "Language models: tokens to generate")->capture_default_str();
  sub->add_option("--temperature", o->sampling.temperature, "Language models: 0 for greedy")->capture_default_str();
  sub->add_option("--top-k", o->sampling.top_k, "Language models: sample among the k most likely (0: all)");
  sub->add_option("--top-p", o->sampling.top_p, "Language models: nucleus mass")->capture_default_str();
  sub->add_option("--seed", o->sampling.seed, "Language models: sampling seed")->capture_default_str();
  sub->add_option("--n-best", o->n_best, "Pronunciation runs: pronunciations per word, each with its score")
      ->capture_default_str();
  sub->add_option("--beam", o->beam, "Pronunciation runs: beam width (default: the run's, at least --n-best)");
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_option("--precision", o->precision, "Activations in fp32, bf16 or fp16 (default: the run's own)");
  return {sub, [o] {
            if (o->input.empty()) o->input = "-";
            std::optional<Precision> precision;
            if (!o->precision.empty()) precision = parse_precision(o->precision);
            const auto run = TrainedRun::load(o->run, o->threads, precision);
            for (const std::string& line : predict(*run, *o, read_items(o->input))) fmt::print("{}\n", line);
          }};
}

}  // namespace multihead::cli
