// A user's own labelled data through the CLI: JSON Lines with columns named
// by flags, a run titled after its data, and `eval` scoring the test split
// or a new three-class file, with per-class scores, the confusion matrix
// and calibration in results.json, report.md and figures; `predict --json`
// giving every class's probability.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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
    const char* kinds[][2] = {{"refund charge invoice", "billing"}, {"crash error broken", "bug"},
                              {"please add option", "feature"}};
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
  EXPECT_EQ(eval.out.rfind(fmt::format("test accuracy: {:.2f}% (18 examples)",
                                       100 * results["test_accuracy"].get<double>()), 0),
            0u)
      << eval.out;
  EXPECT_NE(eval.out.find("macro F1 "), std::string::npos);
  EXPECT_NE(eval.out.find("| true \\ predicted | billing | bug | feature |"), std::string::npos) << eval.out;

  // A new file, a CSV with the classes in another order and other columns' names given by flags.
  std::ofstream(path("new.csv")) << "kind,words\nfeature,please add option\nbug,crash error broken\n"
                                    "billing,refund charge invoice\nbug,error crash\n";
  const test::CliRun scored = test::run("eval --run " + path("run") + " --data " + path("new.csv") +
                                        " --text-column words --label-column kind --out " + path("eval") +
                                        " --threads 1");
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
  const test::CliRun r = test::run("train --source jsonl --data " + path("tickets.jsonl") + " --out " + path("run") +
                                   kTiny);
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
  const test::CliRun r = test::run("train --preset spam --source csv --data " + path("mail.csv") + " --out " +
                                   path("run") + kTiny);
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

}  // namespace
}  // namespace multihead
