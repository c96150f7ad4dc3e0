// SPDX-License-Identifier: Apache-2.0
#include "multihead/io/atomic_file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

// A descriptor of `path` to read (a regular file, a pipe or a FIFO), blocking.
int open_input(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  check<IoError>(!std::filesystem::is_directory(status), "cannot read '{}': is a directory", path);
  // A device never ends (/dev/zero) or blocks (a terminal); pipes and FIFOs
  // (a shell's <(...)) are read to their end, within the bounds.
  check<IoError>(!std::filesystem::is_character_file(status) && !std::filesystem::is_block_file(status),
                 "cannot read '{}': is a device, not a file", path);
  const bool fifo = std::filesystem::is_fifo(status);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
  check<IoError>(fd >= 0, "cannot open '{}': {}", path, errno_str());
  if (!fifo) return fd;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, kFifoWriterWaitMs) > 0 && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0) return fd;
  ::close(fd);
  throw IoError(fmt::format("cannot read '{}': a FIFO that nothing wrote to in {} s", path, kFifoWriterWaitMs / 1000));
}

// Reads up to `size` bytes into buf; 0 at the end. EINTR retried.
std::size_t read_some(int fd, char* buf, std::size_t size, const std::string& path) {
  for (;;) {
    const ssize_t n = ::read(fd, buf, size);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    throw IoError(fmt::format("cannot read '{}': {}", path, errno_str()));
  }
}

std::string too_large(const std::string& path, std::uint64_t max_bytes) {
  return fmt::format("cannot read '{}': larger than {} bytes, the most this reads", path, max_bytes);
}

// Closes a descriptor when it goes out of scope.
struct Closer {
  int fd;
  ~Closer() { ::close(fd); }
};

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
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (truncate ? O_TRUNC : O_APPEND), 0644);
  check<IoError>(fd >= 0, "cannot open '{}' for writing: {}", path, errno_str());
  std::FILE* f = ::fdopen(fd, truncate ? "w" : "a");
  if (!f) {
    const std::string err = errno_str();
    ::close(fd);
    throw IoError(fmt::format("cannot open '{}' for writing: {}", path, err));
  }
  return f;
}

std::string read_file(const std::string& path, std::uint64_t max_bytes) {
  const int fd = open_input(path);
  const Closer closer{fd};
  struct stat st {};
  // A regular file larger than the bound is refused before a byte is read; a pipe as it passes it.
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
    check<IoError>(static_cast<std::uint64_t>(st.st_size) <= max_bytes, "{}", too_large(path, max_bytes));
  std::string text;
  char buf[1 << 16];
  while (const std::size_t n = read_some(fd, buf, sizeof buf, path)) {
    check<IoError>(text.size() + n <= max_bytes, "{}", too_large(path, max_bytes));
    text.append(buf, n);
  }
  return text;
}

std::string read_file_prefix(const std::string& path, std::uint64_t bytes) {
  const int fd = open_input(path);
  const Closer closer{fd};
  std::string text;
  char buf[1 << 16];
  while (text.size() < bytes) {
    const std::size_t n =
        read_some(fd, buf, static_cast<std::size_t>(std::min<std::uint64_t>(sizeof buf, bytes - text.size())), path);
    if (n == 0) break;
    text.append(buf, n);
  }
  return text;
}

std::vector<NumberedLine> read_lines(const std::string& path, std::uint64_t max_line_bytes, std::uint64_t max_bytes) {
  int fd = 0;
  if (path != "-") {
    fd = open_input(path);
  } else {
    // Standard input from a terminal is typed line by line; from another device (< /dev/zero) it never ends.
    struct stat st {};
    check<IoError>(::fstat(0, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) || ::isatty(0),
                   "cannot read standard input: it is a device, not a file, pipe or terminal");
  }
  const Closer closer{path == "-" ? -1 : fd};
  const std::string name = path == "-" ? "standard input" : path;
  std::vector<NumberedLine> lines;
  std::string line;
  std::uint64_t total = 0;
  std::int64_t number = 1;
  char buf[1 << 16];
  auto finish = [&] {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back({number++, std::move(line)});
    line.clear();
  };
  while (const std::size_t n = read_some(fd, buf, sizeof buf, name)) {
    total += n;
    check<IoError>(total <= max_bytes, "{}", too_large(name, max_bytes));
    for (std::size_t at = 0; at < n;) {
      const char* nl = static_cast<const char*>(std::memchr(buf + at, '\n', n - at));
      const std::size_t end = nl ? static_cast<std::size_t>(nl - buf) : n;
      check<IoError>(line.size() + (end - at) <= max_line_bytes, "{}: line {} is longer than {} bytes", name, number,
                     max_line_bytes);
      line.append(buf + at, end - at);
      at = end;
      if (nl) finish(), ++at;
    }
  }
  if (!line.empty()) finish();
  return lines;
}

}  // namespace multihead
