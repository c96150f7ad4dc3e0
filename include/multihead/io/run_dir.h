// The directory a run writes: config.json, metrics.jsonl (one JSON object a
// line, appended as the run goes), checkpoints/, tokenizer/, plots/ and
// report.md. Every file but the metrics log is written atomically. A new run
// starts a new log; a resumed run keeps the records up to its checkpoint.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace multihead {

// The checkpoint a run leaves for evaluation and inspection: run_dir/checkpoints/last.safetensors.
std::string last_checkpoint_path(const std::string& run_dir);

// A finished run's config.json, parsed; `path` names it in the job readers' errors.
struct RunConfig {
  std::string path;
  nlohmann::json json;
};
RunConfig read_run_config(const std::string& run_dir);

class RunDir {
 public:
  // Creates the folders; removes temporaries an interrupted run left behind.
  // With `resume`, the job picks up from checkpoints/last.safetensors when
  // there is one (train/resume.h).
  explicit RunDir(std::string path, bool resume = false);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const;  // path/name
  void write_json(const std::string& name, const nlohmann::json& j) const;
  void write_text(const std::string& name, const std::string& text) const;
  // results.json: the job's results, and under "machine" what they were
  // measured on (kernels/machine.h).
  void write_results(nlohmann::json results) const;
  // report.md: the job's report, closed by a line naming the machine.
  void write_report(const std::string& markdown) const;
  void append_metrics(const nlohmann::json& record);
  bool resume_requested() const { return resume_; }
  // Records appended to the log so far (a checkpoint notes it).
  std::int64_t metrics_records() const { return records_; }
  // Keeps the log's first `count` records, rewrites it atomically and
  // appends from there; returns the records kept.
  std::vector<nlohmann::json> keep_metrics(std::int64_t count);

 private:
  std::string path_;
  bool resume_ = false;
  std::int64_t records_ = 0;
  std::FILE* metrics_ = nullptr;
};

}  // namespace multihead
