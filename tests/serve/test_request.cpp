// SPDX-License-Identifier: Apache-2.0
// The body of a predict request, read through the answer settings' key list:
// each kind takes its own settings, each is typed and bounded, and every
// refusal names the field.
#include <gtest/gtest.h>

#include "multihead/serve/request.h"

namespace multihead {
namespace {

const std::vector<std::string> kLanguageModel = {"tokens", "temperature", "top_k", "top_p", "seed"};
const std::vector<std::string> kPronunciation = {"n_best", "beam"};

PredictRequest parse(const std::string& body, const std::vector<std::string>& fields) {
  return parse_predict_request(body, "language_model", fields, AnswerSettings{}, RequestLimits{});
}

std::string refusal(const std::string& body, const std::vector<std::string>& fields) {
  try {
    parse(body, fields);
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status, 400) << body;
    return e.what();
  }
  return "accepted";
}

TEST(PredictRequest, SettingsOverrideTheServersOwn) {
  const PredictRequest r = parse(
      R"({"inputs": ["a", "b"], "tokens": 7, "temperature": 0, "top_k": 3, "top_p": 0.5, "seed": 9})", kLanguageModel);
  EXPECT_EQ(r.inputs, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.settings.tokens, 7);
  EXPECT_EQ(r.settings.sampling.temperature, 0.0);
  EXPECT_EQ(r.settings.sampling.top_k, 3);
  EXPECT_EQ(r.settings.sampling.top_p, 0.5);
  EXPECT_EQ(r.settings.sampling.seed, 9u);
  // What the body leaves out stays the server's.
  const PredictRequest plain = parse(R"({"inputs": ["a"]})", kLanguageModel);
  EXPECT_EQ(plain.settings, AnswerSettings{});
  const PredictRequest beams = parse(R"({"inputs": ["a"], "n_best": 2, "beam": 4})", kPronunciation);
  EXPECT_EQ(beams.settings.n_best, 2);
  EXPECT_EQ(beams.settings.beam, 4);
}

TEST(PredictRequest, EachSettingIsTypedBoundedAndForItsKind) {
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "tokens": "7"})", kLanguageModel), "the body: 'tokens' must be an integer");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "tokens": 5000})", kLanguageModel),
            "the body: tokens must be in [0, 1024], got 5000");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "top_p": 0})", kLanguageModel), "the body: top_p must be in (0, 1], got 0");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "temperature": -1})", kLanguageModel),
            "the body: temperature must be >= 0, got -1");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "seed": 18446744073709551615})", kLanguageModel),
            "the body: 'seed' must be at most 9223372036854775807, got 18446744073709551615");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "beam": 65})", kPronunciation), "the body: beam must be in [0, 64], got 65");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "n_best": 0})", kPronunciation), "the body: n_best must be in [1, 64], got 0");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "beam": 2})", kLanguageModel), "'beam' does not apply to language_model runs");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "tokens": 2})", {}), "'tokens' does not apply to language_model runs");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "tokenz": 2})", kLanguageModel),
            "unknown field 'tokenz' (did you mean 'tokens'?)");
  EXPECT_EQ(refusal(R"({"input": ["a"]})", {}), "unknown field 'input' (did you mean 'inputs'?)");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "threshold": 0.5})", kLanguageModel),
            "'threshold' does not apply to language_model runs");
  EXPECT_EQ(refusal(R"({"inputs": ["a"], "mode": 1})", {}), "unknown field 'mode'");
  EXPECT_EQ(refusal(R"({"tokens": 2})", kLanguageModel), "the body has no 'inputs' (an array of strings)");
}

}  // namespace
}  // namespace multihead
