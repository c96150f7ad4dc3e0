// Fine-tuning through the CLI: `train --init-from RUN [--init-skip REGEX]`
// starts from another run's weights and takes its tokenizer, on data with
// other labels (a new head, skipped); the run records where it started, and
// what does not fit is refused in one line, leaving nothing behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "multihead/io/atomic_file.h"
#include "multihead/train/initial_weights.h"

namespace multihead {
namespace {

using nlohmann::json;

class FineTune : public test::Cli {
 protected:
  void SetUp() override {
    Cli::SetUp();
    test::write_sentiment_csv(dir / "reviews.csv", 24);
    // Three other labels over the same words.
    std::ofstream f(dir / "moods.csv");
    f << "text,label\n";
    for (int r = 0; r < 20; ++r)
      f << "good great fine,happy\nbad awful poor,sad\ngood bad fine,mixed\n";
  }
  std::string path(const char* name) const { return (dir / name).string(); }
  static constexpr const char* kTiny = " --d-model 16 --num-heads 2 --num-layers 1 --batch 8 --threads 1 --quiet";
};

TEST_F(FineTune, ARunFineTunedOnOtherLabelsStartsFromTheSourceAndSaysSo) {
  ASSERT_EQ(test::run("train --source csv --data " + path("reviews.csv") +
                      " --tokenizer word --vocab-size 32 --max-len 8 --epochs 2 --out " + path("source") + kTiny)
                .code,
            0);
  const std::string tune = "train --source csv --data " + path("moods.csv") + " --init-from " + path("source") +
                           " --max-len 8 --epochs 2 --out " + path("tuned") + kTiny;
  // The source's head has two classes, these data three: refused, naming it, with nothing left.
  const test::CliRun refused = test::run(tune);
  EXPECT_EQ(refused.code, 2);
  EXPECT_EQ(refused.err, "multihead: error: " + path("source") +
                             "/checkpoints/last.safetensors: 'classifier.weight' has shape (2, 16), the model's has "
                             "(3, 16) (skip it with --init-skip to train it afresh)\n");
  EXPECT_FALSE(std::filesystem::exists(path("tuned")));

  const test::CliRun tuned = test::run(tune + " --init-skip '^classifier\\.'");
  ASSERT_EQ(tuned.code, 0) << tuned.err;
  const json config = json::parse(read_file(path("tuned") + "/config.json"));
  const std::string checkpoint = path("source") + "/checkpoints/last.safetensors";
  EXPECT_EQ(config["train"]["init_from"], path("source"));
  EXPECT_EQ(config["train"]["init_skip"], "^classifier\\.");
  EXPECT_EQ(config["train"]["init_sha256"], sha256_hex(read_file(checkpoint)));
  // The source's tokenizer, and its section: the flags gave none.
  EXPECT_EQ(config["tokenizer"]["from"], path("source"));
  EXPECT_EQ(config["tokenizer"]["kind"], "word");
  EXPECT_EQ(read_file(path("tuned") + "/tokenizer/tokenizer.json"), read_file(path("source") + "/tokenizer/tokenizer.json"));
  const std::string report = read_file(path("tuned") + "/report.md");
  EXPECT_NE(report.find("| started from | `" + path("source") + "` (SHA-256 `" +
                        config["train"]["init_sha256"].get<std::string>() + "`); parameters matching `^classifier\\.` "
                        "initialised afresh |"),
            std::string::npos)
      << report;
  const json results = json::parse(read_file(path("tuned") + "/results.json"));
  EXPECT_EQ(results["labels"], (json{"happy", "sad", "mixed"}));  // in order of appearance
  const test::CliRun eval = test::run("eval --run " + path("tuned") + " --threads 1");
  ASSERT_EQ(eval.code, 0) << eval.err;
  EXPECT_EQ(eval.out.rfind("test accuracy: ", 0), 0u) << eval.out;
  // The run resumes as any other (its start is not applied again), and continues with the source gone.
  EXPECT_EQ(test::run("train --resume --out " + path("tuned") + " --threads 1 --quiet").code, 0);
  std::filesystem::remove_all(path("source"));
  const test::CliRun more = test::run("train --resume --epochs 3 --out " + path("tuned") + " --threads 1 --quiet");
  EXPECT_EQ(more.code, 0) << more.err;
  EXPECT_EQ(json::parse(read_file(path("tuned") + "/config.json"))["train"]["epochs"], 3);
}

TEST_F(FineTune, APinnedDigestThatDoesNotMatchIsRefused) {
  ASSERT_EQ(test::run("train --source csv --data " + path("reviews.csv") +
                      " --tokenizer word --vocab-size 32 --max-len 8 --epochs 1 --out " + path("source") + kTiny)
                .code,
            0);
  const test::CliRun r = test::run("train --source csv --data " + path("reviews.csv") + " --init-from " +
                                   path("source") + " --set train.init_sha256=00ff --max-len 8 --epochs 1 --out " +
                                   path("pinned") + kTiny);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("the config's init_sha256 is 00ff"), std::string::npos) << r.err;
  EXPECT_EQ(test::count_lines(r.err), 1) << r.err;
}

}  // namespace
}  // namespace multihead
