// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "multihead/core/error.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/kernels/machine.h"
#include "multihead/train/distributed.h"
#include "multihead/train/hf_checkpoint.h"

namespace multihead {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSubfolders[] = {"checkpoints", "tokenizer", "plots"};
constexpr const char* kLockFile = "run.lock";

// Takes <dir>/run.lock (a non-blocking flock) and writes the pid into it;
// returns the descriptor that holds the lock. A pid the file named before
// (a process that ended without releasing it: killed) goes to `stale`.
int lock_run_dir(const std::string& dir, std::string& stale) {
  const std::string path = (fs::path(dir) / kLockFile).string();
  check_replaceable(path);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  check<IoError>(fd >= 0, "cannot open '{}': {}", path, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    check<IoError>(err != EWOULDBLOCK, "'{}' is in use by another process{}; wait for it or choose another directory",
                   dir, n > 0 ? fmt::format(" (pid {})", std::string(pid, static_cast<std::size_t>(n))) : "");
    throw IoError(fmt::format("cannot lock '{}': {}", path, std::strerror(err)));
  }
  char before[32] = {};
  const ssize_t had = ::pread(fd, before, sizeof before - 1, 0);
  const std::string me = std::to_string(::getpid());
  if (had > 0 && std::string(before, static_cast<std::size_t>(had)) != me)
    stale = std::string(before, static_cast<std::size_t>(had));
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    throw IoError(fmt::format("cannot write '{}': {}", path, err));
  }
  return fd;
}

// Nothing in `dir` but the lock, empty subfolders a RunDir makes and the
// temporaries of interrupted writes.
bool holds_nothing(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == kLockFile || name.find(".tmp.") != std::string::npos) continue;
    const bool subfolder = std::find(std::begin(kSubfolders), std::end(kSubfolders), name) != std::end(kSubfolders);
    std::error_code ec;
    if (!(subfolder && e.is_directory(ec) && !e.is_symlink(ec) && fs::is_empty(e.path(), ec))) return false;
  }
  return true;
}

}  // namespace

RunDir::RunDir(std::string path, RunMode mode)
    : path_(std::move(path)), mode_(mode), owner_(process_group().primary()) {
  if (!owner_) return;
  std::error_code ec;
  fs::create_directories(path_, ec);
  check<IoError>(!ec, "cannot create run directory '{}': {}", path_, ec.message());
  check<IoError>(fs::is_directory(path_), "'{}' is not a directory", path_);
  // A run's directory: its config.json, or the lock every run leaves (a run
  // killed before it wrote its config has tokenizer files and no config).
  const fs::path lock = fs::path(path_) / kLockFile;
  const bool had_lock = fs::exists(fs::symlink_status(lock));
  const bool is_run = had_lock || fs::exists(fs::symlink_status(fs::path(path_) / "config.json"));
  lock_fd_ = lock_run_dir(path_, stale_lock_pid_);
  // A refused directory is left as it was: without the lock file when it had none.
  auto release = [&] {
    ::close(lock_fd_);
    if (!had_lock) fs::remove(lock, ec);
  };
  try {
    // Whatever the mode, a run never mixes its files with others (a failed
    // run removes what it wrote, so there must be nothing else there).
    const bool empty = holds_nothing(path_);
    check<IoError>(empty || is_run, "'{}' is not empty and holds no run; a run goes into a new or empty directory",
                   path_);
    if (mode_ != RunMode::kResume && !empty) {
      check<IoError>(mode_ == RunMode::kOverwrite,
                     "'{}' already holds a run; --resume continues it, --overwrite replaces it", path_);
      for (const auto& e : fs::directory_iterator(path_))
        if (e.path().filename() != kLockFile) fs::remove_all(e.path());
    }
    for (const char* sub : kSubfolders) {
      fs::create_directories(fs::path(path_) / sub, ec);
      check<IoError>(!ec, "cannot create run directory '{}': {}", (fs::path(path_) / sub).string(), ec.message());
    }
    // Temporaries of atomic writes (".<name>.tmp.XXXXXX") are debris of a killed run.
    std::vector<fs::path> folders = {path_};
    for (const char* sub : kSubfolders) folders.push_back(fs::path(path_) / sub);
    for (const fs::path& folder : folders)
      for (const auto& e : fs::directory_iterator(folder))
        if (e.is_regular_file() && e.path().filename().string().find(".tmp.") != std::string::npos)
          fs::remove(e.path(), ec);
  } catch (const fs::filesystem_error& e) {
    release();
    throw IoError(fmt::format("cannot prepare run directory '{}': {}", path_, e.code().message()));
  } catch (...) {
    release();
    throw;
  }
}

RunDir::~RunDir() {
  if (metrics_) std::fclose(metrics_);
  if (lock_fd_ >= 0) {
    // The file goes while the lock is held, so that no finished run keeps a
    // run.lock naming a process that has ended; closing drops the lock.
    std::error_code ec;
    fs::remove(fs::path(path_) / kLockFile, ec);
    ::close(lock_fd_);
  }
}

std::string best_checkpoint_path(const std::string& run_dir) {
  return (fs::path(run_dir) / "checkpoints" / "best.safetensors").string();
}

std::string answer_checkpoint_path(const std::string& run_dir) {
  const std::string best = best_checkpoint_path(run_dir);
  return fs::exists(best) ? best : last_checkpoint_path(run_dir);
}

std::string last_checkpoint_path(const std::string& run_dir) {
  return (fs::path(run_dir) / "checkpoints" / "last.safetensors").string();
}

std::string kept_checkpoint_path(const std::string& run_dir, std::int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / fmt::format("step_{:08d}.safetensors", step)).string();
}

std::vector<std::int64_t> kept_checkpoint_steps(const std::string& run_dir) {
  std::vector<std::int64_t> steps;
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string_view prefix = "step_", suffix = ".safetensors";
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) continue;
    const std::string_view digits(name.data() + prefix.size(), name.size() - prefix.size() - suffix.size());
    std::int64_t step = 0;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (err == std::errc() && end == digits.data() + digits.size() && step >= 0) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

RunConfig read_run_config(const std::string& run_dir) {
  RunConfig c;
  c.path = (fs::path(run_dir) / "config.json").string();
  if (is_hf_checkpoint(run_dir)) {  // transformers' config.json: the job it is read as
    c.json = read_hf_checkpoint(run_dir).job;
    return c;
  }
  c.json = ConfigReader::parse(read_file(c.path), c.path);
  return c;
}

std::string RunDir::file(const std::string& name) const { return (fs::path(path_) / name).string(); }

void RunDir::write_json(const std::string& name, const nlohmann::json& j) const {
  if (owner_) write_file_atomic(file(name), j.dump(2) + "\n");
}

void RunDir::write_config(const nlohmann::json& config) {
  config_ = config;
  write_json("config.json", config);
}

void RunDir::write_text(const std::string& name, const std::string& text) const {
  if (owner_) write_file_atomic(file(name), text);
}

void RunDir::write_results(nlohmann::json results) const {
  results["machine"] = machine_info();
  if (process_group().size() > 1) results["ranks"] = process_group().size();
  write_json("results.json", results);
}

void RunDir::write_report(const std::string& markdown) const {
  const int ranks = process_group().size();
  const std::string where = ranks > 1 ? fmt::format(", {} ranks (MPI, data-parallel)", ranks) : "";
  write_text("report.md", fmt::format("{}\nMeasured on {}{}.\n", markdown, machine_summary(machine_info()), where));
}

void RunDir::append_metrics(const nlohmann::json& record) {
  if (!owner_) return;
  // A new run starts a new log (a run directory reused by a later run is
  // overwritten, not mixed), unless keep_metrics opened it first.
  if (!metrics_) {
    metrics_ = open_for_append(file("metrics.jsonl"), true);
  }
  const std::string line = record.dump() + "\n";
  errno = 0;
  const bool written = std::fwrite(line.data(), 1, line.size(), metrics_) == line.size() && std::fflush(metrics_) == 0;
  check<IoError>(written, "cannot write '{}': {}", file("metrics.jsonl"),
                 errno != 0 ? std::strerror(errno) : "the write fell short");
  ++records_;
}

std::vector<nlohmann::json> RunDir::keep_metrics(std::int64_t count) {
  if (metrics_) std::fclose(metrics_), metrics_ = nullptr;
  std::vector<nlohmann::json> kept;
  std::string text;
  // Records are flushed as written, so a killed run keeps them all; fewer
  // than `count` (a power cut) leaves a gap in the log, not a failed resume.
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(file("metrics.jsonl"), ec)))
    for (NumberedLine& line : read_lines(file("metrics.jsonl"))) {
      if (static_cast<std::int64_t>(kept.size()) >= count) break;
      nlohmann::json j = nlohmann::json::parse(line.text, nullptr, false);
      check<IoError>(!j.is_discarded() && j.is_object(), "{}: line {} is not a JSON object", file("metrics.jsonl"),
                     line.number);
      text += line.text + "\n";
      kept.push_back(std::move(j));
    }
  if (!owner_) return kept;
  write_file_atomic(file("metrics.jsonl"), text);
  metrics_ = open_for_append(file("metrics.jsonl"), false);
  records_ = static_cast<std::int64_t>(kept.size());
  return kept;
}

void RunDir::start_training_clock(double before) {
  seconds_before_ = before;
  clock_started_ = std::chrono::steady_clock::now();
}

double RunDir::training_seconds() const {
  if (!clock_started_) return seconds_before_;
  return seconds_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - *clock_started_).count();
}

}  // namespace multihead
