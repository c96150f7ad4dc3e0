#include "connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace multihead::serve_detail {
namespace {

// An address's host and port, as cpp-httplib writes them into a request.
bool address(const sockaddr_storage& a, std::string& host, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof buf);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof buf);
    port = ntohs(v6.sin6_port);
  } else {
    return false;
  }
  host = buf;
  return true;
}

bool is_connection_of(int fd, const httplib::Request& req) {
  sockaddr_storage peer{}, local{};
  socklen_t peer_len = sizeof peer, local_len = sizeof local;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;  // not a connected socket
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  std::string peer_host, local_host;
  int peer_port = 0, local_port = 0;
  return address(peer, peer_host, peer_port) && address(local, local_host, local_port) &&
         peer_port == req.remote_port && peer_host == req.remote_addr && local_port == req.local_port;
}

}  // namespace

int connection_socket(const httplib::Request& req) {
  // A connection thread serves one connection at a time, often for many
  // requests in a row: the last socket it found is tried first.
  thread_local int last = -1;
  if (last >= 0 && is_connection_of(last, req)) return last;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    if (is_connection_of(fd, req)) return last = fd;
  }
  return -1;
}

bool peer_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace multihead::serve_detail
