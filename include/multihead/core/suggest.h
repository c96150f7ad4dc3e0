// SPDX-License-Identifier: Apache-2.0
// "Did you mean": the known name nearest a mistyped one, for errors about
// unknown subcommands, flags and config keys.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace multihead {

// Levenshtein distance between two sequences (strings, token lists):
// insertions, deletions and substitutions, each 1 (an adjacent swap counts 2).
template <typename Seq>
std::size_t levenshtein(const Seq& a, const Seq& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min(std::min(row[j], row[j - 1]) + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1));
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The name in `names` nearest `word` by edit distance (an adjacent swap
// counting one edit), when it is near enough to be a slip: at most a third
// of the longer one's length, at least 1 (and at most 3). Empty when none
// is, or when `word` is itself a name.
std::string closest_name(std::string_view word, const std::vector<std::string>& names);

// " (did you mean 'model'?)", or "" when no name is near.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& names);

}  // namespace multihead
