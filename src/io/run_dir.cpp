#include "multihead/io/run_dir.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/kernels/machine.h"

namespace multihead {

namespace fs = std::filesystem;

RunDir::RunDir(std::string path, bool resume) : path_(std::move(path)), resume_(resume) {
  std::error_code ec;
  for (const char* sub : {"", "checkpoints", "tokenizer", "plots"}) {
    fs::create_directories(fs::path(path_) / sub, ec);
    check<IoError>(!ec, "cannot create run directory '{}': {}", (fs::path(path_) / sub).string(), ec.message());
  }
  // Temporaries of atomic writes (".<name>.tmp.<pid>") are debris of a killed run.
  for (const char* sub : {"", "checkpoints", "tokenizer", "plots"})
    for (const auto& e : fs::directory_iterator(fs::path(path_) / sub))
      if (e.is_regular_file() && e.path().filename().string().find(".tmp.") != std::string::npos)
        fs::remove(e.path(), ec);
}

RunDir::~RunDir() {
  if (metrics_) std::fclose(metrics_);
}

std::string last_checkpoint_path(const std::string& run_dir) {
  return (fs::path(run_dir) / "checkpoints" / "last.safetensors").string();
}

RunConfig read_run_config(const std::string& run_dir) {
  RunConfig c;
  c.path = (fs::path(run_dir) / "config.json").string();
  c.json = ConfigReader::parse(read_file(c.path), c.path);
  return c;
}

std::string RunDir::file(const std::string& name) const { return (fs::path(path_) / name).string(); }

void RunDir::write_json(const std::string& name, const nlohmann::json& j) const {
  write_file_atomic(file(name), j.dump(2) + "\n");
}

void RunDir::write_text(const std::string& name, const std::string& text) const { write_file_atomic(file(name), text); }

void RunDir::write_results(nlohmann::json results) const {
  results["machine"] = machine_info();
  write_json("results.json", results);
}

void RunDir::write_report(const std::string& markdown) const {
  write_text("report.md", fmt::format("{}\nMeasured on {}.\n", markdown, machine_summary(machine_info())));
}

void RunDir::append_metrics(const nlohmann::json& record) {
  // A new run starts a new log (a run directory reused by a later run is
  // overwritten, not mixed), unless keep_metrics opened it first.
  if (!metrics_) {
    metrics_ = std::fopen(file("metrics.jsonl").c_str(), "w");
    check<IoError>(metrics_ != nullptr, "cannot open '{}' for writing", file("metrics.jsonl"));
  }
  const std::string line = record.dump() + "\n";
  check<IoError>(std::fwrite(line.data(), 1, line.size(), metrics_) == line.size() && std::fflush(metrics_) == 0,
                 "cannot write '{}'", file("metrics.jsonl"));
  ++records_;
}

std::vector<nlohmann::json> RunDir::keep_metrics(std::int64_t count) {
  if (metrics_) std::fclose(metrics_), metrics_ = nullptr;
  std::vector<nlohmann::json> kept;
  std::string text;
  {
    std::ifstream in(file("metrics.jsonl"));
    std::string line;
    // Records are flushed as written, so a killed run keeps them all; fewer
    // than `count` (a power cut) leaves a gap in the log, not a failed resume.
    while (static_cast<std::int64_t>(kept.size()) < count && std::getline(in, line)) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      check<IoError>(!j.is_discarded() && j.is_object(), "{}: line {} is not a JSON object", file("metrics.jsonl"),
                     kept.size() + 1);
      text += line + "\n";
      kept.push_back(std::move(j));
    }
  }
  write_file_atomic(file("metrics.jsonl"), text);
  metrics_ = std::fopen(file("metrics.jsonl").c_str(), "a");
  check<IoError>(metrics_ != nullptr, "cannot open '{}' for writing", file("metrics.jsonl"));
  records_ = static_cast<std::int64_t>(kept.size());
  return kept;
}

}  // namespace multihead
