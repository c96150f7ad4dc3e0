// SPDX-License-Identifier: Apache-2.0
// fit, the one training loop: which examples each step and micro-batch get,
// when it validates and checkpoints, what it records, and resuming.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "multihead/data/batching.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/safetensors.h"
#include "multihead/train/fit.h"
#include "test_util.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One parameter w; an example x has loss (w - x)^2 / 2. The task records the
// micro-batches it trained on and when it validated.
class ToyTask final : public TrainingTask {
 public:
  explicit ToyTask(ParamStore& store) : store_(store), w_(store.add("w", {1})) {}

  std::vector<std::int64_t> step_examples(std::int64_t step) override {
    steps_asked.push_back(step);
    return {step, step + 1, step + 2, step + 3};
  }

  MicroBatchLoss micro_step(std::span<const std::int64_t> examples, const ForwardContext&, double grad_scale) override {
    if (fail_at_micro_batch >= 0 && static_cast<std::int64_t>(micro_batches.size()) == fail_at_micro_batch)
      throw std::runtime_error("killed");
    micro_batches.emplace_back(examples.begin(), examples.end());
    const float w = *store_.data(w_);
    double loss = 0, grad = 0;
    for (std::int64_t x : examples) {
      const double d = w - static_cast<double>(x) / 10;
      loss += 0.5 * d * d;
      grad += d;
    }
    const double n = static_cast<double>(examples.size());
    *store_.grad(w_) += static_cast<float>(grad_scale * grad / n);
    return {loss / n, static_cast<std::int64_t>(examples.size())};
  }

  Validation validate() override {
    if (stop_in_validation) {  // as a Ctrl-C while validating, whose stop points (null inside fit) leave it to fit
      stop->request(SIGINT);
      stop_point(nullptr);
    }
    validated_after.push_back(static_cast<std::int64_t>(micro_batches.size()));
    return {1.0 / static_cast<double>(validated_after.size()), 0.5, 3};
  }

  std::vector<std::vector<std::int64_t>> micro_batches;
  std::vector<std::int64_t> steps_asked, validated_after;
  std::int64_t fail_at_micro_batch = -1;
  bool stop_in_validation = false;
  StopRequest* stop = nullptr;

 private:
  ParamStore& store_;
  ParamStore::Handle w_;
};

TrainConfig toy_train(std::int64_t steps, std::int64_t batch, std::int64_t accumulation) {
  TrainConfig t;
  t.steps = steps;
  t.schedule.total_steps = steps;
  t.schedule.base_lr = 0.1;
  t.batch = batch;
  t.grad_accumulation = accumulation;
  t.seed = 3;
  return t;
}

std::vector<json> records(const std::string& dir) {
  std::vector<json> out;
  const std::string text = read_file((fs::path(dir) / "metrics.jsonl").string());
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    out.push_back(json::parse(text.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

std::map<std::string, std::string> checkpoint_meta(const std::string& dir) {
  return SafetensorsFile::read(last_checkpoint_path(dir)).metadata();
}

class Fit : public ::testing::Test {
 protected:
  void SetUp() override { dir = fs::temp_directory_path() / ("multihead_fit_" + std::to_string(::getpid())); }
  void TearDown() override { fs::remove_all(dir); }
  std::string run_dir(const std::string& name) const { return (fs::path(dir) / name).string(); }
  fs::path dir;
};

TEST_F(Fit, EpochsCoverEveryExampleOnceInContiguousMicroBatchesAndValidateAfterEach) {
  ParamStore store;
  ToyTask task(store);
  store.finalize();
  const TrainConfig train = toy_train(6, 4, 2);  // 10 examples: 3 steps an epoch, 2 epochs
  FitPlan plan;
  for (std::int64_t i = 0; i < 10; ++i) plan.epoch_examples.push_back(i);
  RunDir run(run_dir("epochs"));
  Progress quiet(0, stderr, true);
  const FitResult r = fit(task, store, train, plan, DescribedConfig{json{{"toy", 1}}, {}}, run, quiet);

  EXPECT_TRUE(task.steps_asked.empty());
  ASSERT_EQ(task.micro_batches.size(), 12u);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::multiset<std::int64_t> seen;
    for (int m = 6 * epoch; m < 6 * epoch + 6; ++m)
      seen.insert(task.micro_batches[m].begin(), task.micro_batches[m].end());
    EXPECT_EQ(seen, (std::multiset<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})) << "epoch " << epoch;
    // Batches of 4, 4 and 2, each split into two halves.
    for (int s = 0; s < 3; ++s) {
      const std::size_t half = s < 2 ? 2 : 1;
      EXPECT_EQ(task.micro_batches[6 * epoch + 2 * s].size(), half);
      EXPECT_EQ(task.micro_batches[6 * epoch + 2 * s + 1].size(), half);
    }
  }
  EXPECT_EQ(task.validated_after, (std::vector<std::int64_t>{6, 12}));
  EXPECT_EQ(r.steps, 6);
  EXPECT_EQ(r.epochs, 2);
  EXPECT_EQ(r.first_step, 0);
  EXPECT_EQ(r.curves.step.size(), 6u);
  EXPECT_EQ(r.curves.eval_step, (std::vector<double>{3, 6}));
  ASSERT_TRUE(r.validation && r.validation->accuracy);
  EXPECT_DOUBLE_EQ(r.validation->loss, 0.5);
  EXPECT_GT(r.items_per_s, 0);

  const std::vector<json> recs = records(run_dir("epochs"));
  ASSERT_EQ(recs.size(), 8u);  // 3 steps and a validation, twice
  EXPECT_EQ(recs[3]["validation_accuracy"], 0.5);
  EXPECT_EQ(recs[3]["epoch"], 0);
  EXPECT_EQ(recs[4]["step"], 4);
  EXPECT_EQ(recs[4]["epoch"], 1);
  EXPECT_EQ(checkpoint_meta(run_dir("epochs")).at("data.epoch"), "2");
  EXPECT_EQ(checkpoint_meta(run_dir("epochs")).at("metrics.records"), "8");
}

// With lengths, each epoch trains on length_grouped_batches' batches, in order.
TEST_F(Fit, EpochsWithLengthsTrainOnLengthGroupedBatches) {
  ParamStore store;
  ToyTask task(store);
  store.finalize();
  const TrainConfig train = toy_train(6, 4, 1);
  FitPlan plan;
  for (std::int64_t i = 0; i < 10; ++i) {
    plan.epoch_examples.push_back(i);
    plan.example_lengths.push_back((7 * i) % 5);
  }
  RunDir run(run_dir("lengths"));
  Progress quiet(0, stderr, true);
  fit(task, store, train, plan, DescribedConfig{json{{"toy", 1}}, {}}, run, quiet);
  std::vector<std::vector<std::int64_t>> expected;
  for (std::int64_t epoch = 0; epoch < 2; ++epoch)
    for (auto& b : length_grouped_batches(plan.epoch_examples, plan.example_lengths, 4, train.seed, epoch))
      expected.push_back(b);
  EXPECT_EQ(task.micro_batches, expected);
}

TEST_F(Fit, StepsValidateEveryNStepsAndAfterTheLast) {
  ParamStore store;
  ToyTask task(store);
  store.finalize();
  FitPlan plan;
  plan.eval_every = 3;
  plan.throughput_key = "items_per_s";
  RunDir run(run_dir("steps"));
  Progress quiet(0, stderr, true);
  const FitResult r = fit(task, store, toy_train(7, 4, 1), plan, DescribedConfig{json{{"toy", 1}}, {}}, run, quiet);

  EXPECT_EQ(task.steps_asked, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(task.validated_after, (std::vector<std::int64_t>{3, 6, 7}));
  EXPECT_EQ(task.micro_batches[5], (std::vector<std::int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(r.epochs, 0);
  std::int64_t validations = 0;
  for (const json& rec : records(run_dir("steps"))) {
    EXPECT_FALSE(rec.contains("epoch"));
    if (rec.contains("validation_loss")) ++validations;
    else EXPECT_TRUE(rec.contains("items_per_s"));
  }
  EXPECT_EQ(validations, 3);
  EXPECT_EQ(checkpoint_meta(run_dir("steps")).at("data.step"), "7");
}

TEST_F(Fit, WithoutValidationTheLastStepIsCheckpointed) {
  ParamStore store;
  ToyTask task(store);
  store.finalize();
  RunDir run(run_dir("plain"));
  Progress quiet(0, stderr, true);
  const FitResult r =
      fit(task, store, toy_train(5, 4, 1), FitPlan{}, DescribedConfig{json{{"toy", 1}}, {}}, run, quiet);
  EXPECT_TRUE(task.validated_after.empty());
  EXPECT_FALSE(r.validation);
  const auto meta = checkpoint_meta(run_dir("plain"));
  EXPECT_EQ(meta.at("step"), "5");
  EXPECT_EQ(meta.count("data.step"), 0u);
}

// The toy task's model, trained by fit in a run directory.
struct ToyRun {
  ParamStore store;
  ToyTask task{store};
  StopRequest stop;
  ToyRun() {
    store.finalize();
    task.stop = &stop;
  }
  FitResult fit_in(const std::string& dir, const TrainConfig& train, const FitPlan& plan,
                   RunMode mode = RunMode::kNew) {
    RunDir run(dir, mode);
    Progress quiet(0, stderr, true);
    return fit(task, store, train, plan, DescribedConfig{json{{"toy", 1}}, {}}, run, quiet, &stop);
  }
};

FitPlan ten_examples() {
  FitPlan plan;
  for (std::int64_t i = 0; i < 10; ++i) plan.epoch_examples.push_back(i);
  return plan;
}

// Killed in its second epoch and resumed, a run trains on the examples the
// uninterrupted run would have, from its last checkpoint, and ends with its
// weights bit for bit; the first epoch's validation is read back.
TEST_F(Fit, AResumedRunGoesOnFromItsCheckpointAsIfNeverStopped) {
  const FitPlan plan = ten_examples();
  TrainConfig train = toy_train(6, 4, 1);
  train.checkpoint_every = 2;
  ToyRun whole;
  whole.fit_in(run_dir("whole"), train, plan);
  {
    ToyRun killed;
    killed.task.fail_at_micro_batch = 5;  // in the sixth step; the last checkpoint is the fourth's
    EXPECT_THROW(killed.fit_in(run_dir("resumed"), train, plan), std::runtime_error);
  }
  ToyRun resumed;
  const FitResult r = resumed.fit_in(run_dir("resumed"), train, plan, RunMode::kResume);
  EXPECT_EQ(r.first_step, 4);
  ASSERT_EQ(resumed.task.micro_batches.size(), 2u);
  EXPECT_EQ(resumed.task.micro_batches[0], whole.task.micro_batches[4]);
  EXPECT_EQ(resumed.task.micro_batches[1], whole.task.micro_batches[5]);
  EXPECT_EQ(resumed.store.all_data()[0], whole.store.all_data()[0]);
  EXPECT_EQ(r.curves.step.size(), 6u);  // the records before the checkpoint are kept
  EXPECT_EQ(r.curves.eval_step, (std::vector<double>{3, 6}));
  EXPECT_EQ(records(run_dir("resumed")).size(), records(run_dir("whole")).size());
}

// train.keep_checkpoints: each checkpoint is also kept under its step, with
// the weights of that step (the killed run's last checkpoint is its fourth).
TEST_F(Fit, KeptCheckpointsHoldTheWeightsOfTheirSteps) {
  const FitPlan plan = ten_examples();
  TrainConfig train = toy_train(6, 4, 1);
  train.checkpoint_every = 2;
  train.keep_checkpoints = true;
  ToyRun kept;
  kept.fit_in(run_dir("kept"), train, plan);
  const std::vector<std::int64_t> steps = kept_checkpoint_steps(run_dir("kept"));
  for (std::int64_t s : {2, 4, 6}) EXPECT_NE(std::find(steps.begin(), steps.end(), s), steps.end()) << s;
  EXPECT_EQ(steps.back(), 6);
  train.keep_checkpoints = false;
  {
    ToyRun killed;
    killed.task.fail_at_micro_batch = 5;
    EXPECT_THROW(killed.fit_in(run_dir("killed"), train, plan), std::runtime_error);
  }
  EXPECT_TRUE(kept_checkpoint_steps(run_dir("killed")).empty());
  auto weights = [](const std::string& path) {
    ToyRun r;
    load_checkpoint_weights(r.store, path);
    const auto w = r.store.all_data();
    return std::vector<float>(w.begin(), w.end());
  };
  EXPECT_EQ(weights(kept_checkpoint_path(run_dir("kept"), 4)), weights(last_checkpoint_path(run_dir("killed"))));
  const auto end = kept.store.all_data();
  EXPECT_EQ(weights(kept_checkpoint_path(run_dir("kept"), 6)), std::vector<float>(end.begin(), end.end()));
  EXPECT_NE(weights(kept_checkpoint_path(run_dir("kept"), 2)), weights(kept_checkpoint_path(run_dir("kept"), 4)));
}

// A stop request (the CLI's SIGINT) ends fit after the step under way with
// a checkpoint there; resumed, the run ends as if never stopped.
TEST_F(Fit, AStopRequestCheckpointsTheStepAndTheRunResumesAsIfNeverStopped) {
  const FitPlan plan = ten_examples();
  const TrainConfig train = toy_train(6, 4, 1);
  ToyRun whole;
  whole.fit_in(run_dir("whole"), train, plan);
  {
    ToyRun stopped;
    stopped.stop.request(SIGINT);
    try {
      stopped.fit_in(run_dir("stopped"), train, plan);
      FAIL() << "fit did not stop";
    } catch (const Interrupted& e) {
      EXPECT_EQ(e.signal(), SIGINT);
      EXPECT_STREQ(e.what(),
                   "stopped by SIGINT after step 1; its checkpoint is saved: the same command with --resume goes on "
                   "from there");
    }
    EXPECT_EQ(stopped.task.micro_batches.size(), 1u);
    EXPECT_EQ(checkpoint_meta(run_dir("stopped")).at("step"), "1");
  }
  ToyRun resumed;
  const FitResult r = resumed.fit_in(run_dir("stopped"), train, plan, RunMode::kResume);
  EXPECT_EQ(r.first_step, 1);
  ASSERT_EQ(resumed.task.micro_batches.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(resumed.task.micro_batches[i], whole.task.micro_batches[i + 1]);
  EXPECT_EQ(resumed.store.all_data()[0], whole.store.all_data()[0]);
}

// Inside fit the stop points are given no stop, which leaves it to fit: it
// checkpoints the step it reached; the evaluation after fit is given the
// job's stop and ends at its next stop point, once.
TEST_F(Fit, StopPointsTakeAStopOnlyAfterTraining) {
  {
    ToyRun stopped;
    stopped.task.stop_in_validation = true;
    try {
      stopped.fit_in(run_dir("validating"), toy_train(6, 4, 1), ten_examples());
      FAIL() << "fit did not stop";
    } catch (const Interrupted& e) {
      EXPECT_STREQ(e.what(),
                   "stopped by SIGINT after step 3; its checkpoint is saved: the same command with --resume goes on "
                   "from there");
    }
    EXPECT_EQ(stopped.task.validated_after, (std::vector<std::int64_t>{3}));  // the validation ran to its end
    EXPECT_EQ(checkpoint_meta(run_dir("validating")).at("step"), "3");
  }
  ToyRun trained;
  trained.fit_in(run_dir("trained"), toy_train(2, 4, 1), ten_examples());
  EXPECT_NO_THROW(stop_point(&trained.stop));  // no stop asked for
  trained.stop.request(SIGTERM);
  EXPECT_NO_THROW(stop_point(nullptr));  // a stop point given no stop
  try {
    stop_point(&trained.stop);
    FAIL() << "the stop point did not stop";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    EXPECT_STREQ(e.what(),
                 "stopped by SIGTERM in the test after training; the trained model is saved: the same command with "
                 "--resume runs the test again");
  }
  EXPECT_NO_THROW(stop_point(&trained.stop));  // taken once
}

TEST(FitReport, SummaryNamesStepsEpochsTimeAndThroughput) {
  FitResult r;
  r.steps = 30, r.epochs = 2, r.seconds = 12.06, r.items_per_s = 3100.4, r.unit = "tok/s";
  EXPECT_EQ(r.summary(), "30 steps, 2 epochs, 12.1 s, 3100 tok/s");
  r.epochs = 0;
  EXPECT_EQ(r.summary(), "30 steps, 12.1 s, 3100 tok/s");
  EXPECT_EQ(skipped_steps_note(0), "");
  EXPECT_EQ(skipped_steps_note(2), " (2 skipped: the loss or gradient was not finite)");
}

}  // namespace
}  // namespace multihead
