// SPDX-License-Identifier: Apache-2.0
// The word stress task: its labels from CMUdict's stress digits, and a run
// trained, evaluated and refused where it does not apply, through the CLI
// like any other kind (the task was added by docs/ARCHITECTURE.md's recipe).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "multihead/data/cmudict.h"
#include "multihead/io/atomic_file.h"
#include "multihead/tasks/word_stress.h"

namespace multihead {
namespace {

using nlohmann::json;
using Pronunciations = std::vector<std::vector<std::string>>;

TEST(WordStress, TheClassIsTheSyllableOfThePrimaryStress) {
  EXPECT_EQ(stress_class({{"T", "EY1", "B", "AH0", "L"}}), 0);                                  // TA-ble
  EXPECT_EQ(stress_class({{"AH0", "B", "AE1", "N", "D", "AH0", "N"}}), 1);                      // a-BAN-don
  EXPECT_EQ(stress_class({{"EH2", "N", "T", "ER0", "T", "EY1", "N"}}), 2);                      // en-ter-TAIN
  EXPECT_EQ(stress_class({{"AH0", "K", "AA2", "M", "AH0", "D", "EY1", "SH", "AH0", "N"}}), 3);  // ac-com-mo-DA-tion
  EXPECT_EQ(stress_class({{"AH0", "B", "AE1", "N"}, {"AH0", "B", "AA1", "N"}}), 1);             // variants that agree
  EXPECT_EQ(stress_class({{"K", "AE1", "T"}}), std::nullopt);  // one syllable: no choice
  EXPECT_EQ(stress_class({{"R", "EH1", "K", "ER0", "D"}, {"R", "IH0", "K", "AO1", "R", "D"}}),
            std::nullopt);                                             // REcord and reCORD
  EXPECT_EQ(stress_class({{"DH", "AH0", "M", "AH0"}}), std::nullopt);  // no primary stress
  EXPECT_EQ(stress_class_names().size(), static_cast<std::size_t>(WordStressJob::kClasses));
}

class WordStressRun : public test::Cli {
 protected:
  void SetUp() override {
    Cli::SetUp();
    // Words over A..F where A is the stressed vowel (AE1) and E unstressed (IY0).
    std::ofstream(dir / "dict.txt") << regular_spelling_dictionary(180, 4);
    config = (dir / "c.json").string();
    std::ofstream(config) << json{{"task", "word_stress"},
                                  {"data", {{"path", (dir / "dict.txt").string()}, {"test_fraction", 0.2}}},
                                  {"model", {{"d_model", 16}, {"nhead", 2}, {"num_layers", 1}}},
                                  {"train", {{"epochs", 1}, {"batch", 16}}}}
                                 .dump();
    out = (dir / "run").string();
  }
  std::string config, out;
};

TEST_F(WordStressRun, TrainsEvaluatesAndIsRefusedWhereItDoesNotApply) {
  test::CliRun t = test::run("train --config " + config + " --out " + out + " --threads 1 --quiet");
  ASSERT_EQ(t.code, 0) << t.err;
  const std::string first = t.out.substr(0, t.out.find('\n'));
  EXPECT_EQ(first.rfind("test accuracy: ", 0), 0u) << t.out;
  EXPECT_NE(t.out.find("always the most common class: "), std::string::npos) << t.out;
  const json results = json::parse(read_file(out + "/results.json"));
  EXPECT_EQ(results["labels"].size(), 4u);
  EXPECT_GT(results["test_accuracy"].get<double>(), 0.0);
  EXPECT_GE(results["majority_accuracy"].get<double>(), 0.25);  // the most common of four classes
  EXPECT_EQ(json::parse(read_file(out + "/config.json"))["model"]["num_classes"], 4);
  // What went wrong, by stressed syllable, in results.json and the report.
  EXPECT_EQ(results["test"]["confusion_matrix"]["labels"], results["labels"]);
  std::int64_t counted = 0;
  for (const auto& row : results["test"]["confusion_matrix"]["counts"])
    for (const auto& n : row) counted += n.get<std::int64_t>();
  EXPECT_EQ(counted, results["test"]["examples"].get<std::int64_t>());
  EXPECT_NE(read_file(out + "/report.md").find("## Errors"), std::string::npos);
  // eval reloads the model and the same test split: the same line.
  test::CliRun e = test::run("eval --run " + out + " --threads 1");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out, first + "\n");
  // A flag whose keys the kind lacks is refused by name, as for any kind.
  test::CliRun f = test::run("train --config " + config + " --out " + out + "2 --tokenizer bpe --quiet");
  EXPECT_EQ(f.code, 2);
  EXPECT_EQ(f.err, "multihead: error: --tokenizer does not apply to word stress jobs\n");
  // No trained-run kind answers for it: predict says so.
  std::ofstream(dir / "words.txt") << "ABBA\n";
  test::CliRun p = test::run("predict --run " + out + " --input " + (dir / "words.txt").string());
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("this run's task is 'word_stress'"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace multihead
