// SPDX-License-Identifier: Apache-2.0
// The job registry: configs read by their task, presets, and flags applied
// as each kind of job takes them.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/tasks/job_flags.h"
#include "multihead/tasks/presets.h"
#include "test_paths.h"
#include "test_util.h"

namespace multihead {
namespace {

using json = nlohmann::json;

TEST(Jobs, EveryPresetReadsBackFromItsConfigAsTheSameKindAndSettings) {
  ASSERT_EQ(presets().size(), 6u);
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
  EXPECT_TRUE(std::holds_alternative<TextClassificationJob>(preset_job("spam-minilm")));
}

// The registry: what each kind's run answers and the model it holds, in
// Job's order, and a run of every kind that answers loads as one.
TEST(Jobs, TheRegistryDescribesEveryKind) {
  std::vector<std::string> rows;
  for (const KindInfo& k : kinds())
    rows.push_back(fmt::format("{} {} {}", k.task, run_answers_name(k.answers), model_family_name(k.model)));
  EXPECT_EQ(rows, (std::vector<std::string>{
                      "text_classification classify sequence_classifier", "language_modeling generate language_model",
                      "image_classification none vision_transformer", "sequence_task none language_model",
                      "pronunciation pronounce encoder_decoder", "word_stress none sequence_classifier"}));
  EXPECT_STREQ(kind_of("word_stress").noun, "word stress jobs");
  EXPECT_THROW(kind_of("translation"), ConfigError);
  for (const KindInfo& k : kinds()) EXPECT_STREQ(job_task(job_from_json({{"task", k.task}}, "c.json")), k.task);
}

TEST(Jobs, KindsAreNamedOnceAndUnknownOnesAreRefused) {
  EXPECT_EQ(job_tasks(), (std::vector<std::string>{"text_classification", "language_modeling", "image_classification",
                                                   "sequence_task", "pronunciation", "word_stress"}));
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
                 "sequence_task, pronunciation, word_stress, got 'translation'");
  }
  EXPECT_THROW(job_from_json(json{{"task", 3}}, "c.json"), ConfigError);
  EXPECT_THROW(job_from_json(json::array(), "c.json"), ConfigError);
  EXPECT_THROW(preset_job("imdb"), ConfigError);
}

TEST(Jobs, AnotherSourceDropsThePresetsTitleAndPreprocessingButNotTheFlags) {
  const auto text = [](const Job& j) { return std::get<TextClassificationJob>(j); };
  const TextClassificationJob spam = text(preset_job("spam"));
  EXPECT_TRUE(spam.strip_headers);
  EXPECT_EQ(spam.report_title, "SpamAssassin: ham against spam");
  const TextClassificationJob csv =
      text(apply_settings(preset_job("spam"), {{"--source", "csv"}, {"--data", "t.csv"}}));
  EXPECT_FALSE(csv.strip_headers);
  EXPECT_EQ(title_of(csv), "Text classification: t.csv");
  // The same source again changes nothing; --set data.source does what --source does.
  EXPECT_TRUE(text(apply_settings(preset_job("spam"), {{"--source", "spamassassin"}})).strip_headers);
  EXPECT_FALSE(text(apply_settings(preset_job("spam"), {{"--set", "data.source=tsv"}})).strip_headers);
  // Keys the command line gave itself stay, before or after the source.
  const TextClassificationJob kept = text(apply_settings(
      preset_job("spam"), {{"--set", "title=Mail"}, {"--source", "csv"}, {"--set", "data.strip_headers=true"}}));
  EXPECT_EQ(kept.report_title, "Mail");
  EXPECT_TRUE(kept.strip_headers);
}

TEST(Jobs, FlagsApplyAsEachKindTakesThem) {
  std::vector<JobSetting> flags = {
      {"--steps", "7"},  {"--d-model", "32"},     {"--num-heads", "2"}, {"--attention", "sliding_window"},
      {"--window", "3"}, {"--precision", "fp16"}, {"--seed", "9"}};

  const Job text = apply_settings(preset_job("spam"), flags);
  const auto& t = std::get<TextClassificationJob>(text);
  EXPECT_EQ(t.budget.max_steps, 7);  // epoch jobs: a cap
  EXPECT_EQ(t.model.layer.d_model, 32);
  EXPECT_EQ(t.model.layer.pattern.window_left, 3);
  EXPECT_EQ(t.model.layer.pattern.window_right, 3);
  EXPECT_EQ(t.train.precision, Precision::kF16);
  EXPECT_TRUE(t.train.loss_scaling);  // follows the precision the flag set
  EXPECT_EQ(t.train.seed, 9u);
  // The other keys keep the preset's values; a key whose default follows
  // another (dim_feedforward: 4 x d_model) keeps the value it had.
  const Job spam_job = preset_job("spam");
  const auto& spam = std::get<TextClassificationJob>(spam_job);
  EXPECT_EQ(t.model.layer.dim_feedforward, spam.model.layer.dim_feedforward);
  EXPECT_EQ(t.train.schedule.total_steps, spam.train.schedule.total_steps);

  const Job lm = apply_settings(preset_job("moby-dick"), flags);
  EXPECT_EQ(std::get<LanguageModelJob>(lm).train.steps, 7);  // step jobs: the steps
  // Which --steps sets follows from the keys a kind has, not its name: a
  // kind that trains in epochs takes the cap, whichever it is.
  const auto steps_of = [](const Job& job) {
    return std::visit(
        [](const auto& j) {
          return std::pair{j.train.steps, to_json(j)["train"].value("max_steps", -1)};
        },
        apply_settings(job, {{"--steps", "7"}}));
  };
  EXPECT_EQ(steps_of(WordStressJob()).second, 7);
  EXPECT_EQ(steps_of(WordStressJob()).first, WordStressJob().train.steps);
  EXPECT_EQ(steps_of(PronunciationJob()).second, 7);
  EXPECT_EQ(steps_of(SequenceTaskJob()), (std::pair<std::int64_t, int>{7, -1}));

  // Image jobs take the layer's width and heads; their configs carry no attention pattern, so
  // --attention and --window are refused there rather than lost from the run's config.
  const Job image = apply_settings(preset_job("fashion-mnist"), {{"--steps", "7"}, {"--num-heads", "2"}});
  const auto& v = std::get<ImageClassificationJob>(image);
  EXPECT_EQ(v.budget.max_steps, 7);
  EXPECT_EQ(v.model.layer.nhead, 2);

  // The sequence task's vocabulary is its symbols, whatever the tokenizer defaults say.
  const Job seq = apply_settings(preset_job("reverse"), flags);
  const auto& s = std::get<SequenceTaskJob>(seq);
  EXPECT_EQ(s.model.vocab_size, s.task.vocab_size());
  EXPECT_EQ(s.train.steps, 7);

  // Pronunciation: an epoch job; the layer settings reach encoder and decoder alike.
  flags.push_back({"--positions", "alibi"});
  const Job words = apply_settings(preset_job("cmudict"), flags);
  const auto& w = std::get<PronunciationJob>(words);
  EXPECT_EQ(w.budget.max_steps, 7);
  EXPECT_EQ(w.model.model.layer.d_model, 32);
  EXPECT_EQ(w.model.model.positions, PositionKind::kAlibi);
  EXPECT_EQ(w.model.decoder_depth(), w.model.model.num_layers);
}

TEST(Jobs, SetSetsAnyKeyByItsPath) {
  const Job job = apply_settings(preset_job("spam"), {{"--set", "model.rope_theta=500000"},
                                                      {"--set", "train.betas=[0.8, 0.95]"},
                                                      {"--set", "data.text_column=body"},
                                                      {"--d-model", "64"},
                                                      {"--set", "model.d_model=32"}});
  const auto& t = std::get<TextClassificationJob>(job);
  EXPECT_EQ(t.model.rope_theta, 500000.0);
  EXPECT_EQ(t.train.adamw.beta1, 0.8);
  EXPECT_EQ(t.train.adamw.beta2, 0.95);
  EXPECT_EQ(t.text_column, "body");
  EXPECT_EQ(t.model.layer.d_model, 32);  // in the order given: the last one wins
  // A key added to a key list is settable with nothing else to change: train.dampening.
  const Job sgd = apply_settings(
      preset_job("spam"),
      {{"--set", "train.optimizer=sgd"}, {"--set", "train.momentum=0.9"}, {"--set", "train.dampening=0.25"}});
  EXPECT_EQ(std::get<TextClassificationJob>(sgd).train.sgd.dampening, 0.25);
  EXPECT_EQ(test::error_message([&] {
              apply_settings(preset_job("spam"), {{"--set", "train.optimizer=sgd"},
                                                  {"--set", "train.nesterov=true"},
                                                  {"--set", "train.momentum=0.9"},
                                                  {"--set", "train.dampening=0.25"}});
            }),
            "nesterov needs a momentum and no dampening (as torch.optim.SGD), got momentum 0.9 "
            "and dampening 0.25");
  EXPECT_EQ(test::error_message([&] {
              apply_settings(preset_job("spam"), {{"--set", "train.dampening=2"}});
            }),
            "the flags: train: dampening must be in [0, 1], got 2");
}

// The error applying `settings` to `job` gives ("no error" when none).
std::string refusal(const Job& job, const std::vector<JobSetting>& settings) {
  return test::error_message([&] { apply_settings(job, settings); });
}

TEST(Jobs, FlagsThatMeanNothingForAKindAreRefusedByName) {
  EXPECT_EQ(refusal(preset_job("fashion-mnist"), {{"--vocab-size", "100"}, {"--positions", "rope"}}),
            "--positions and --vocab-size do not apply to image jobs");
  EXPECT_EQ(refusal(preset_job("fashion-mnist"), {{"--attention", "linear"}}),
            "--attention does not apply to image jobs");
  EXPECT_EQ(refusal(preset_job("reverse"), {{"--data", "somewhere"}}),
            "--data does not apply to synthetic sequence tasks");
  EXPECT_EQ(refusal(preset_job("reverse"), {{"--max-len", "9"}}),
            "--max-len does not apply to synthetic sequence tasks");
  EXPECT_EQ(refusal(preset_job("cmudict"), {{"--tokenizer", "bpe"}}),
            "--tokenizer does not apply to pronunciation jobs");
  EXPECT_EQ(refusal(preset_job("moby-dick"), {{"--source", "csv"}, {"--epochs", "2"}}),
            "--epochs and --source do not apply to language models");
  EXPECT_EQ(refusal(preset_job("spam"), {}), "no error");
}

TEST(Jobs, ABadValueNamesItsFlagOrKey) {
  EXPECT_EQ(refusal(preset_job("spam"), {{"--batch", "30"}, {"--grad-accumulation", "4"}}),
            "batch (30) must be a multiple of grad_accumulation (4)");
  EXPECT_EQ(refusal(preset_job("spam"), {{"--epochs", "0"}}),
            "the flags: train: epochs must be in [1, 1000000], got 0");
  EXPECT_EQ(refusal(preset_job("spam"), {{"--lr", "nan"}}), "the flags: train: lr must be > 0, got nan");
  EXPECT_EQ(refusal(preset_job("spam"), {{"--d-model", "wide"}}), "--d-model: expected an integer, got 'wide'");
  EXPECT_EQ(refusal(preset_job("spam"), {{"--checkpoint-layers", "maybe"}}),
            "--checkpoint-layers: expected true or false, got 'maybe'");
  EXPECT_EQ(refusal(preset_job("spam"), {{"--set", "model.colour=3"}}), "the flags: model: unknown key 'colour'");
  EXPECT_EQ(refusal(preset_job("spam"), {{"--set", "model.d_model"}}),
            "--set takes path=value (a key path such as model.d_model), got 'model.d_model'");
}

// Every key of every kind is described once, with the flag that sets it, and
// docs/CONFIG.md is that description.
TEST(Jobs, EveryKeyIsDescribedWithItsDefaultAndBounds) {
  const std::vector<JobKeyRow> rows = job_key_rows();
  auto row = [&](const std::string& path) {
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const JobKeyRow& r) { return r.key.path == path; });
    EXPECT_NE(it, rows.end()) << path;
    return it == rows.end() ? JobKeyRow{} : *it;
  };
  EXPECT_EQ(row("model.d_model").key.bounds, "in [1, 65536]");
  EXPECT_EQ(row("model.d_model").key.type, "integer");
  EXPECT_EQ(row("model.dim_feedforward").key.default_value, "4 x d_model");
  EXPECT_EQ(row("train.lr").key.bounds, "> 0");
  EXPECT_EQ(row("train.momentum").key.bounds, "in [0, 1)");
  EXPECT_EQ(row("train.epochs").tasks,
            (std::vector<std::string>{"text_classification", "image_classification", "pronunciation", "word_stress"}));
  EXPECT_EQ(row("threads").tasks, job_tasks());  // every kind
  // Every key says what it sets, and a name's bounds are the names it takes.
  for (const JobKeyRow& r : rows)
    for (std::size_t i = 0; i < r.tasks.size(); ++i)
      EXPECT_FALSE(r.by_task[i].description.empty()) << r.key.path << " of " << r.tasks[i] << " has no doc()";
  // Where kinds differ, each kind's bounds show: a pronunciation job's fractions are below 0.5.
  EXPECT_NE(job_keys_markdown().find("in [0, 1) (text_classification); in (0, 1) (language_modeling); in (0, 0.5) "
                                     "(pronunciation); in [0, 0.5] (word_stress)"),
            std::string::npos);
  EXPECT_EQ(row("model.positions").key.bounds, "one of none, sinusoidal, learned, relative, rope, alibi");
  EXPECT_EQ(row("train.optimizer").key.bounds, "one of adamw, sgd");
  EXPECT_EQ(row("train.lr").key.description, "the peak learning rate, reached after the warmup");
  // The keys a resume may change are those that change neither the data nor what is left to train, and the
  // length (the resume restarts the decay); the key lists mark them, and docs/CONFIG.md says so.
  std::set<std::string> free;
  for (const JobKeyRow& r : rows)
    if (r.key.may_change_on_resume) free.insert(r.key.path);
  EXPECT_EQ(free, (std::set<std::string>{"threads", "train.warmup_ratio", "train.steps", "train.total_steps",
                                         "train.restart_step", "train.restart_lr", "train.on_nonfinite",
                                         "train.checkpoint_every", "train.keep_checkpoints", "train.init_sha256",
                                         "train.epochs", "train.max_steps"}));
  EXPECT_NE(
      job_keys_markdown().find("| `threads` | threads the run computes on (0: all cores) (may change on resume) |"),
      std::string::npos);
  // Every key a preset's config has is described, and every described key path is unique.
  std::set<std::string> paths;
  for (const JobKeyRow& r : rows) EXPECT_TRUE(paths.insert(r.key.path).second) << r.key.path;
  for (const Preset& p : presets()) {
    const json flat = to_json(p.make()).flatten();
    for (const auto& item : flat.items()) {
      std::string path = item.key().substr(1);
      std::replace(path.begin(), path.end(), '/', '.');
      // An array's elements ("train.betas.0") belong to its key.
      const std::size_t dot = path.rfind('.');
      if (dot != std::string::npos && path.find_first_not_of("0123456789", dot + 1) == std::string::npos)
        path = path.substr(0, dot);
      EXPECT_TRUE(paths.count(path)) << p.name << ": " << path;
    }
  }
  EXPECT_EQ(job_keys_markdown(),
            read_file((test::golden_dir().parent_path().parent_path() / "docs" / "CONFIG.md").string()))
      << "docs/CONFIG.md is not current: multihead keys --markdown > docs/CONFIG.md";
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
  // Every kind in the registry, a new one included without a line here.
  [&]<std::size_t... I>(std::index_sequence<I...>) { (check(std::variant_alternative_t<I, Job>()), ...); }
  (std::make_index_sequence<std::variant_size_v<Job>>{});
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
  EXPECT_EQ(error(json{{"task", "pronunciation"}, {"decode", {{"beams", 2}}}}),
            "c.json: decode: unknown key 'beams' (did you mean 'beam'?)");
  EXPECT_EQ(error(json{{"task", "sequence_task"}, {"data", {{"kind", "shuffle"}}}}),
            "c.json: data: synthetic task must be copy, reverse or sort, got \"shuffle\"");
  EXPECT_EQ(error(json{{"task", "image_classification"}, {"model", {{"d_model", "wide"}}}}),
            "c.json: model: 'd_model' must be an integer");
}

}  // namespace
}  // namespace multihead
