// Whether the client of a request is still there, so that the work of a
// request nobody waits for is never begun. cpp-httplib hands a handler the
// request's addresses but not its socket: the socket is found among the
// process's own by those addresses.
#pragma once

#include <httplib.h>

namespace multihead::serve_detail {

// The socket the request came on, or -1 when none matches.
int connection_socket(const httplib::Request& req);
// The peer closed the connection (or it broke).
bool peer_gone(int fd);

}  // namespace multihead::serve_detail
