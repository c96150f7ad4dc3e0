// SPDX-License-Identifier: Apache-2.0
// Progress of long work. On a terminal: one line redrawn in place, with a
// bar, the step, the epoch, the loss, the throughput and the ETA. Otherwise
// (a pipe, a log file, CI): a plain log line at the first step, every
// `log_every` steps, and whenever 10 seconds have passed without one. The
// ETA counts from the end of the first step, whose start-up costs (kernels
// compiled, memory first touched) would otherwise hold it high.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace multihead {

class Progress {
 public:
  // quiet: print nothing (library use, tests).
  Progress(std::int64_t total_steps, std::FILE* out, bool quiet = false, std::int64_t log_every = 50);
  void set_total(std::int64_t total_steps) { total_ = total_steps; }
  // A resumed run starts at `step`: logs it (when > 0), and the ETA counts
  // only the steps run since.
  void resume_at(std::int64_t step);
  // extra: appended to log lines (not to the terminal bar), e.g. memory.
  void update(std::int64_t step, std::int64_t epoch, double loss, double items_per_s, const char* unit = "tok/s",
              const std::string& extra = "");
  // A line of its own (clears the bar first on a terminal).
  void log(const std::string& line);
  // "warning: line", shown even when quiet if warnings are on (by default
  // as the progress is; the CLI shows them on rank 0 whatever --quiet says).
  void warn(const std::string& line);
  void set_warnings(bool shown) { warnings_ = shown; }
  void finish();
  // Who watches the run's records (Python's on_step): `observer` sees each
  // record as metrics.jsonl receives it, a step's or a validation's.
  using Observer = std::function<void(const nlohmann::json&)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }
  void record(const nlohmann::json& r) const {
    if (observer_) observer_(r);
  }

 private:
  std::int64_t total_;
  std::FILE* out_;
  bool quiet_, warnings_, tty_, bar_shown_ = false;
  std::int64_t log_every_, first_ = 0;
  std::chrono::steady_clock::time_point start_, last_line_;
  // The end of the first step this process ran, and its number: the ETA's origin.
  std::chrono::steady_clock::time_point paced_from_;
  std::int64_t paced_step_ = -1;
  Observer observer_;
};

}  // namespace multihead
