// The job registry: configs read by their task, presets, and flags applied
// as each kind of job takes them.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "multihead/core/error.h"
#include "multihead/tasks/presets.h"
#include "test_util.h"

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

// The error applying `flags` to `job` gives ("no error" when none).
std::string refusal(Job job, const JobOverrides& flags) {
  return test::error_message([&] { apply_overrides(job, flags); });
}

TEST(Jobs, FlagsThatMeanNothingForAKindAreRefusedByName) {
  JobOverrides flags;
  flags.positions = "rope";
  flags.vocab_size = 100;
  EXPECT_EQ(refusal(preset_job("fashion-mnist"), flags), "--positions and --vocab-size do not apply to image jobs");
  JobOverrides data;
  data.data = "somewhere";
  EXPECT_EQ(refusal(preset_job("reverse"), data), "--data does not apply to synthetic sequence tasks");
  JobOverrides tokenizer;
  tokenizer.tokenizer = "bpe";
  EXPECT_EQ(refusal(preset_job("cmudict"), tokenizer), "--tokenizer does not apply to pronunciation jobs");
  JobOverrides epochs;
  epochs.epochs = 2;
  epochs.source = "csv";
  EXPECT_EQ(refusal(preset_job("moby-dick"), epochs), "--epochs and --source do not apply to language models");
  JobOverrides bad;
  bad.batch = 30;
  bad.grad_accumulation = 4;
  EXPECT_NE(refusal(preset_job("spam"), bad), "no error");
  EXPECT_EQ(refusal(preset_job("spam"), JobOverrides{}), "no error");
  // A flag name the list does not know is a mistake in the caller.
  EXPECT_THROW(refuse_flags(JobOverrides{}, {"--colour"}, "image jobs"), std::invalid_argument);
}

// Each kind's config: what is left out keeps the kind's own defaults, and
// every key to_json writes, from_json reads back.
TEST(Jobs, AConfigWithOnlyItsTaskIsTheKindsDefaultJob) {
  auto check = [](const auto& defaults) {
    using Kind = std::decay_t<decltype(defaults)>;
    const json written = to_json(defaults);
    EXPECT_EQ(to_json(Kind::from_json(written, "c.json")), written) << Kind::kTask;
    const json own = to_json(Kind::from_json(json{{"task", Kind::kTask}}, "c.json"));
    for (const char* key : {"data", "title", "threads"})
      if (written.contains(key)) {
        EXPECT_EQ(own[key], written[key]) << Kind::kTask << " " << key;
      }
  };
  check(TextClassificationJob());
  check(LanguageModelJob());
  check(ImageClassificationJob());
  check(SequenceTaskJob());
  check(PronunciationJob());
  // The image model's section is the job's own (no shared model reader).
  EXPECT_EQ(to_json(ImageClassificationJob::from_json(json{{"task", "image_classification"}}, "c.json"))["model"],
            to_json(ImageClassificationJob())["model"]);
  // Only the first kind may leave its task out.
  EXPECT_NO_THROW(TextClassificationJob::from_json(json::object(), "c.json"));
  EXPECT_THROW(LanguageModelJob::from_json(json::object(), "c.json"), ConfigError);
}

TEST(Jobs, ConfigErrorsNameTheSectionAndKey) {
  auto error = [](const json& config) { return test::error_message([&] { job_from_json(config, "c.json"); }); };
  EXPECT_EQ(error(json{{"task", "language_modeling"}, {"sample", {{"seed", -3}}}}),
            "c.json: sample: 'seed' must be >= 0, got -3");
  EXPECT_EQ(error(json{{"task", "pronunciation"}, {"decode", {{"beams", 2}}}}), "c.json: decode: unknown key 'beams'");
  EXPECT_EQ(error(json{{"task", "sequence_task"}, {"data", {{"kind", "shuffle"}}}}),
            "c.json: data: synthetic task must be copy, reverse or sort, got \"shuffle\"");
  EXPECT_EQ(error(json{{"task", "image_classification"}, {"model", {{"d_model", "wide"}}}}),
            "c.json: model: 'd_model' must be an integer");
}

}  // namespace
}  // namespace multihead
