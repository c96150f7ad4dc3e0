#include "multihead/io/atomic_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
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

// Opening a FIFO to read blocks until something opens it to write, forever
// when nothing will. Opened without blocking, it is given kFifoWriterWaitMs
// for a writer to appear (poll reports no hang-up before a writer has come),
// then read to its end.
constexpr int kFifoWriterWaitMs = 10'000;
std::string read_fifo(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  check<IoError>(fd >= 0, "cannot open '{}': {}", path, errno_str());
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, kFifoWriterWaitMs);
  std::string text;
  if (ready > 0 && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0) {
    char buf[1 << 16];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
      if (n > 0) text.append(buf, static_cast<std::size_t>(n));
    const int err = n < 0 ? errno : 0;
    ::close(fd);
    check<IoError>(err == 0, "cannot read '{}': {}", path, std::strerror(err));
    return text;
  }
  ::close(fd);
  throw IoError(fmt::format("cannot read '{}': a FIFO that nothing wrote to in {} s", path, kFifoWriterWaitMs / 1000));
}

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

void check_replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    check<IoError>(errno == ENOENT, "cannot write '{}': {}", path, errno_str());
    return;
  }
  if (S_ISREG(st.st_mode)) return;
  const char* kind = S_ISLNK(st.st_mode)                          ? "a symbolic link"
                     : S_ISDIR(st.st_mode)                        ? "a directory"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                     : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                  : "not a regular file";
  throw IoError(fmt::format("refusing to write '{}': it is {}, and only a regular file is replaced", path, kind));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  check_replaceable(path);
  // A fresh name (O_EXCL), never a file or link someone left there.
  std::string tmp = (dir / fmt::format(".{}.tmp.XXXXXX", target.filename().string())).string();
  int fd = ::mkstemp(tmp.data());
  check<IoError>(fd >= 0, "cannot create a temporary file beside '{}': {}", path, errno_str());
  try {
    check<IoError>(::fchmod(fd, 0644) == 0, "cannot set the mode of '{}': {}", path, errno_str());
    write_all(fd, bytes, path);
    check<IoError>(::fsync(fd) == 0, "cannot sync '{}': {}", path, errno_str());
    // Checked again just before the rename, which replaces whatever is there.
    check_replaceable(path);
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

std::FILE* open_for_append(const std::string& path, bool truncate) {
  check_replaceable(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (truncate ? O_TRUNC : O_APPEND), 0644);
  check<IoError>(fd >= 0, "cannot open '{}' for writing: {}", path, errno_str());
  std::FILE* f = ::fdopen(fd, truncate ? "w" : "a");
  if (!f) {
    const std::string err = errno_str();
    ::close(fd);
    throw IoError(fmt::format("cannot open '{}' for writing: {}", path, err));
  }
  return f;
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  check<IoError>(!std::filesystem::is_directory(status), "cannot read '{}': is a directory", path);
  // A device never ends (/dev/zero) or blocks (a terminal); pipes and FIFOs
  // (a shell's <(...)) are read to their end.
  check<IoError>(!std::filesystem::is_character_file(status) && !std::filesystem::is_block_file(status),
                 "cannot read '{}': is a device, not a file", path);
  if (std::filesystem::is_fifo(status)) return read_fifo(path);
  std::ifstream in(path, std::ios::binary);
  check<IoError>(in.good(), "cannot open '{}': {}", path, errno_str());
  std::ostringstream ss;
  ss << in.rdbuf();
  check<IoError>(!in.bad(), "cannot read '{}'", path);
  return std::move(ss).str();
}

}  // namespace multihead
