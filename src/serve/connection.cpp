// SPDX-License-Identifier: Apache-2.0
#include "connection.h"

#include <poll.h>

namespace multihead::serve_detail {

bool peer_gone(int fd) {
  pollfd p{fd, 0, 0};  // POLLHUP and POLLERR are reported whatever the events asked for
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace multihead::serve_detail
