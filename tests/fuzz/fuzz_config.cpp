// SPDX-License-Identifier: Apache-2.0
// Job configs (text, language model, image, sequence task) and module
// configs for `apply`, from arbitrary JSON text.
#include "fuzz_target.h"
#include "multihead/io/json_config.h"
#include "multihead/nn/apply_module.h"
#include "multihead/tasks/image_classification.h"
#include "multihead/tasks/language_modeling.h"
#include "multihead/tasks/sequence_task.h"
#include "multihead/tasks/text_classification.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  const std::string text = fuzz::bytes_of(data, size);
  fuzz::expect_clean([&] {
    const nlohmann::json j = ConfigReader::parse(text, "fuzz.json");
    fuzz::expect_clean([&] { (void)TextClassificationJob::from_json(j, "fuzz.json"); });
    fuzz::expect_clean([&] { (void)LanguageModelJob::from_json(j, "fuzz.json"); });
    fuzz::expect_clean([&] { (void)ImageClassificationJob::from_json(j, "fuzz.json"); });
    fuzz::expect_clean([&] { (void)SequenceTaskJob::from_json(j, "fuzz.json"); });
  });
  // No weights or inputs: a config that parses then fails on the missing tensors.
  fuzz::expect_clean([&] { (void)apply_module(text, "fuzz.json", {}, {}); });
  return 0;
}
