// SPDX-License-Identifier: Apache-2.0
// The directory a run writes: config.json, metrics.jsonl (one JSON object a
// line, appended as the run goes), checkpoints/, tokenizer/, plots/ and
// report.md. Every file but the metrics log is written atomically. A new run
// starts a new log; a resumed run keeps the records up to its checkpoint.
#pragma once

#include <chrono>
#include <optional>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace multihead {

// The checkpoint a run resumes from: run_dir/checkpoints/last.safetensors.
std::string last_checkpoint_path(const std::string& run_dir);
// The weights of the best validation of a run that stops early:
// run_dir/checkpoints/best.safetensors.
std::string best_checkpoint_path(const std::string& run_dir);
// The checkpoint a run answers with (eval, predict, serve, export,
// inspect): its best when it kept one, else its last.
std::string answer_checkpoint_path(const std::string& run_dir);
// A checkpoint kept with train.keep_checkpoints: run_dir/checkpoints/step_N.safetensors,
// N the steps trained (at least 8 digits, so that names sort by step up to 10^8).
std::string kept_checkpoint_path(const std::string& run_dir, std::int64_t step);
// The steps of the checkpoints kept in run_dir, in order.
std::vector<std::int64_t> kept_checkpoint_steps(const std::string& run_dir);

// A finished run's config.json, parsed; `path` names it in the job readers' errors.
struct RunConfig {
  std::string path;
  nlohmann::json json;
};
RunConfig read_run_config(const std::string& run_dir);

// How a run treats what is already at its path.
// A non-empty directory that holds no run (no config.json) is refused in
// every mode.
enum class RunMode {
  kNew,        // a new or empty directory only
  kResume,     // go on from the run there (train/resume.h), or start one
  kOverwrite,  // a run there is removed first
};

// Under mpirun (train/distributed.h) rank 0 owns the run directory; on the
// other ranks a RunDir only reads (a resumed run's checkpoint, the
// tokenizer rank 0 trained): it creates, locks and writes nothing. Ranks on
// several hosts therefore need the directory on a shared filesystem to
// resume or to share a trained tokenizer.
class RunDir {
 public:
  // Creates the folders and takes the directory's lock (run.lock: an flock
  // the kernel drops when the process ends, so a killed run leaves no stale
  // lock; it names the pid that holds it, and goes when the RunDir does).
  // Refuses a directory another process holds, and one that `mode` does not
  // allow; removes temporaries an interrupted run left behind. The lock file
  // of a process that ended without removing it is taken over
  // (stale_lock_pid names that process).
  explicit RunDir(std::string path, RunMode mode = RunMode::kNew);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  // The pid a run.lock left by an ended process named, or "".
  const std::string& stale_lock_pid() const { return stale_lock_pid_; }
  std::string file(const std::string& name) const;  // path/name
  void write_json(const std::string& name, const nlohmann::json& j) const;
  // config.json: the job's settings, kept for the checkpoints to record.
  void write_config(const nlohmann::json& config);
  const nlohmann::json& config() const { return config_; }
  void write_text(const std::string& name, const std::string& text) const;
  // results.json: the job's results, and under "machine" what they were
  // measured on (kernels/machine.h).
  void write_results(nlohmann::json results) const;
  // report.md: the job's report, closed by a line naming the machine.
  void write_report(const std::string& markdown) const;
  void append_metrics(const nlohmann::json& record);
  bool resume_requested() const { return mode_ == RunMode::kResume; }
  bool writes() const { return owner_; }  // false on ranks other than 0
  // Records appended to the log so far (a checkpoint notes it).
  std::int64_t metrics_records() const { return records_; }
  // Keeps the log's first `count` records, rewrites it atomically and
  // appends from there; returns the records kept.
  std::vector<nlohmann::json> keep_metrics(std::int64_t count);
  // The run's training time over every invocation: `before` (what its
  // last kept metrics record noted; 0 for a new run) plus the time since
  // this call. Each step's record notes it, so a resumed run reports the whole.
  void start_training_clock(double before);
  double training_seconds() const;

 private:
  std::string path_;
  RunMode mode_;
  bool owner_ = true;
  int lock_fd_ = -1;
  std::string stale_lock_pid_;
  std::int64_t records_ = 0;
  std::FILE* metrics_ = nullptr;
  nlohmann::json config_ = nlohmann::json::object();
  double seconds_before_ = 0;
  std::optional<std::chrono::steady_clock::time_point> clock_started_;
};

}  // namespace multihead
