#include "multihead/io/run_dir.h"

#include <filesystem>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"

namespace multihead {

namespace fs = std::filesystem;

RunDir::RunDir(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  for (const char* sub : {"", "checkpoints", "tokenizer", "plots"}) {
    fs::create_directories(fs::path(path_) / sub, ec);
    check<IoError>(!ec, "cannot create run directory '{}': {}", (fs::path(path_) / sub).string(), ec.message());
  }
  // Temporaries of atomic writes (".<name>.tmp.<pid>") are debris of a killed run.
  for (const char* sub : {"", "checkpoints", "tokenizer", "plots"})
    for (const auto& e : fs::directory_iterator(fs::path(path_) / sub))
      if (e.is_regular_file() && e.path().filename().string().find(".tmp.") != std::string::npos) fs::remove(e.path(), ec);
  // A new run starts a new log (a run directory reused by a later run is overwritten, not mixed).
  metrics_ = std::fopen(file("metrics.jsonl").c_str(), "w");
  check<IoError>(metrics_ != nullptr, "cannot open '{}' for writing", file("metrics.jsonl"));
}

RunDir::~RunDir() {
  if (metrics_) std::fclose(metrics_);
}

std::string last_checkpoint_path(const std::string& run_dir) {
  return (fs::path(run_dir) / "checkpoints" / "last.safetensors").string();
}

std::string RunDir::file(const std::string& name) const { return (fs::path(path_) / name).string(); }

void RunDir::write_json(const std::string& name, const nlohmann::json& j) const {
  write_file_atomic(file(name), j.dump(2) + "\n");
}

void RunDir::write_text(const std::string& name, const std::string& text) const { write_file_atomic(file(name), text); }

void RunDir::append_metrics(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  check<IoError>(std::fwrite(line.data(), 1, line.size(), metrics_) == line.size() && std::fflush(metrics_) == 0,
                 "cannot write '{}'", file("metrics.jsonl"));
}

}  // namespace multihead
