// multihead predict: a trained run on new input, one item a line.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "multihead/core/precision.h"
#include "multihead/core/error.h"
#include "multihead/core/threading.h"
#include "multihead/io/atomic_file.h"
#include "multihead/tasks/answers.h"
#include "multihead/tasks/trained_run.h"

namespace multihead::cli {
namespace {

struct PredictOpts {
  std::string run, input, precision;
  bool json = false;
  AnswerSettings settings;
  int threads = 0;
};

// An answer as a plain line: a classifier's label and its probability; a
// language model's continuation; a word's best phonemes, or with n_best > 1
// each pronunciation's phonemes and score, tab-separated.
std::string plain_line(const nlohmann::json& a, std::int64_t n_best) {
  if (a.contains("label")) {
    const std::string label = a["label"].get<std::string>();
    return fmt::format("{}\t{:.4f}", label, a["probabilities"][label].get<double>());
  }
  if (a.contains("output")) return a["output"].get<std::string>();
  const nlohmann::json& ps = a["pronunciations"];
  if (n_best == 1) return ps.front()["phonemes"].get<std::string>();
  std::vector<std::string> cells;
  for (const auto& p : ps) cells.push_back(fmt::format("{}\t{:.4f}", p["phonemes"].get<std::string>(), p["score"].get<double>()));
  return fmt::format("{}", fmt::join(cells, "\t"));
}

// Every output line is made before any is printed: a bad item (named by its
// line) leaves no partial output. Items are answered in chunks of lines, and
// a chunk in batches of similar length and bounded size (a classifier's:
// TrainedRun::predict), so that the memory a batch takes does not grow with
// the file and the lines of a chunk share batches with little padding.
std::vector<std::string> predict(TrainedRun& run, const PredictOpts& o,
                                 const std::vector<std::pair<std::int64_t, std::string>>& items) {
  const AnswerSettings& settings = o.settings;
  check_answer_settings(run, settings);
  std::vector<std::string> out;
  constexpr std::size_t kChunk = 2048;
  for (std::size_t i0 = 0; i0 < items.size(); i0 += kChunk) {
    const std::size_t i1 = std::min(items.size(), i0 + kChunk);
    std::vector<std::string> inputs;
    for (std::size_t i = i0; i < i1; ++i) inputs.push_back(items[i].second);
    std::vector<nlohmann::json> answers;
    try {
      answers = answer(run, inputs, settings);
    } catch (const InputError& e) {
      throw ConfigError(
          fmt::format("{} line {}: {}", o.input == "-" ? "input" : o.input, items[i0 + e.index].first, e.what()));
    }
    for (std::size_t i = i0; i < i1; ++i) {
      nlohmann::json& a = answers[i - i0];
      if (!o.json) {
        out.push_back(plain_line(a, settings.n_best));
        continue;
      }
      a["line"] = items[i].first;
      out.push_back(a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
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
  add_trained_run_options(*sub, o->run, o->settings);
  sub->add_option("--input", o->input, "File of items, one a line (default: standard input; empty lines skipped)");
  sub->add_flag("--json", o->json, "One JSON object a line: the input, its line number and the prediction");
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_option("--precision", o->precision,
                  fmt::format("fp32, bf16, fp16 or int8 (default: the run's own); {}", kInferencePrecisionCompute));
  return {sub, [o] {
            if (o->input.empty()) o->input = "-";
            const auto run = load_for_answers(o->run, o->precision, o->threads);
            for (const std::string& line : predict(*run, *o, read_items(o->input))) fmt::print("{}\n", line);
          }};
}

}  // namespace multihead::cli
