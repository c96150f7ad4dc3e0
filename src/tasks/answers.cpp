#include "multihead/tasks/answers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "multihead/tasks/language_modeling.h"
#include "multihead/tasks/pronunciation.h"
#include "multihead/tasks/text_classification.h"

namespace multihead {
namespace {

nlohmann::json classified(const std::string& input, const Prediction& p, const std::vector<std::string>& labels) {
  nlohmann::json probs = nlohmann::json::object();
  for (std::size_t c = 0; c < labels.size(); ++c) probs[labels[c]] = p.probabilities[c];
  return {{"input", input}, {"label", p.label}, {"probabilities", probs}};
}

nlohmann::json pronounced(const std::string& input, const std::vector<Pronounced>& ps) {
  nlohmann::json all = nlohmann::json::array();
  for (const Pronounced& p : ps)
    all.push_back({{"phonemes", fmt::format("{}", fmt::join(p.phonemes, " "))},
                   {"log_prob", p.log_prob},
                   {"score", p.score},
                   {"ended", p.ended}});
  return {{"input", input}, {"pronunciations", all}};
}

// The answers of a batched call; when the batch fails, each input alone, so
// that the error names the input that caused it.
template <typename Batch, typename One>
std::vector<nlohmann::json> batched(const std::vector<std::string>& inputs, Batch batch, One one) {
  try {
    return batch(inputs);
  } catch (const Error&) {
    for (std::size_t i = 0; i < inputs.size(); ++i) try {
        one(inputs[i]);
      } catch (const Error& e) {
        throw InputError(i, e.what());
      }
    throw;
  }
}

}  // namespace

void check_answer_settings(TrainedRun& run, const AnswerSettings& s) {
  const std::string task = run.task();
  if (task != PronunciationJob::kTask)
    check<ConfigError>(s.n_best == 1 && s.beam == 0, "--n-best and --beam apply to pronunciation runs only");
  if (task == PronunciationJob::kTask) run.pronounce({}, s.n_best, s.beam);  // checks the options, no word
  if (task == LanguageModelJob::kTask) {
    check<ConfigError>(s.tokens >= 0, "--tokens must be >= 0, got {}", s.tokens);
    check<ConfigError>(s.sampling.temperature >= 0, "--temperature must be >= 0, got {}", s.sampling.temperature);
    check<ConfigError>(s.sampling.top_p > 0 && s.sampling.top_p <= 1, "--top-p must be in (0, 1], got {}",
                       s.sampling.top_p);
    check<ConfigError>(s.sampling.top_k >= 0, "--top-k must be >= 0, got {}", s.sampling.top_k);
  }
}

std::vector<nlohmann::json> answer(TrainedRun& run, const std::vector<std::string>& inputs,
                                   const AnswerSettings& settings) {
  check_answer_settings(run, settings);
  const std::string task = run.task();
  if (task == TextClassificationJob::kTask) {
    const std::vector<std::string> labels = run.labels();
    return batched(
        inputs,
        [&](const std::vector<std::string>& texts) {
          const std::vector<Prediction> got = run.predict(texts);
          std::vector<nlohmann::json> out;
          for (std::size_t i = 0; i < texts.size(); ++i) out.push_back(classified(texts[i], got[i], labels));
          return out;
        },
        [&](const std::string& text) { run.predict({text}); });
  }
  if (task == PronunciationJob::kTask) {
    return batched(
        inputs,
        [&](const std::vector<std::string>& words) {
          const std::vector<std::vector<Pronounced>> got = run.pronounce(words, settings.n_best, settings.beam);
          std::vector<nlohmann::json> out;
          for (std::size_t i = 0; i < words.size(); ++i) out.push_back(pronounced(words[i], got[i]));
          return out;
        },
        [&](const std::string& word) { run.pronounce({word}, settings.n_best, settings.beam); });
  }
  std::vector<nlohmann::json> out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    try {
      out.push_back({{"input", inputs[i]}, {"output", run.generate(inputs[i], settings.tokens, settings.sampling)}});
    } catch (const Error& e) {
      throw InputError(i, e.what());
    }
  }
  return out;
}

}  // namespace multihead
