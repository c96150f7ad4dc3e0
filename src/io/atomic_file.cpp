#include "multihead/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "multihead/core/error.h"

namespace multihead {
namespace {

std::string errno_str() { return std::strerror(errno); }

void write_all(int fd, std::string_view bytes, const std::string& path) {
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    check<IoError>(n > 0, "cannot write '{}': {}", path, errno_str());
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp = (dir / fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid())).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  check<IoError>(fd >= 0, "cannot create '{}': {}", path, errno_str());
  try {
    write_all(fd, bytes, path);
    check<IoError>(::fsync(fd) == 0, "cannot sync '{}': {}", path, errno_str());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = errno_str();
    ::unlink(tmp.c_str());
    throw IoError("cannot write '" + path + "': " + err);
  }
  // Make the rename itself durable.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  check<IoError>(!std::filesystem::is_directory(path, ec), "cannot read '{}': is a directory", path);
  std::ifstream in(path, std::ios::binary);
  check<IoError>(in.good(), "cannot open '{}': {}", path, errno_str());
  std::ostringstream ss;
  ss << in.rdbuf();
  check<IoError>(!in.bad(), "cannot read '{}'", path);
  return std::move(ss).str();
}

}  // namespace multihead
