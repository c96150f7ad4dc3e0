// SPDX-License-Identifier: Apache-2.0
#include "framing.h"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "multihead/core/error.h"

namespace multihead::serve_detail {

namespace {

// RFC 9110's tchar: the characters of a token (a coding's name).
bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

std::string_view trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

Refusal bad(std::string why) { return {400, std::move(why)}; }

}  // namespace

std::optional<Refusal> framing_refusal(const http::request_parser<http::string_body>& parser) {
  const auto& header = parser.get();
  std::size_t lengths = 0;
  std::vector<std::string> codings;  // every Transfer-Encoding line's list, in order
  bool has_coding = false;
  for (const auto& field : header) {
    if (field.name() == http::field::content_length) ++lengths;
    if (field.name() != http::field::transfer_encoding) continue;
    has_coding = true;
    const std::string_view value(field.value().data(), field.value().size());
    for (std::size_t at = 0;;) {
      const std::size_t comma = value.find(',', at);
      codings.push_back(lower(trimmed(value.substr(at, comma == std::string_view::npos ? value.npos : comma - at))));
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
  }
  if (lengths > 1) return bad("the request has more than one Content-Length");
  if (!has_coding) {
    if (parser.chunked()) return bad("the request's framing is ambiguous");  // never, unless the parser reads otherwise
    return std::nullopt;
  }
  if (header.version() < 11) return bad("Transfer-Encoding in an HTTP/1.0 request");
  if (lengths > 0) return bad("the request has both Content-Length and Transfer-Encoding");
  for (const std::string& c : codings)
    if (!is_token(c)) return bad(fmt::format("Transfer-Encoding '{}' is malformed", clip_text(c, 40)));
  for (const std::string& c : codings)
    if (c != "chunked")
      return Refusal{501, fmt::format("Transfer-Encoding '{}' is not implemented; this server takes chunked alone",
                                      clip_text(c, 40))};
  if (codings.size() != 1) return bad("Transfer-Encoding names chunked more than once");
  if (!parser.chunked()) return bad("the request's framing is ambiguous");
  return std::nullopt;
}

}  // namespace multihead::serve_detail
