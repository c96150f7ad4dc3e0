// SPDX-License-Identifier: Apache-2.0
// Training that is killed, stopped by a non-finite loss, or resumed: the
// multihead binary run as a user runs it.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/safetensors.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;
using test::CliRun;
using test::count_lines;
using test::run;

class CrashSafety : public test::Cli {};

// A small synthetic job: `steps` steps of the reverse task (about 2 ms each),
// a checkpoint every 7.
std::string job(int steps, int threads = 1, int checkpoint_every = 7) {
  return fmt::format(
      "train --preset reverse --steps {} --checkpoint-every {} --threads {} --quiet --d-model 32 --num-heads 2 "
      "--num-layers 1",
      steps, checkpoint_every, threads);
}

// Starts the binary with `args` (split on spaces), output to /dev/null,
// its standard error to `err` (/dev/null unless named).
pid_t spawn(const std::string& args, const std::string& err = "/dev/null") {
  std::vector<std::string> words = {test::cli_path()};
  std::size_t pos = 0;
  while (pos < args.size()) {
    const std::size_t end = std::min(args.find(' ', pos), args.size());
    if (end > pos) words.push_back(args.substr(pos, end - pos));
    pos = end + 1;
  }
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a test process that died
    std::freopen("/dev/null", "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Polls, every `poll`, until ready() or the process `pid` has ended (its
// status then in `status`).
template <typename Ready>
void wait_until(pid_t pid, int& status, Ready ready, std::chrono::microseconds poll = std::chrono::milliseconds(1)) {
  while (!ready() && ::waitpid(pid, &status, WNOHANG) == 0) std::this_thread::sleep_for(poll);
}

// Whether a run's metrics.jsonl holds at least n records.
bool has_records(const fs::path& run_dir, int n) {
  return fs::exists(run_dir / "metrics.jsonl") && count_lines(read_file((run_dir / "metrics.jsonl").string())) >= n;
}

// The per-step records (step and loss) of a run's metrics.jsonl.
std::vector<std::pair<std::int64_t, double>> step_losses(const fs::path& run_dir) {
  std::vector<std::pair<std::int64_t, double>> out;
  std::istringstream in(read_file((run_dir / "metrics.jsonl").string()));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.emplace_back(j["step"].get<std::int64_t>(), j["loss"].get<double>());
  }
  return out;
}

// Every tensor of two checkpoints equal to the last bit.
void expect_same_checkpoint(const fs::path& a_dir, const fs::path& b_dir) {
  SafetensorsFile a = SafetensorsFile::read((a_dir / "checkpoints/last.safetensors").string());
  SafetensorsFile b = SafetensorsFile::read((b_dir / "checkpoints/last.safetensors").string());
  ASSERT_EQ(a.entries().size(), b.entries().size());
  for (const auto& [name, entry] : a.entries()) {
    ASSERT_TRUE(b.contains(name)) << name;
    EXPECT_EQ(a.bytes(name), b.bytes(name)) << name;
  }
  EXPECT_EQ(a.metadata().at("step"), b.metadata().at("step"));
}

// Runs `args` into `out`, kills it as soon as its first checkpoint exists,
// and resumes it to the end.
void kill_at_first_checkpoint_and_resume(const std::string& args, const fs::path& out) {
  const pid_t pid = spawn(args + " --out " + out.string());
  ASSERT_GT(pid, 0);
  int status = 0;
  wait_until(
      pid, status, [&] { return fs::exists(out / "checkpoints/last.safetensors"); }, std::chrono::microseconds(200));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run finished before it could be killed";
  CliRun r = run(args + " --resume --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("resumed at step "), std::string::npos) << r.err;
}

TEST_F(CrashSafety, KilledAtRandomPointsAndResumedReachesTheSameWeightsBitForBit) {
  const fs::path straight = dir / "straight", killed = dir / "killed";
  CliRun r = run(job(1500) + " --out " + straight.string());
  ASSERT_EQ(r.code, 0) << r.err;

  // SIGKILL at a random moment (a fixed seed: the delays are reproducible,
  // where they land is not), then resume; after 30 kills it may finish.
  std::mt19937 rng(20261129);
  int kills = 0, runs = 0;
  for (;; ++runs) {
    ASSERT_LT(runs, 60) << "the killed run never finished";
    const pid_t pid = spawn(job(1500) + " --resume --out " + killed.string());
    ASSERT_GT(pid, 0);
    if (kills < 30) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 230));
      ::kill(pid, SIGKILL);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) {
      ++kills;
      continue;
    }
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
    break;
  }
  EXPECT_GE(kills, 8) << "too few kills landed before the run finished";

  // Weights, optimizer state and step: every tensor equal to the last bit.
  expect_same_checkpoint(straight, killed);
  EXPECT_EQ(SafetensorsFile::read((killed / "checkpoints/last.safetensors").string()).metadata().at("step"), "1500");
  // The log reads as one run: every step once, with the same losses.
  EXPECT_EQ(step_losses(straight), step_losses(killed));
  EXPECT_EQ(step_losses(killed).size(), 1500u);
  // And the same test accuracies (timings aside).
  auto accuracies = [](const fs::path& d) {
    return nlohmann::json::parse(read_file((d / "results.json").string()))["by_length"];
  };
  EXPECT_EQ(accuracies(straight), accuracies(killed));
  // No temporaries of interrupted writes remain.
  for (const auto& e : fs::recursive_directory_iterator(killed))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// SIGINT and SIGTERM finish the step under way, save a checkpoint at it and
// exit 128 + the signal; --resume then goes on from that step.
TEST_F(CrashSafety, SigintAndSigtermCheckpointTheStepReachedAndExit) {
  for (const int sig : {SIGINT, SIGTERM}) {
    const fs::path out = dir / fmt::format("stopped_{}", sig);
    const pid_t pid = spawn(job(1'000'000, 1, 0) + " --out " + out.string());
    ASSERT_GT(pid, 0);
    int status = 0;
    wait_until(pid, status, [&] { return has_records(out, 5); });
    ::kill(pid, sig);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "signal " << sig << " ended it with signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
    const SafetensorsFile ckpt = SafetensorsFile::read((out / "checkpoints/last.safetensors").string());
    const auto steps = step_losses(out);
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(ckpt.metadata().at("step"), std::to_string(steps.size()));
  }
}

// A stop after --overwrite advises the command that goes on: --resume in
// place of --overwrite (the two exclude each other; "the same command with
// --resume" was refused).
TEST_F(CrashSafety, AStopAfterOverwriteAdvisesResumeInItsPlace) {
  const fs::path out = dir / "replaced";
  ASSERT_EQ(run(job(2) + " --out " + out.string()).code, 0);  // a few lines of metrics
  const std::string err = (dir / "stop.err").string();
  const pid_t pid = spawn(job(1'000'000, 1, 0) + " --overwrite --out " + out.string(), err);
  ASSERT_GT(pid, 0);
  int status = 0;
  // The replacing run's metrics start afresh: wait for its tenth step.
  wait_until(pid, status, [&] { return has_records(out, 10); });
  ::kill(pid, SIGINT);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  EXPECT_NE(read_file(err).find("its checkpoint is saved: the same command with --resume in place of --overwrite goes "
                                "on from there"),
            std::string::npos)
      << read_file(err);
  // Followed: it resumes (to a shorter end, so that it finishes).
  const CliRun resumed = run(job(1'000'000, 1, 0) + " --resume --steps 40 --out " + out.string());
  EXPECT_EQ(resumed.code, 0) << resumed.err;
}

// A classifier stopped in training predicts its classes by name: they are
// written before the first step (labels.json), not with the results. Its
// training curves are drawn as it trains, to be watched.
TEST_F(CrashSafety, AStoppedClassifierPredictsClassesByName) {
  {
    std::ofstream f(dir / "moods.csv");
    f << "text,label\n";
    for (int r = 0; r < 40; ++r)
      f << (r % 2 ? "good great fine day" : "bad poor awful day") << "," << (r % 2 ? "happy" : "sad") << "\n";
    std::ofstream(dir / "items.txt") << "good day\nbad day\n";
  }
  const fs::path out = dir / "stopped";
  const pid_t pid = spawn("train --data " + (dir / "moods.csv").string() +
                          " --tokenizer word --vocab-size 64 --epochs 100000 --d-model 16 --num-heads 2 --num-layers 1 "
                          "--batch 4 --max-len 8 --threads 1 --checkpoint-every 1 --quiet --out " +
                          out.string());
  ASSERT_GT(pid, 0);
  int status = 0;
  wait_until(pid, status, [&] { return fs::exists(out / "checkpoints/last.safetensors"); });
  // The training curves are drawn while it trains (after each validation), long before the report.
  wait_until(pid, status, [&] { return fs::exists(out / "plots/memory.png"); });  // drawn last
  EXPECT_TRUE(fs::exists(out / "plots/learning_rate.png"));
  EXPECT_FALSE(fs::exists(out / "report.md"));
  EXPECT_EQ(read_file((out / "plots/loss.png").string()).substr(1, 3), "PNG");
  ::kill(pid, SIGINT);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_FALSE(fs::exists(out / "results.json"));
  const CliRun p = run("predict --run " + out.string() + " --threads 1 --input " + (dir / "items.txt").string());
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_TRUE(p.err.empty()) << p.err;
  std::istringstream lines(p.out);
  int answered = 0;
  for (std::string line; std::getline(lines, line); ++answered)
    EXPECT_TRUE(line.rfind("happy\t", 0) == 0 || line.rfind("sad\t", 0) == 0) << line;  // not "0" or "1"
  EXPECT_EQ(answered, 2);
}

TEST_F(CrashSafety, TextAndLanguageModelJobsResumeBitForBit) {
  {
    std::ofstream f(dir / "tiny.csv");
    f << "text,label\n";
    for (int r = 0; r < 40; ++r) f << (r % 2 ? "good great fine day" : "bad poor awful day") << "," << r % 2 << "\n";
    std::ofstream t(dir / "tiny.txt");
    for (int i = 0; i < 80; ++i) t << "the whale swam on. the sea was calm.\n";
  }
  const std::string text = "train --source csv --data " + (dir / "tiny.csv").string() +
                           " --tokenizer word --vocab-size 64 --epochs 60 --d-model 16 --num-heads 2 --num-layers 1 "
                           "--batch 4 --max-len 8 --threads 1 --checkpoint-every 3";
  const std::string lm = "train --preset moby-dick --data " + (dir / "tiny.txt").string() +
                         " --steps 400 --d-model 16 --num-heads 2 --num-layers 1 --batch 4 --max-len 16 --threads 1 "
                         "--checkpoint-every 3";
  for (const auto& [name, args] : {std::pair{"text", text}, std::pair{"lm", lm}}) {
    SCOPED_TRACE(name);
    const fs::path straight = dir / (std::string(name) + "_straight"), killed = dir / (std::string(name) + "_killed");
    CliRun r = run(args + " --quiet --out " + straight.string());
    ASSERT_EQ(r.code, 0) << r.err;
    kill_at_first_checkpoint_and_resume(args, killed);
    expect_same_checkpoint(straight, killed);
    EXPECT_EQ(step_losses(straight), step_losses(killed));
  }
}

TEST_F(CrashSafety, ResumingWithOtherSettingsIsRefused) {
  const fs::path out = dir / "run";
  CliRun first = run(job(100) + " --out " + out.string());
  ASSERT_EQ(first.code, 0) << first.err;
  const std::string before = read_file((out / "checkpoints/last.safetensors").string());
  CliRun other = run(job(100) + " --lr 0.01 --resume --out " + out.string());
  EXPECT_EQ(other.code, 2);
  EXPECT_EQ(other.err, "multihead: error: cannot resume " + out.string() +
                           ": its run had /train/lr = 0.001, this one has 0.01; resume with the same settings or "
                           "choose another --out\n");
  EXPECT_EQ(read_file((out / "checkpoints/last.safetensors").string()), before);
  // Threads and the checkpoint interval may change; a finished run resumes
  // to nothing more than its evaluation.
  CliRun same = run(job(100, 2, 50) + " --resume --out " + out.string());
  EXPECT_EQ(same.code, 0) << same.err;
  // A run written before a key existed resumes where the key's default is
  // what it had (train.allreduce: it had one rank), and not where the run
  // had another value: a key its config.json lacks counts as its default.
  const nlohmann::json recorded = nlohmann::json::parse(read_file((out / "config.json").string()));
  nlohmann::json config = recorded;
  for (const char* key : {"allreduce", "allreduce_overlap", "init_skip", "early_stopping"})
    ASSERT_EQ(config["train"].erase(key), 1u) << key;
  ASSERT_NE(config["model"]["d_model"], 128);  // not the default
  config["model"].erase("d_model");
  write_file_atomic((out / "config.json").string(), config.dump(2));
  CliRun refused = run(job(100, 2, 50) + " --resume --out " + out.string());
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.err.find("its run had /model/d_model = 128, this one has 32"), std::string::npos) << refused.err;
  config["model"]["d_model"] = recorded["model"]["d_model"];
  write_file_atomic((out / "config.json").string(), config.dump(2));
  CliRun older = run(job(100, 2, 50) + " --resume --out " + out.string());
  EXPECT_EQ(older.code, 0) << older.err;
  EXPECT_EQ(read_file((out / "checkpoints/last.safetensors").string()), before);
  EXPECT_EQ(step_losses(out).size(), 100u);
  // eval reproduces the accuracies the run printed.
  CliRun e = run("eval --run " + out.string() + " --threads 1");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out, first.out.substr(0, first.out.find("training: ")));
}

TEST_F(CrashSafety, ANonFiniteLossStopsTrainingOrIsSkippedAsAsked) {
  // A learning rate of 1e38 turns the weights to Inf after one SGD step.
  const std::string job =
      "train --preset reverse --steps 30 --threads 1 --d-model 32 --num-heads 2 --num-layers 1 --optimizer sgd "
      "--clip-grad-norm 0 --lr 1e38";
  const fs::path out = dir / "nan";
  CliRun stop = run(job + " --quiet --out " + out.string());
  EXPECT_EQ(stop.code, 2);
  EXPECT_EQ(count_lines(stop.err), 1) << stop.err;
  EXPECT_EQ(stop.err.rfind("multihead: error: training stopped at step 2: loss ", 0), 0u) << stop.err;
  EXPECT_FALSE(fs::exists(out)) << "a run stopped before its first checkpoint leaves nothing";

  // Skipping: each skipped step is logged and recorded, and 25 in a row stop the run.
  CliRun skip = run(job + " --on-nonfinite skip --out " + out.string());
  EXPECT_EQ(skip.code, 2);
  EXPECT_NE(skip.err.find("step 2: loss "), std::string::npos) << skip.err;
  EXPECT_NE(skip.err.find("update skipped"), std::string::npos) << skip.err;
  EXPECT_NE(skip.err.find("multihead: error: training stopped at step 26: the last 25 steps all had a non-finite "
                          "loss or gradient\n"),
            std::string::npos)
      << skip.err;

  CliRun bad_flag = run(job + " --on-nonfinite sometimes --out " + out.string());
  EXPECT_EQ(bad_flag.code, 2);
  EXPECT_EQ(bad_flag.err, "multihead: error: the flags: train: on_nonfinite must be stop or skip, got 'sometimes'\n");
}

}  // namespace
}  // namespace multihead
