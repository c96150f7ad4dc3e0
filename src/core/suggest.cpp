// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/suggest.h"

#include <algorithm>
#include <cctype>
#include <utility>

namespace multihead {

namespace {

// Edit distance in which swapping two adjacent characters is one edit, as
// one slip of the fingers is ("trian" for "train"): the optimal string
// alignment distance.
std::size_t typing_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// Names other tools give the same thing ("rotary" for RoPE, "adam" for
// AdamW, "bfloat16" for bf16): no slip of the fingers, but a user's word.
constexpr std::pair<std::string_view, std::string_view> kOtherNames[] = {
    {"rotary", "rope"},
    {"rotary_embedding", "rope"},
    {"rotary_embeddings", "rope"},
    {"absolute", "learned"},
    {"adam", "adamw"},
    {"sparse", "block_sparse"},
    {"blocksparse", "block_sparse"},
    {"sliding", "sliding_window"},
    {"local", "sliding_window"},
    {"cos", "cosine"},
    {"float32", "fp32"},
    {"float", "fp32"},
    {"bfloat16", "bf16"},
    {"float16", "fp16"},
    {"half", "fp16"},
    {"qint8", "int8"},
    {"json", "jsonl"},
    {"ndjson", "jsonl"},
    {"spm", "sentencepiece"},
    {"bpe", "sentencepiece"},
    {"characters", "char"},
    {"chars", "char"},
    {"words", "word"},
    {"none", "constant"},
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::string closest_name(std::string_view word, const std::vector<std::string>& names) {
  if (std::find(names.begin(), names.end(), word) != names.end()) return {};
  const std::string low = lower(word);
  for (const std::string& n : names)
    if (n == low) return n;  // "ROPE", "Body": another case
  for (const auto& [other, name] : kOtherNames)
    if (other == low && std::find(names.begin(), names.end(), name) != names.end()) return std::string(name);
  std::string best;
  std::size_t best_d = 0;
  for (const std::string& n : names) {
    const std::size_t d = typing_distance(word, n);
    const std::size_t allowed = std::clamp<std::size_t>(std::max(word.size(), n.size()) / 3, 1, 3);
    if (d <= allowed && (best.empty() || d < best_d)) best = n, best_d = d;
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& names) {
  const std::string n = closest_name(word, names);
  return n.empty() ? std::string() : " (did you mean '" + n + "'?)";
}

}  // namespace multihead
