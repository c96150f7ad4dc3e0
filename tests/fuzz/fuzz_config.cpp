// Job configs (text, language model, image, sequence task) and module
// configs for `apply`, from arbitrary JSON text.
#include "fuzz_target.h"
#include "multihead/io/apply.h"
#include "multihead/io/json_config.h"
#include "multihead/train/image_classification.h"
#include "multihead/train/language_modeling.h"
#include "multihead/train/sequence_task.h"
#include "multihead/train/text_classification.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  const std::string text = fuzz::bytes_of(data, size);
  fuzz::expect_clean([&] {
    const nlohmann::json j = ConfigReader::parse(text, "fuzz.json");
    fuzz::expect_clean([&] { (void)text_classification_job_from_json(j, "fuzz.json"); });
    fuzz::expect_clean([&] { (void)language_model_job_from_json(j, "fuzz.json"); });
    fuzz::expect_clean([&] { (void)image_classification_job_from_json(j, "fuzz.json"); });
    fuzz::expect_clean([&] { (void)sequence_task_job_from_json(j, "fuzz.json"); });
  });
  // No weights or inputs: a config that parses then fails on the missing tensors.
  fuzz::expect_clean([&] { (void)apply_module(text, "fuzz.json", {}, {}); });
  return 0;
}
