// SPDX-License-Identifier: Apache-2.0
// Continuing a finished run past its end: `train --resume --steps N` (or
// --epochs) takes the run's own settings from its config.json, appends to its
// metrics and redoes its results; with a rate that does not depend on the
// run's length it is, bit for bit, a single run of the whole length; cosine
// and linear decay restart from the rate the run stopped at.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/safetensors.h"

namespace multihead {
namespace {

using nlohmann::json;

// The per-step records of a run's metrics.jsonl (those with a "step").
std::vector<json> step_records(const std::string& run) {
  std::vector<json> steps;
  std::istringstream lines(read_file(run + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const json r = json::parse(line);
    if (r.contains("step") && r.contains("lr")) steps.push_back(r);
  }
  return steps;
}

// Every model tensor of the two runs' checkpoints has the same bits.
void expect_same_weights(const std::string& a, const std::string& b) {
  const TensorMap ta = SafetensorsFile::read(a + "/checkpoints/last.safetensors").all_tensors();
  const TensorMap tb = SafetensorsFile::read(b + "/checkpoints/last.safetensors").all_tensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (const auto& [name, t] : ta) {
    const Tensor& u = tb.at(name);
    ASSERT_EQ(t.nbytes(), u.nbytes()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), u.raw(), t.nbytes()), 0) << name << " differs";
  }
}

class ContinueRun : public test::Cli {
 protected:
  std::string path(const char* name) const { return (dir / name).string(); }
  static constexpr const char* kTiny = " --d-model 16 --num-heads 2 --num-layers 1 --batch 4 --threads 1 --quiet";
};

TEST_F(ContinueRun, AConstantRateContinuedIsASingleRunOfTheWholeLength) {
  const std::string reverse = std::string(" --preset reverse --schedule constant --warmup-steps 2") + kTiny;
  ASSERT_EQ(test::run("train --steps 6 --out " + path("continued") + reverse).code, 0);
  const std::string results_before = read_file(path("continued") + "/results.json");
  // No preset or config: the run's own settings, with more steps.
  const test::CliRun more = test::run("train --resume --steps 10 --threads 1 --quiet --out " + path("continued"));
  ASSERT_EQ(more.code, 0) << more.err;
  EXPECT_NE(more.out.find("training: 10 steps"), std::string::npos) << more.out;
  ASSERT_EQ(test::run("train --steps 10 --out " + path("single") + reverse).code, 0);
  expect_same_weights(path("continued"), path("single"));
  const std::vector<json> a = step_records(path("continued")), b = step_records(path("single"));
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 10u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
    EXPECT_EQ(a[i]["lr"], b[i]["lr"]) << "step " << i + 1;
  }
  const json ra = json::parse(read_file(path("continued") + "/results.json"));
  EXPECT_EQ(ra["by_length"], json::parse(read_file(path("single") + "/results.json"))["by_length"]);
  EXPECT_EQ(ra["steps"], 10);
  EXPECT_NE(ra["by_length"], json::parse(results_before)["by_length"]);  // redone for the longer run
  const json config = json::parse(read_file(path("continued") + "/config.json"));
  EXPECT_EQ(config["train"]["steps"], 10);
  EXPECT_EQ(config["train"]["restart_step"], 6);
}

TEST_F(ContinueRun, ADecayRestartsFromTheRateTheRunStoppedAt) {
  const std::string cosine = std::string(" --preset reverse --schedule cosine --warmup-steps 0 --lr 0.01") + kTiny;
  ASSERT_EQ(test::run("train --steps 6 --out " + path("run") + cosine).code, 0);
  const double stopped_at = step_records(path("run")).back()["lr"].get<double>();  // step 6's rate
  EXPECT_NEAR(stopped_at, 0.01 * 0.5 * (1 + std::cos(std::numbers::pi * 5 / 6)), 1e-12);
  const test::CliRun more = test::run("train --resume --steps 10 --threads 1 --quiet --out " + path("run"));
  ASSERT_EQ(more.code, 0) << more.err;
  const std::vector<json> steps = step_records(path("run"));
  ASSERT_EQ(steps.size(), 10u);
  for (int k = 0; k < 4; ++k)  // steps 7..10 decay from step 6's rate over the four new steps
    EXPECT_NEAR(steps[static_cast<std::size_t>(6 + k)]["lr"].get<double>(),
                stopped_at * 0.5 * (1 + std::cos(std::numbers::pi * k / 4)), 1e-12)
        << "step " << 7 + k;
  const json config = json::parse(read_file(path("run") + "/config.json"));
  EXPECT_EQ(config["train"]["restart_step"], 6);
  EXPECT_DOUBLE_EQ(config["train"]["restart_lr"].get<double>(), stopped_at);
  // Resuming again with the same length keeps the restart; fewer steps than done is refused.
  ASSERT_EQ(test::run("train --resume --threads 1 --quiet --out " + path("run")).code, 0);
  EXPECT_EQ(json::parse(read_file(path("run") + "/config.json"))["train"]["restart_step"], 6);
  const test::CliRun fewer = test::run("train --resume --steps 8 --threads 1 --quiet --out " + path("run"));
  EXPECT_EQ(fewer.code, 2);
  EXPECT_NE(fewer.err.find("it has trained 10 steps, and this run would end after 8"), std::string::npos) << fewer.err;
  EXPECT_EQ(step_records(path("run")).size(), 10u);  // nothing lost
  // Another setting than the length is still refused.
  const test::CliRun other = test::run("train --resume --steps 12 --lr 0.02 --threads 1 --quiet --out " + path("run"));
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("/train/lr"), std::string::npos) << other.err;
}

TEST_F(ContinueRun, AClassifierContinuesForMoreEpochs) {
  test::write_sentiment_csv(dir / "reviews.csv", 24);
  const std::string job = " --source csv --data " + path("reviews.csv") +
                          " --tokenizer word --vocab-size 32 --max-len 8 --schedule constant --warmup-ratio 0" + kTiny;
  ASSERT_EQ(test::run("train --epochs 1 --out " + path("continued") + job).code, 0);
  const test::CliRun more = test::run("train --resume --epochs 2 --threads 1 --quiet --out " + path("continued"));
  ASSERT_EQ(more.code, 0) << more.err;
  ASSERT_EQ(test::run("train --epochs 2 --out " + path("single") + job).code, 0);
  expect_same_weights(path("continued"), path("single"));
  EXPECT_EQ(step_records(path("continued")).size(), step_records(path("single")).size());
  const json a = json::parse(read_file(path("continued") + "/results.json"));
  const json b = json::parse(read_file(path("single") + "/results.json"));
  EXPECT_EQ(a["test_accuracy"], b["test_accuracy"]);
  EXPECT_EQ(a["steps"], b["steps"]);
}

// --steps on a finished epoch job only caps its epochs: more of it trains
// nothing, and is refused in one line that names --epochs, the run left as
// it was. A continued run reports the whole run's steps and time, and this
// invocation's own.
TEST_F(ContinueRun, MoreStepsThanAnEpochJobsEpochsIsRefusedAndTimesAddUp) {
  test::write_sentiment_csv(dir / "reviews.csv", 24);
  const std::string job = " --data " + path("reviews.csv") + " --tokenizer word --vocab-size 32 --max-len 8" + kTiny;
  ASSERT_EQ(test::run("train --epochs 1 --out " + path("run") + job).code, 0);
  const std::string report = read_file(path("run") + "/report.md"), results = read_file(path("run") + "/results.json");
  const double first_seconds = json::parse(results)["train_seconds"].get<double>();
  const test::CliRun capped = test::run("train --resume --steps 60 --threads 1 --quiet --out " + path("run"));
  EXPECT_EQ(capped.code, 2);
  EXPECT_EQ(capped.err, "multihead: error: " + path("run") +
                            " has trained all 9 steps its settings give: nothing to train; continue it with more "
                            "--epochs (it has 1; --steps only caps them)\n");
  EXPECT_EQ(read_file(path("run") + "/report.md"), report);
  EXPECT_EQ(read_file(path("run") + "/results.json"), results);
  const test::CliRun more = test::run("train --resume --epochs 2 --threads 1 --out " + path("run"));
  ASSERT_EQ(more.code, 0) << more.err;
  EXPECT_NE(more.out.find("training: 18 steps in "), std::string::npos) << more.out;
  EXPECT_NE(more.out.find("(steps 10-18 in this run: "), std::string::npos) << more.out;
  const double total = json::parse(read_file(path("run") + "/results.json"))["train_seconds"].get<double>();
  EXPECT_GT(total, first_seconds);
  EXPECT_NE(read_file(path("run") + "/report.md").find("s in all, steps 10-18 in this run: "), std::string::npos);
}

}  // namespace
}  // namespace multihead
