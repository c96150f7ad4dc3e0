// SPDX-License-Identifier: Apache-2.0
// Duplicate keys in JSON text. nlohmann::json keeps the last of repeated keys
// silently; a config, request or file header that says one thing twice is
// refused instead, so that what was read is what was written.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace multihead {

struct DuplicateKey {
  std::string key;   // the repeated key
  std::string path;  // where: "model.nhead", "inputs" (array elements as [i])
  int depth = 0;     // 1: a key of the top-level object
};

// The first key repeated within one object, at any depth; one linear pass.
// Malformed JSON ends the pass quietly (the parse that follows reports it).
std::optional<DuplicateKey> first_duplicate_key(std::string_view text);

}  // namespace multihead
