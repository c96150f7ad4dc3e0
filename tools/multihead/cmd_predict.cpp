// SPDX-License-Identifier: Apache-2.0
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
#include "multihead/io/atomic_file.h"
#include "multihead/tasks/answers.h"
#include "multihead/tasks/trained_run.h"

namespace multihead::cli {
namespace {

struct PredictOpts {
  std::string run, precision;
  InputOptions input;
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
  for (const auto& p : ps)
    cells.push_back(fmt::format("{}\t{:.4f}", p["phonemes"].get<std::string>(), p["score"].get<double>()));
  return fmt::format("{}", fmt::join(cells, "\t"));
}

// Items are answered in chunks (answer_lines), and a chunk in batches of
// similar length and bounded size (a classifier's: TrainedRun::predict), so
// that the memory a batch takes does not grow with the file and the items
// of a chunk share batches with little padding.
std::vector<std::string> predict(TrainedRun& run, const PredictOpts& o, const std::vector<InputItem>& items) {
  check_answer_settings(run, o.settings);
  return answer_lines<std::vector<nlohmann::json>>(
      items, o.input, o.json, [&](const std::vector<std::string>& texts) { return answer(run, texts, o.settings); },
      [&](const InputItem& item, nlohmann::json& a) {
        if (!o.json) return plain_line(a, o.settings.n_best);
        a["line"] = item.line;
        return a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      });
}

}  // namespace

Command add_predict(CLI::App& app) {
  auto o = std::make_shared<PredictOpts>();
  CLI::App* sub = app.add_subcommand(
      "predict",
      "Run a trained model on new input, one item a line or a CSV, TSV or JSON Lines record each: a classifier's "
      "label and its probability, a language model's continuation, or a word's pronunciation");
  add_trained_run_options(*sub, o->run, o->settings);
  add_input_options(*sub, o->input, "items (texts, prompts or words)");
  sub->add_flag("--json", o->json, "One JSON object a line: the input, its line number and the prediction");
  sub->add_option("--threads", o->threads, "Threads (0: all cores)");
  sub->add_option("--precision", o->precision,
                  fmt::format("fp32, bf16, fp16 or int8 (default: the run's own); {}", kInferencePrecisionCompute));
  return {sub, [o] {
            const std::vector<InputItem> items = read_inputs(o->input, o->run);
            const ContextScope context(command_context(o->threads));
            const auto run = load_for_answers(o->run, o->precision);
            for (const std::string& line : predict(*run, *o, items)) fmt::print("{}\n", line);
          }};
}

}  // namespace multihead::cli
