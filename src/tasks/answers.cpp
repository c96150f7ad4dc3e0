// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/answers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace multihead {

nlohmann::json classified_answer(const std::string& input, const Prediction& p,
                                 const std::vector<std::string>& labels) {
  nlohmann::json probs = nlohmann::json::object();
  for (std::size_t c = 0; c < labels.size(); ++c) probs[labels[c]] = p.probabilities[c];
  nlohmann::json a = {{"input", input}, {"label", p.label}, {"probabilities", probs}};
  if (p.truncated) a["truncated"] = true;  // only its first tokens were read, as the model's length allows
  return a;
}

nlohmann::json pronounced_answer(const std::string& input, const std::vector<Pronounced>& ps) {
  nlohmann::json all = nlohmann::json::array();
  for (const Pronounced& p : ps)
    all.push_back({{"phonemes", fmt::format("{}", fmt::join(p.phonemes, " "))},
                   {"log_prob", p.log_prob},
                   {"score", p.score},
                   {"ended", p.ended}});
  return {{"input", input}, {"pronunciations", all}};
}

void check_answer_settings(TrainedRun& run, const AnswerSettings& s) { run.check_settings(s); }

std::vector<nlohmann::json> answer(TrainedRun& run, const std::vector<std::string>& inputs,
                                   const AnswerSettings& settings) {
  if (settings.embed) {
    std::vector<nlohmann::json> out;
    for (std::vector<float>& v : run.embed(inputs)) out.push_back({{"embedding", std::move(v)}});
    return out;
  }
  run.check_settings(settings);
  return run.answer(inputs, settings);
}

}  // namespace multihead
