// SPDX-License-Identifier: Apache-2.0
// HTTP request framing: raw bytes through Beast's request parser as a
// connection of multihead serve reads them (the header first, then the
// server's framing check, then the body), for the combinations that smuggle
// requests (Transfer-Encoding and Content-Length together, repeated, folded
// over lines, in other codings). A request the server takes must have one
// reading of where its body ends, checked here against the raw bytes
// independently of both the parser and the check: at most one framing
// header line of each kind, never both; Transfer-Encoding exactly
// "chunked" and read as chunked; a Content-Length body of that length.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_target.h"
#include "serve/framing.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;

struct RawField {
  std::string name, value;  // name lowercased; value with its folded lines joined
};

// The header's fields as the bytes have them, up to the first empty line.
std::vector<RawField> raw_fields(std::string_view bytes) {
  std::vector<RawField> fields;
  std::size_t at = bytes.find("\r\n");  // past the request line
  while (at != std::string_view::npos) {
    at += 2;
    const std::size_t end = bytes.find("\r\n", at);
    if (end == std::string_view::npos || end == at) break;
    const std::string_view line = bytes.substr(at, end - at);
    if ((line[0] == ' ' || line[0] == '\t') && !fields.empty()) {
      fields.back().value += " " + std::string(line);  // obs-fold: a continuation of the field before
    } else if (const std::size_t colon = line.find(':'); colon != std::string_view::npos) {
      std::string name(line.substr(0, colon));
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      fields.push_back({name, std::string(line.substr(colon + 1))});
    }
    at = end;
  }
  return fields;
}

std::string trimmed_lower(std::string s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  s = s.substr(first, s.find_last_not_of(" \t") - first + 1);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace multihead;
  const std::string bytes = fuzz::bytes_of(data, size);
  http::request_parser<http::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(1 << 20);
  beast::error_code ec;
  std::size_t used = parser.put(boost::asio::buffer(bytes), ec);
  if (ec || !parser.is_header_done()) return 0;  // refused by the parser, or a header still to come
  if (serve_detail::framing_refusal(parser)) return 0;
  // Taken: one reading of the framing.
  std::size_t codings = 0, lengths = 0;
  std::string coding, length;
  for (const RawField& f : raw_fields(bytes)) {
    if (f.name == "transfer-encoding") ++codings, coding = trimmed_lower(f.value);
    if (f.name == "content-length") ++lengths, length = trimmed_lower(f.value);
  }
  fuzz::require(codings <= 1 && lengths <= 1 && codings + lengths <= 1);
  fuzz::require(parser.chunked() == (codings == 1));
  if (codings == 1) fuzz::require(coding == "chunked");
  parser.eager(true);
  while (!ec && !parser.is_done() && used < bytes.size())
    used += parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
  if (lengths == 1) {
    // RFC 9110: 1*DIGIT, leading zeros allowed ("02" is 2). Anything else taken would be a finding.
    std::uint64_t n = 0;
    const auto [end, error] = std::from_chars(length.data(), length.data() + length.size(), n);
    fuzz::require(!length.empty() && error == std::errc() && end == length.data() + length.size());
    if (!ec && parser.is_done()) fuzz::require(parser.get().body().size() == n);
  }
  return 0;
}
