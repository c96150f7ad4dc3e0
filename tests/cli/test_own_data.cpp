// SPDX-License-Identifier: Apache-2.0
// A user's own labelled data through the CLI: JSON Lines with columns named
// by flags, a run titled after its data, and `eval` scoring the test split
// or a new three-class file, with per-class scores, the confusion matrix
// and calibration in results.json, report.md and figures; `predict --json`
// giving every class's probability.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "multihead/io/atomic_file.h"

namespace multihead {
namespace {

using nlohmann::json;

class OwnData : public test::Cli {
 protected:
  void SetUp() override {
    Cli::SetUp();
    // Three classes that a word each tells apart, under keys of the user's naming.
    std::ofstream f(dir / "tickets.jsonl");
    const char* kinds[][2] = {
        {"refund charge invoice", "billing"}, {"crash error broken", "bug"}, {"please add option", "feature"}};
    for (int r = 0; r < 30; ++r)
      for (const auto& k : kinds) f << json{{"id", r}, {"body", k[0]}, {"kind", k[1]}}.dump() << "\n";
  }
  std::string path(const char* name) const { return (dir / name).string(); }
  static constexpr const char* kTiny =
      " --tokenizer word --vocab-size 32 --max-len 8 --d-model 16 --num-heads 2 --num-layers 1 --batch 8 "
      "--lr 0.01 --warmup-steps 2 --epochs 4 --threads 1 --quiet";
  std::string train_run() const {
    return "train --source jsonl --data " + path("tickets.jsonl") + " --text-column body --label-column kind --out " +
           path("run") + kTiny;
  }
};

TEST_F(OwnData, JsonLinesTrainWithNamedColumnsAndAreEvaluatedInFull) {
  const test::CliRun trained = test::run(train_run());
  ASSERT_EQ(trained.code, 0) << trained.err;
  const json config = json::parse(read_file(path("run") + "/config.json"));
  EXPECT_EQ(config["title"], "Text classification: tickets.jsonl");  // named after the data
  EXPECT_EQ(config["data"]["text_column"], "body");
  EXPECT_EQ(config["data"]["strip_headers"], false);
  const json results = json::parse(read_file(path("run") + "/results.json"));
  const json& test = results["test"];
  std::int64_t total = 0, diagonal = 0;
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t p = 0; p < 3; ++p) {
      total += test["confusion_matrix"]["counts"][t][p].get<std::int64_t>();
      if (t == p) diagonal += test["confusion_matrix"]["counts"][t][p].get<std::int64_t>();
    }
  EXPECT_EQ(total, test["examples"].get<std::int64_t>());
  EXPECT_EQ(total, 18);  // 20% of 90
  EXPECT_DOUBLE_EQ(results["test_accuracy"].get<double>(), static_cast<double>(diagonal) / static_cast<double>(total));
  EXPECT_EQ(test["per_class"].size(), 3u);
  EXPECT_TRUE(test["calibration"].contains("ece"));
  const std::string report = read_file(path("run") + "/report.md");
  EXPECT_EQ(report.rfind("# Text classification: tickets.jsonl\n", 0), 0u);
  for (const char* part : {"## Errors", "| class | precision | recall | F1 | examples | predicted |",
                           "![confusion matrix](plots/confusion.png)", "![reliability diagram](plots/reliability.png)"})
    EXPECT_NE(report.find(part), std::string::npos) << part;
  for (const char* f : {"plots/confusion.png", "plots/reliability.png"})
    EXPECT_TRUE(std::filesystem::exists(path("run") + "/" + f)) << f;

  // eval: the test split again, the same figures as the run's own.
  const test::CliRun eval = test::run("eval --run " + path("run") + " --threads 1");
  ASSERT_EQ(eval.code, 0) << eval.err;
  EXPECT_EQ(eval.out.rfind(
                fmt::format("test accuracy: {:.2f}% (18 examples)", 100 * results["test_accuracy"].get<double>()), 0),
            0u)
      << eval.out;
  EXPECT_NE(eval.out.find("macro F1 "), std::string::npos);
  EXPECT_NE(eval.out.find("| true \\ predicted | billing | bug | feature |"), std::string::npos) << eval.out;

  // A new file, a CSV with the classes in another order and other columns' names given by flags.
  std::ofstream(path("new.csv")) << "kind,words\nfeature,please add option\nbug,crash error broken\n"
                                    "billing,refund charge invoice\nbug,error crash\n";
  const test::CliRun scored =
      test::run("eval --run " + path("run") + " --data " + path("new.csv") +
                " --text-column words --label-column kind --out " + path("eval") + " --threads 1");
  ASSERT_EQ(scored.code, 0) << scored.err;
  EXPECT_EQ(scored.out.rfind("new.csv accuracy: ", 0), 0u) << scored.out;
  const json er = json::parse(read_file(path("eval") + "/results.json"));
  EXPECT_EQ(er["examples"], 4);
  EXPECT_EQ(er["data"], path("new.csv"));
  EXPECT_EQ(er["confusion_matrix"]["labels"], results["labels"]);  // the run's classes, in the run's order
  EXPECT_EQ(er["per_class"]["bug"]["support"], 2);
  EXPECT_NE(read_file(path("eval") + "/report.md").find("## Errors"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(path("eval") + "/plots/confusion.png"));

  // A class the run never saw: one line naming it and the run's classes, nothing written.
  std::ofstream(path("odd.csv")) << "text,label\nhello,greeting\n";
  const test::CliRun odd = test::run("eval --run " + path("run") + " --data " + path("odd.csv") +
                                     " --text-column text --label-column label --out " + path("odd") + " --threads 1");
  EXPECT_EQ(odd.code, 2);
  EXPECT_EQ(odd.err, "multihead: error: " + path("odd.csv") +
                         ": the label 'greeting' is not one of the run's classes (billing, bug, feature)\n");
  EXPECT_FALSE(std::filesystem::exists(path("odd")));

  // predict --json: every class's probability.
  std::ofstream(path("in.txt")) << "refund please\n";
  const test::CliRun predicted = test::run("predict --run " + path("run") + " --input " + path("in.txt") + " --json");
  ASSERT_EQ(predicted.code, 0) << predicted.err;
  const json answer = json::parse(predicted.out);
  double sum = 0;
  for (const char* label : {"billing", "bug", "feature"}) sum += answer["probabilities"][label].get<double>();
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST_F(OwnData, AMissingColumnListsTheColumnsFound) {
  const test::CliRun r =
      test::run("train --source jsonl --data " + path("tickets.jsonl") + " --out " + path("run") + kTiny);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "multihead: error: " + path("tickets.jsonl") +
                       ": line 1: no key named 'text' (the keys are: 'body', 'id', 'kind'; --text-column names "
                       "another)\n");
  EXPECT_FALSE(std::filesystem::exists(path("run")));
}

TEST_F(OwnData, AnotherSourceDropsThePresetsTitleAndPreprocessing) {
  std::ofstream(path("mail.csv")) << "text,label\n";
  {
    std::ofstream f(path("mail.csv"), std::ios::app);
    for (int r = 0; r < 20; ++r) f << "\"Subject: hi\n\nlunch at noon\",ham\n\"Subject: win\n\ncash prize now\",spam\n";
  }
  const test::CliRun r =
      test::run("train --preset spam --source csv --data " + path("mail.csv") + " --out " + path("run") + kTiny);
  ASSERT_EQ(r.code, 0) << r.err;
  const json config = json::parse(read_file(path("run") + "/config.json"));
  EXPECT_EQ(config["title"], "Text classification: mail.csv");
  EXPECT_EQ(config["data"]["strip_headers"], false);
  // Asked for, the headers go from CSV texts too (the tokenizer then never sees "Subject").
  const test::CliRun stripped = test::run("train --preset spam --source csv --data " + path("mail.csv") +
                                          " --set data.strip_headers=true --out " + path("stripped") + kTiny);
  ASSERT_EQ(stripped.code, 0) << stripped.err;
  EXPECT_EQ(read_file(path("stripped") + "/tokenizer/tokenizer.json").find("ubject"), std::string::npos);
  EXPECT_NE(read_file(path("run") + "/tokenizer/tokenizer.json").find("ubject"), std::string::npos);
}

// The traps a first run on one's own file fell into, each through the CLI
// as typed: the format from the extension, one recipe however the job is
// given, warmup scaled to the run, a TSV read as CSV, a column's case.
TEST_F(OwnData, TheFormatComesFromTheExtensionAndOneRecipeServesFlagsAndConfigs) {
  // No --source: the extension names the format (it used to look for the SpamAssassin corpus).
  const std::string columns = " --text-column body --label-column kind";
  const test::CliRun by_flags =
      test::run("train --data " + path("tickets.jsonl") + columns + " --threads 1 --quiet --epochs 1 --out " +
                path("flags") + " --tokenizer word --vocab-size 32");
  ASSERT_EQ(by_flags.code, 0) << by_flags.err;
  json flags = json::parse(read_file(path("flags") + "/config.json"));
  EXPECT_EQ(flags["data"]["source"], "jsonl");  // recorded as the extension named it
  // The same job from a config file: the same settings, key for key (the
  // flags used to take the spam preset's model and schedule).
  std::ofstream(path("job.json")) << json{
      {"data", {{"path", path("tickets.jsonl")}, {"text_column", "body"}, {"label_column", "kind"}}},
      {"tokenizer", {{"kind", "word"}, {"vocab_size", 32}}},
      {"train", {{"epochs", 1}}},
      {"threads", 1}}.dump();
  const test::CliRun by_config = test::run("train --config " + path("job.json") + " --quiet --out " + path("config"));
  ASSERT_EQ(by_config.code, 0) << by_config.err;
  json config = json::parse(read_file(path("config") + "/config.json"));
  for (json* j : {&flags, &config}) j->erase("train");
  EXPECT_EQ(flags, config);
  const json train = json::parse(read_file(path("flags") + "/config.json"))["train"];
  EXPECT_EQ(train, json::parse(read_file(path("config") + "/config.json"))["train"]);
  // The recipe: cosine decay after a warmup of 10% of the run (at least a step), clipping at 1.
  EXPECT_EQ(train["schedule"], "cosine");
  EXPECT_EQ(train["clip_grad_norm"], 1.0);
  EXPECT_EQ(train["steps"], 2);  // 63 training examples in batches of 32
  EXPECT_EQ(train["warmup_steps"], 1);
  EXPECT_EQ(by_flags.err.find("warmup"), std::string::npos) << by_flags.err;
  // A preset only when named: its settings then, on the user's data.
  const test::CliRun preset = test::run("train --preset spam --data " + path("tickets.jsonl") + columns +
                                        " --source jsonl --epochs 1 --threads 1 --quiet --out " + path("preset") +
                                        " --tokenizer word --vocab-size 32");
  ASSERT_EQ(preset.code, 0) << preset.err;
  EXPECT_EQ(json::parse(read_file(path("preset") + "/config.json"))["model"]["dim_feedforward"], 256);
  EXPECT_EQ(config["model"]["dim_feedforward"], 512);
}

TEST_F(OwnData, AnUnknownFormatOrAWrongDelimiterSaysWhatToGive) {
  std::ofstream(path("notes.txt")) << "text,label\n";
  const test::CliRun unnamed = test::run("train --data " + path("notes.txt") + kTiny + " --out " + path("run"));
  EXPECT_EQ(unnamed.code, 2);
  EXPECT_EQ(unnamed.err, "multihead: error: " + path("notes.txt") +
                             ": cannot tell the data's format from its name; give --source (csv, tsv, jsonl, or "
                             "spamassassin or aclimdb for those corpora's folders)\n");
  // A TSV named .csv: one column with tabs inside, and the hint.
  {
    std::ofstream f(path("tabs.csv"));
    f << "text\tlabel\n";
    for (int r = 0; r < 10; ++r) f << "good day\tpos\nbad day\tneg\n";
  }
  const test::CliRun tabs = test::run("train --data " + path("tabs.csv") + kTiny + " --out " + path("run"));
  EXPECT_EQ(tabs.code, 2);
  EXPECT_EQ(tabs.err, "multihead: error: " + path("tabs.csv") +
                          ": line 1: no column named 'text' (the columns are: 'text\tlabel'; --text-column names "
                          "another); its header has tabs and no commas: give --source tsv\n");
  // A labelled file given to the corpus source, and a mistyped source.
  const test::CliRun corpus =
      test::run("train --source spamassassin --data " + path("tabs.csv") + kTiny + " --out " + path("run"));
  EXPECT_EQ(corpus.code, 2);
  EXPECT_EQ(corpus.err, "multihead: error: " + path("tabs.csv") +
                            " is a csv file, and the spamassassin source reads its corpus's folder; give --source csv "
                            "(or leave --source out: the extension names the format)\n");
  const test::CliRun json_source =
      test::run("train --source json --data " + path("tickets.jsonl") + kTiny + " --out " + path("run"));
  EXPECT_EQ(json_source.code, 2);
  EXPECT_NE(json_source.err.find("got 'json' (did you mean 'jsonl'?)"), std::string::npos) << json_source.err;
  // A column named in another case.
  const test::CliRun cased = test::run("train --data " + path("tickets.jsonl") +
                                       " --text-column Body --label-column kind" + kTiny + " --out " + path("run"));
  EXPECT_EQ(cased.code, 2);
  EXPECT_NE(cased.err.find("no key named 'Body' (did you mean 'body'? the keys are"), std::string::npos) << cased.err;
  EXPECT_FALSE(std::filesystem::exists(path("run")));
}

// --class-weights balanced weighs each class by n / (classes x its count in
// the training split), recorded and logged; a stratified split (the
// default) keeps a rare class's share in every split.
TEST_F(OwnData, BalancedClassWeightsAndAStratifiedSplit) {
  {
    std::ofstream f(path("rare.csv"));
    f << "text,label\n";
    for (int r = 0; r < 90; ++r) f << "common words here,common\n";
    for (int r = 0; r < 10; ++r) f << "rare words there,rare\n";
  }
  const test::CliRun r =
      test::run("train --data " + path("rare.csv") +
                " --class-weights balanced --tokenizer word --vocab-size 32 --max-len 8 --d-model 16 "
                "--num-heads 2 --num-layers 1 --epochs 1 --threads 1 --out " +
                path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  // 70 training examples: 63 common, 7 rare: weights 70 / (2 x 63) and 70 / (2 x 7).
  EXPECT_NE(r.err.find("class weights (balanced): 0.556, 5.000"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(read_file(path("run") + "/config.json"))["class_weights"], "balanced");
  const json results = json::parse(read_file(path("run") + "/results.json"));
  EXPECT_EQ(results["test"]["per_class"]["rare"]["support"], 2);  // 20% of the rare class's 10
  const test::CliRun bad =
      test::run("train --data " + path("rare.csv") + " --class-weights balance" + kTiny + " --out " + path("never"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("class_weights must be none or balanced, got 'balance' (did you mean 'balanced'?)"),
            std::string::npos)
      << bad.err;
}

// --early-stopping N: training stops after N validations without a lower
// validation loss, the best one's weights kept (best.safetensors), tested
// and answered with: eval reproduces the test accuracy train printed, from
// them. A resumed run that stopped early trains no further.
TEST_F(OwnData, EarlyStoppingKeepsTheBestValidationsWeights) {
  // A learning rate that overfits 90 examples at once: the validation loss rises after a few epochs.
  const std::string job = "train --data " + path("tickets.jsonl") +
                          " --text-column body --label-column kind --tokenizer word --vocab-size 32 --max-len 8 "
                          "--d-model 16 --num-heads 2 --num-layers 1 --batch 8 --lr 0.3 --schedule constant "
                          "--warmup-ratio 0 --clip-grad-norm 0 --epochs 60 --early-stopping 2 --threads 1 --out " +
                          path("run");
  const test::CliRun r = test::run(job);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("early stopping: the validation loss has not fallen below"), std::string::npos) << r.err;
  // Said before the tokenizer trains (SentencePiece can take a minute), and the first step logged.
  EXPECT_NE(r.err.find("tokenizer: training a word tokenizer of at most 32 tokens on 63 texts..."), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("\nstep 1/"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("stopped early; the best validation at step "), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(path("run") + "/checkpoints/best.safetensors"));
  const json results = json::parse(read_file(path("run") + "/results.json"));
  EXPECT_LT(results["steps"].get<int>(), 60 * 8);  // 63 training examples: 8 steps an epoch
  // The validations after the best: exactly the patience.
  std::vector<double> losses;
  std::istringstream metrics(read_file(path("run") + "/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const json rec = json::parse(line);
    if (rec.contains("validation_loss")) losses.push_back(rec["validation_loss"].get<double>());
  }
  ASSERT_GE(losses.size(), 3u);
  const auto best = std::min_element(losses.begin(), losses.end());
  EXPECT_EQ(losses.end() - best - 1, 2) << "validations after the best";
  const test::CliRun e = test::run("eval --run " + path("run") + " --threads 1");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out.substr(0, e.out.find('\n')), r.out.substr(0, r.out.find('\n')));
  const std::string before = read_file(path("run") + "/metrics.jsonl");
  const test::CliRun again = test::run("train --resume --threads 1 --quiet --out " + path("run"));
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(read_file(path("run") + "/metrics.jsonl").substr(0, before.size()), before);
  EXPECT_EQ(json::parse(read_file(path("run") + "/results.json"))["steps"], results["steps"]);
  // Replaced (--overwrite) by a run without early stopping, no best checkpoint of the run it
  // replaced is left to answer with: eval answers with the new run's weights.
  const std::string plain =
      job.substr(0, job.find(" --early-stopping")) + " --threads 1 --out " + path("run") + " --epochs 2 --overwrite";
  const test::CliRun replaced = test::run(plain);
  ASSERT_EQ(replaced.code, 0) << replaced.err;
  EXPECT_FALSE(std::filesystem::exists(path("run") + "/checkpoints/best.safetensors"));
  const test::CliRun e2 = test::run("eval --run " + path("run") + " --threads 1");
  ASSERT_EQ(e2.code, 0) << e2.err;
  EXPECT_EQ(e2.out.substr(0, e2.out.find('\n')), replaced.out.substr(0, replaced.out.find('\n')));
}

}  // namespace
}  // namespace multihead
