// The job registry: configs read by their task, presets, and flags applied
// as each kind of job takes them.
#include <gtest/gtest.h>

#include "multihead/core/error.h"
#include "multihead/tasks/presets.h"

namespace multihead {
namespace {

using json = nlohmann::json;

TEST(Jobs, EveryPresetReadsBackFromItsConfigAsTheSameKindAndSettings) {
  ASSERT_EQ(presets().size(), 5u);
  for (const Preset& p : presets()) {
    const Job job = p.make();
    const json config = to_json(job);
    EXPECT_EQ(config["task"], job_task(job)) << p.name;
    const Job back = job_from_json(config, p.name);
    EXPECT_EQ(back.index(), job.index()) << p.name;
    EXPECT_EQ(to_json(back), config) << p.name;
  }
  EXPECT_TRUE(std::holds_alternative<TextClassificationJob>(preset_job("spam")));
  EXPECT_TRUE(std::holds_alternative<LanguageModelJob>(preset_job("moby-dick")));
  EXPECT_TRUE(std::holds_alternative<ImageClassificationJob>(preset_job("fashion-mnist")));
  EXPECT_TRUE(std::holds_alternative<SequenceTaskJob>(preset_job("reverse")));
  EXPECT_TRUE(std::holds_alternative<PronunciationJob>(preset_job("cmudict")));
}

TEST(Jobs, KindsAreNamedOnceAndUnknownOnesAreRefused) {
  EXPECT_EQ(job_tasks(), (std::vector<std::string>{"text_classification", "language_modeling",
                                                    "image_classification", "sequence_task", "pronunciation"}));
  // A config without a task is a text classifier's.
  json config = to_json(preset_job("spam"));
  config.erase("task");
  EXPECT_TRUE(std::holds_alternative<TextClassificationJob>(job_from_json(config, "c.json")));
  try {
    job_from_json(json{{"task", "translation"}}, "c.json");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "c.json: task must be one of text_classification, language_modeling, image_classification, "
                 "sequence_task, pronunciation, got 'translation'");
  }
  EXPECT_THROW(job_from_json(json{{"task", 3}}, "c.json"), ConfigError);
  EXPECT_THROW(job_from_json(json::array(), "c.json"), ConfigError);
  EXPECT_THROW(preset_job("imdb"), ConfigError);
}

TEST(Jobs, FlagsApplyAsEachKindTakesThem) {
  JobOverrides flags;
  flags.steps = 7;
  flags.d_model = 32;
  flags.num_heads = 2;
  flags.attention = "sliding_window";
  flags.window = 3;
  flags.precision = "fp16";
  flags.seed = 9;

  Job text = preset_job("spam");
  apply_overrides(text, flags);
  const auto& t = std::get<TextClassificationJob>(text);
  EXPECT_EQ(t.budget.max_steps, 7);  // epoch jobs: a cap
  EXPECT_EQ(t.model.layer.d_model, 32);
  EXPECT_EQ(t.model.layer.pattern.window_left, 3);
  EXPECT_EQ(t.train.precision, Precision::kF16);
  EXPECT_TRUE(t.train.loss_scaling);
  EXPECT_EQ(t.train.seed, 9u);

  Job lm = preset_job("moby-dick");
  apply_overrides(lm, flags);
  EXPECT_EQ(std::get<LanguageModelJob>(lm).train.steps, 7);  // step jobs: the steps

  // Image jobs take the layer's settings too (they were once dropped silently).
  Job image = preset_job("fashion-mnist");
  apply_overrides(image, flags);
  const auto& v = std::get<ImageClassificationJob>(image);
  EXPECT_EQ(v.budget.max_steps, 7);
  EXPECT_EQ(v.model.layer.nhead, 2);
  EXPECT_EQ(v.model.layer.pattern.variant, AttentionVariant::kSlidingWindow);

  // The sequence task's vocabulary is its symbols, whatever the tokenizer defaults say.
  Job seq = preset_job("reverse");
  apply_overrides(seq, flags);
  const auto& s = std::get<SequenceTaskJob>(seq);
  EXPECT_EQ(s.model.vocab_size, s.task.vocab_size());
  EXPECT_EQ(s.train.steps, 7);

  // Pronunciation: an epoch job; the layer settings reach encoder and decoder alike.
  Job words = preset_job("cmudict");
  flags.positions = "alibi";
  apply_overrides(words, flags);
  const auto& w = std::get<PronunciationJob>(words);
  EXPECT_EQ(w.budget.max_steps, 7);
  EXPECT_EQ(w.model.model.layer.d_model, 32);
  EXPECT_EQ(w.model.model.positions, PositionKind::kAlibi);
  EXPECT_EQ(w.model.decoder_depth(), w.model.model.num_layers);
}

TEST(Jobs, FlagsThatMeanNothingForAKindAreRefusedByName) {
  JobOverrides flags;
  flags.positions = "rope";
  flags.vocab_size = 100;
  Job image = preset_job("fashion-mnist");
  try {
    apply_overrides(image, flags);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--positions and --vocab-size do not apply to image jobs");
  }
  JobOverrides data;
  data.data = "somewhere";
  Job seq = preset_job("reverse");
  EXPECT_THROW(apply_overrides(seq, data), ConfigError);
  JobOverrides tokenizer;
  tokenizer.tokenizer = "bpe";
  Job words = preset_job("cmudict");
  try {
    apply_overrides(words, tokenizer);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--tokenizer does not apply to pronunciation jobs");
  }
  JobOverrides bad;
  bad.batch = 30;
  bad.grad_accumulation = 4;
  Job text = preset_job("spam");
  EXPECT_THROW(apply_overrides(text, bad), ConfigError);
}

}  // namespace
}  // namespace multihead
