// SPDX-License-Identifier: Apache-2.0
// A run directory that no longer matches its checkpoint is refused: a
// config.json edited in a key that keeps every weight's shape (nhead,
// norm_first), a results.json that is garbage or names another number of
// classes, a checkpoint whose header was edited, data whose classes are no
// longer the model's. A run without results.json
// still predicts, and says which names it gave the classes.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "multihead/io/atomic_file.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::CliRun;
using test::run;

class RunMismatch : public test::Cli {
 protected:
  void SetUp() override {
    Cli::SetUp();
    test::write_sentiment_csv(dir / "tiny.csv", 8);
    std::ofstream(dir / "items.txt") << "good great fine\nbad awful poor\n";
    out = dir / "run";
    job =
        "train --source csv --tokenizer word --vocab-size 64 --epochs 1 --max-len 8 --d-model 16 --num-heads 2 "
        "--num-layers 1 --threads 1 --quiet --data " +
        (dir / "tiny.csv").string();
    CliRun r = run(job + " --out " + out.string());
    ASSERT_EQ(r.code, 0) << r.err;
    config = read_file((out / "config.json").string());
    results = read_file((out / "results.json").string());
    predict = "predict --run " + out.string() + " --threads 1 --input " + (dir / "items.txt").string();
    CliRun p = run(predict);
    ASSERT_EQ(p.code, 0) << p.err;
    ASSERT_TRUE(p.err.empty()) << p.err;
    good_predictions = p.out;
  }
  // config.json with one key of the model section set to `value`.
  void edit_model(const std::string& key, const json& value) {
    json c = json::parse(config);
    c["model"][key] = value;
    write_file_atomic((out / "config.json").string(), c.dump(2));
  }
  // predict and eval both refuse with exactly `error`, printing nothing.
  void expect_refused(const std::string& error) {
    for (const std::string& args : {predict, "eval --run " + out.string() + " --threads 1"}) {
      CliRun r = run(args);
      EXPECT_EQ(r.code, 2) << args;
      EXPECT_EQ(r.err, "multihead: error: " + error + "\n") << args;
      EXPECT_TRUE(r.out.empty()) << args;
    }
  }

  fs::path out;
  std::string job, config, results, predict, good_predictions;
};

TEST_F(RunMismatch, AConfigThatKeepsTheShapesButNotTheModelIsRefused) {
  const std::string ckpt = (out / "checkpoints" / "last.safetensors").string();
  const std::string cfg = (out / "config.json").string();
  edit_model("nhead", 1);
  expect_refused(cfg + ": model.nhead is 1, but the checkpoint " + ckpt +
                 " was trained with 2: the config no longer describes its weights (restore the key, or train again)");
  const bool norm_first = json::parse(config)["model"]["norm_first"].get<bool>();
  write_file_atomic(cfg, config);
  edit_model("norm_first", !norm_first);
  expect_refused(cfg + ": model.norm_first is " + (norm_first ? "false" : "true") + ", but the checkpoint " + ckpt +
                 " was trained with " + (norm_first ? "true" : "false") +
                 ": the config no longer describes its weights (restore the key, or train again)");
  // A resume refuses it too (its config differs from the run's), and leaves the run as it was.
  const std::string before = read_file(ckpt);
  CliRun r = run(job + " --resume --out " + out.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("norm_first"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(ckpt), before);
  // Restored, the run predicts as before.
  write_file_atomic(cfg, config);
  CliRun p = run(predict);
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, good_predictions);
}

// eval re-reads the data for its test split: data that has gained a class
// since the run is refused by name, not evaluated against the wrong head.
TEST_F(RunMismatch, DataWithOtherClassesThanTheModelIsRefusedByEval) {
  const fs::path data = dir / "tiny.csv";
  std::ofstream(data, std::ios::app) << "so so meh,neutral\nokay so so,neutral\n";
  CliRun r = run("eval --run " + out.string() + " --threads 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "multihead: error: " + data.string() + " now has 3 classes; the run's model was trained on 2\n");
  EXPECT_TRUE(r.out.empty());
  // predict reads no data, and answers as before.
  CliRun p = run(predict);
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, good_predictions);
}

TEST_F(RunMismatch, AnUnreadableOrInconsistentResultsFileIsAnError) {
  const std::string path = (out / "labels.json").string();
  write_file_atomic(path, "garbage");
  CliRun garbage = run(predict);
  EXPECT_EQ(garbage.code, 2);
  EXPECT_EQ(garbage.err.rfind("multihead: error: " + path + ": invalid JSON (", 0), 0u) << garbage.err;
  EXPECT_TRUE(garbage.out.empty());
  json r = json::parse(read_file((out / "results.json").string()));
  r["labels"] = {"a", "b", "c"};
  write_file_atomic(path, r.dump());
  CliRun three = run(predict);
  EXPECT_EQ(three.code, 2);
  EXPECT_EQ(three.err, "multihead: error: " + path + ": lists 3 class names, but the model has 2 classes\n");
  r.erase("labels");
  write_file_atomic(path, r.dump());
  CliRun none = run(predict);
  EXPECT_EQ(none.code, 2);
  EXPECT_EQ(none.err,
            "multihead: error: " + path + ": lacks the list of class names (\"labels\") that the run recorded\n");
}

TEST_F(RunMismatch, ARunWithoutResultsNamesItsClassesByNumberAndSaysSo) {
  // A run made before labels.json existed names them in results.json.
  fs::remove(out / "labels.json");
  CliRun older = run(predict);
  EXPECT_EQ(older.code, 0) << older.err;
  EXPECT_TRUE(older.err.empty()) << older.err;
  EXPECT_TRUE(older.out.find("pos\t") != std::string::npos || older.out.find("neg\t") != std::string::npos)
      << older.out;
  // One made before results.json did, nowhere.
  fs::remove(out / "results.json");
  CliRun p = run(predict);
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.err, "multihead: warning: " + out.string() +
                       " has no labels.json: the classes are named by their "
                       "numbers, 0 to 1\n");
  EXPECT_EQ(test::count_lines(p.out), 2);
  EXPECT_EQ(p.out.find("pos"), std::string::npos) << p.out;
}

// The checksum covers the header: an edited step (the same length, so that
// every offset still fits) is refused as surely as an edited weight.
TEST_F(RunMismatch, AnEditedCheckpointHeaderIsRefused) {
  const std::string ckpt = (out / "checkpoints" / "last.safetensors").string();
  std::string bytes = read_file(ckpt);
  const std::size_t at = bytes.find("\"step\":\"");
  ASSERT_NE(at, std::string::npos);
  char& digit = bytes[at + 8];
  digit = digit == '1' ? '2' : '1';
  write_file_atomic(ckpt, bytes);
  CliRun r = run("eval --run " + out.string() + " --threads 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(": the header and data do not match their checksum ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("): the file is corrupt or was edited"), std::string::npos) << r.err;
  CliRun resumed = run(job + " --resume --out " + out.string());
  EXPECT_EQ(resumed.code, 2);
  EXPECT_NE(resumed.err.find(": the header and data do not match their checksum ("), std::string::npos) << resumed.err;
}

}  // namespace
}  // namespace multihead
