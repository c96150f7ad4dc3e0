// SPDX-License-Identifier: Apache-2.0
// How a request's header frames its body, checked before the body is read.
// Where a server and a proxy in front of it could read the framing two ways,
// one client's body becomes another request (request smuggling): so the only
// framings taken are a single Content-Length, or Transfer-Encoding of exactly
// "chunked" (RFC 9112 section 6) and no Content-Length; every other is
// refused and its connection closed, the rest of its bytes never parsed.
#pragma once

#include <optional>
#include <string>

#include <boost/beast/http.hpp>

namespace multihead::serve_detail {

namespace http = boost::beast::http;

struct Refusal {
  int status;       // 400 a malformed or ambiguous framing, 501 a transfer coding not implemented
  std::string why;  // one line, for the client
};

// Of a request whose header `parser` has read: nothing when its body's
// framing is unambiguous, and the parser reads it as the header says (a
// Transfer-Encoding of chunked and nothing else, in HTTP/1.1, without
// Content-Length; or at most one Content-Length); else the refusal.
std::optional<Refusal> framing_refusal(const http::request_parser<http::string_body>& parser);

}  // namespace multihead::serve_detail
