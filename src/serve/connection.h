// SPDX-License-Identifier: Apache-2.0
// Whether the client of a request that waits for its answer is still there,
// so that the work of a request nobody waits for is never begun.
#pragma once

namespace multihead::serve_detail {

// The connection on socket `fd` broke: the peer reset it (as a client that
// was killed or gave up with SO_LINGER 0 does) or it failed. A peer that only
// shut down its sending side (shutdown(SHUT_WR), nc -N) still waits for its
// answer, and TCP cannot tell it from one that closed politely: both are
// answered.
bool peer_gone(int fd);

}  // namespace multihead::serve_detail
