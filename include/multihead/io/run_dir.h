// The directory a run writes: config.json, metrics.jsonl (one JSON object a
// line, appended as the run goes, started afresh by each run), checkpoints/, tokenizer/, plots/ and
// report.md. Every file but the metrics log is written atomically.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace multihead {

// The checkpoint a run leaves for evaluation and inspection: run_dir/checkpoints/last.safetensors.
std::string last_checkpoint_path(const std::string& run_dir);

class RunDir {
 public:
  // Creates the folders; removes temporaries an interrupted run left behind.
  explicit RunDir(std::string path);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const;  // path/name
  void write_json(const std::string& name, const nlohmann::json& j) const;
  void write_text(const std::string& name, const std::string& text) const;
  void append_metrics(const nlohmann::json& record);

 private:
  std::string path_;
  std::FILE* metrics_ = nullptr;
};

}  // namespace multihead
