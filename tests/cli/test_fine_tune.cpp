// SPDX-License-Identifier: Apache-2.0
// Fine-tuning through the CLI: `train --init-from RUN [--init-skip REGEX]`
// starts from another run's weights and takes its tokenizer, on data with
// other labels (a new head, skipped); the run records where it started, and
// what does not fit is refused in one line, leaving nothing behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

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
    for (int r = 0; r < 20; ++r) f << "good great fine,happy\nbad awful poor,sad\ngood bad fine,mixed\n";
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
  EXPECT_EQ(read_file(path("tuned") + "/tokenizer/tokenizer.json"),
            read_file(path("source") + "/tokenizer/tokenizer.json"));
  const std::string report = read_file(path("tuned") + "/report.md");
  EXPECT_NE(report.find("| started from | `" + path("source") + "` (SHA-256 `" +
                        config["train"]["init_sha256"].get<std::string>() +
                        "`); parameters matching `^classifier\\.` "
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

// A run's model settings come with its weights, as its tokenizer does: a
// fine-tune names neither (it used to fail on the first tensor's shape and
// suggest --init-skip). A state_dict carries no tokenizer: refused, naming
// --tokenizer-from (a tokenizer trained afresh would number tokens anew).
TEST_F(FineTune, ARunsModelSettingsComeWithItAndAStateDictNeedsATokenizer) {
  ASSERT_EQ(test::run("train --data " + path("reviews.csv") +
                      " --tokenizer word --vocab-size 32 --max-len 8 --epochs 1 --out " + path("source") + kTiny)
                .code,
            0);
  const test::CliRun tuned =
      test::run("train --data " + path("moods.csv") + " --init-from " + path("source") +
                " --init-skip '^classifier\\.' --epochs 1 --threads 1 --quiet --out " + path("tuned"));
  ASSERT_EQ(tuned.code, 0) << tuned.err;
  const json model = json::parse(read_file(path("tuned") + "/config.json"))["model"];
  const json source = json::parse(read_file(path("source") + "/config.json"))["model"];
  for (const char* key : {"d_model", "nhead", "num_layers", "dim_feedforward", "positions", "vocab_size"})
    EXPECT_EQ(model[key], source[key]) << key;
  EXPECT_EQ(model["num_classes"], 3);  // the data's
  const std::string weights = path("source") + "/checkpoints/last.safetensors";
  const test::CliRun bare = test::run("train --data " + path("reviews.csv") + " --init-from " + weights +
                                      " --max-len 8 --epochs 1 --out " + path("bare") + kTiny);
  EXPECT_EQ(bare.code, 2);
  EXPECT_EQ(bare.err, "multihead: error: " + weights +
                          " is a state_dict, which carries no tokenizer; give --tokenizer-from RUN, the run whose "
                          "tokenizer its weights learned with (tokenizer.from)\n");
  EXPECT_FALSE(std::filesystem::exists(path("bare")));
  const test::CliRun named =
      test::run("train --data " + path("reviews.csv") + " --init-from " + weights + " --tokenizer-from " +
                path("source") + " --max-len 8 --epochs 1 --out " + path("named") + kTiny);
  EXPECT_EQ(named.code, 0) << named.err;
}

TEST_F(FineTune, APinnedDigestThatDoesNotMatchIsRefused) {
  ASSERT_EQ(test::run("train --source csv --data " + path("reviews.csv") +
                      " --tokenizer word --vocab-size 32 --max-len 8 --epochs 1 --out " + path("source") + kTiny)
                .code,
            0);
  const test::CliRun r =
      test::run("train --source csv --data " + path("reviews.csv") + " --init-from " + path("source") +
                " --set train.init_sha256=00ff --max-len 8 --epochs 1 --out " + path("pinned") + kTiny);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("the config's init_sha256 is 00ff"), std::string::npos) << r.err;
  EXPECT_EQ(test::count_lines(r.err), 1) << r.err;
}

// Every file under `root` with its bytes: what a refused command must leave as it was.
std::map<std::string, std::string> snapshot(const std::filesystem::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root))
    files[e.path().string()] = e.is_regular_file() ? read_file(e.path().string()) : std::string("<dir>");
  return files;
}

// An output directory that is, contains or lies inside anything the command
// reads is refused before anything is created or removed: `train --init-from
// runs/X --out runs/X --overwrite` cleared the source run, then failed.
TEST_F(FineTune, AnOutputOverItsOwnInputsIsRefusedAndNothingIsLost) {
  ASSERT_EQ(test::run("train --source csv --data " + path("reviews.csv") +
                      " --tokenizer word --vocab-size 32 --max-len 8 --epochs 1 --out " + path("source") + kTiny)
                .code,
            0);
  std::filesystem::copy_file(path("moods.csv"), path("source") + "/moods.csv");
  std::ofstream(path("source") + "/job.json")
      << R"({"data": {"source": "csv", "path": ")" + path("moods.csv") + R"("}})";
  std::filesystem::create_directory_symlink(path("source"), path("alias"));
  const auto before = snapshot(path("source"));
  const std::string tune = "train --source csv --data " + path("moods.csv") +
                           " --max-len 8 --epochs 1 --init-skip "
                           "'^classifier\\.'" +
                           kTiny;
  const std::string weights = "the weights it starts from (train.init_from)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {tune + " --init-from " + path("source") + " --out " + path("source") + " --overwrite",
       "--out " + path("source") + " is " + weights + " (" + path("source") + ")"},
      {tune + " --init-from " + path("source") + " --out " + path("source") + "/ --resume",
       "--out " + path("source") + "/ is " + weights + " (" + path("source") + ")"},
      {tune + " --init-from " + path("source") + " --out " + path("alias") + " --overwrite",
       "--out " + path("alias") + " is " + weights + " (" + path("source") + ")"},
      {tune + " --init-from " + path("alias") + "/../source --out " + path("source") + "/tuned",
       "--out " + path("source") + "/tuned lies inside " + weights + " (" + path("alias") + "/../source)"},
      {tune + " --init-from " + path("source") + "/checkpoints/last.safetensors --out " + path("source") +
           " --overwrite",
       "--out " + path("source") + " contains " + weights + " (" + path("source") + "/checkpoints/last.safetensors)"},
      {"train --source csv --data " + path("source") + "/moods.csv --out " + path("source") + " --overwrite" + kTiny,
       "--out " + path("source") + " contains the data (data.path) (" + path("source") + "/moods.csv)"},
      {"train --config " + path("source") + "/job.json --out " + path("source") + " --overwrite" + kTiny,
       "--out " + path("source") + " contains the config (--config) (" + path("source") + "/job.json)"},
      {"train --source csv --data " + path("moods.csv") + " --tokenizer-from " + path("source") + " --out " +
           path("alias") + " --overwrite" + kTiny,
       "--out " + path("alias") + " is the run whose tokenizer it takes (tokenizer.from) (" + path("source") + ")"},
      {"eval --run " + path("source") + " --out " + path("source"),
       "--out " + path("source") + " is the run (--run) (" + path("source") + ")"},
      {"eval --run " + path("source") + " --out " + dir.string(),
       "--out " + dir.string() + " contains the run (--run) (" + path("source") + ")"},
  };
  for (const auto& [args, why] : cases) {
    const test::CliRun r = test::run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err, "multihead: error: " + why +
                         ": an output never goes over what the command reads; choose another "
                         "--out\n")
        << args;
    EXPECT_EQ(snapshot(path("source")), before) << args;
  }
  // A page written into the run goes beside its files, never over one of them.
  for (const char* file : {"config.json", "plots/explorer.html", "checkpoints/last.safetensors"}) {
    const std::string page = path("source") + "/" + file;
    const test::CliRun r = test::run("inspect --run " + path("source") + " --text good --html " + page);
    EXPECT_EQ(r.code, 2) << file;
    EXPECT_EQ(r.err, "multihead: error: --html " + page + " is one of the files of the run " + path("source") +
                         ": an output never goes over what the command reads; choose another --html\n");
    EXPECT_EQ(snapshot(path("source")), before) << file;
  }
  EXPECT_FALSE(std::filesystem::exists(path("source") + "/tuned"));
  // Beside its inputs, or an evaluation inside its run: as before.
  EXPECT_EQ(test::run(tune + " --init-from " + path("alias") + " --out " + path("tuned")).code, 0);
  EXPECT_EQ(test::run("eval --run " + path("source") + " --out " + path("source") + "/eval").code, 0);
  EXPECT_TRUE(std::filesystem::exists(path("source") + "/eval/report.md"));
  EXPECT_EQ(test::run("inspect --run " + path("source") + " --text good --html " + path("source") + "/page.html").code,
            0);
}

}  // namespace
}  // namespace multihead
