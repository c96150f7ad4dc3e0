// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/sequence_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "multihead/core/error.h"
#include "multihead/core/suggest.h"

namespace multihead {

namespace {

void check_pairs(const std::vector<TokenSeq>& predictions, const std::vector<std::vector<TokenSeq>>& references) {
  check<ShapeError>(predictions.size() == references.size(), "{} predictions for {} reference sets", predictions.size(),
                    references.size());
  for (std::size_t i = 0; i < references.size(); ++i)
    check<ShapeError>(!references[i].empty(), "example {} has no reference", i);
}

// The n-grams of s and how often each occurs.
std::map<TokenSeq, std::int64_t> ngrams(const TokenSeq& s, std::size_t n) {
  std::map<TokenSeq, std::int64_t> counts;
  for (std::size_t i = 0; i + n <= s.size(); ++i) ++counts[TokenSeq(s.begin() + i, s.begin() + i + n)];
  return counts;
}

}  // namespace

std::int64_t edit_distance(const TokenSeq& a, const TokenSeq& b) {
  return static_cast<std::int64_t>(levenshtein(a, b));
}

double corpus_bleu(const std::vector<TokenSeq>& predictions, const std::vector<std::vector<TokenSeq>>& references,
                   int max_n) {
  check_pairs(predictions, references);
  std::vector<std::int64_t> matched(static_cast<std::size_t>(max_n)), total(static_cast<std::size_t>(max_n));
  std::int64_t c = 0, r = 0;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    const TokenSeq& hyp = predictions[i];
    c += static_cast<std::int64_t>(hyp.size());
    // The reference closest in length; the shorter on a tie.
    std::int64_t best = -1;
    for (const TokenSeq& ref : references[i]) {
      const std::int64_t len = static_cast<std::int64_t>(ref.size());
      const std::int64_t d = std::abs(len - static_cast<std::int64_t>(hyp.size()));
      const std::int64_t bd = std::abs(best - static_cast<std::int64_t>(hyp.size()));
      if (best < 0 || d < bd || (d == bd && len < best)) best = len;
    }
    r += best;
    for (int n = 1; n <= max_n; ++n) {
      std::map<TokenSeq, std::int64_t> most;  // the most any one reference holds
      for (const TokenSeq& ref : references[i])
        for (const auto& [g, k] : ngrams(ref, static_cast<std::size_t>(n))) most[g] = std::max(most[g], k);
      for (const auto& [g, k] : ngrams(hyp, static_cast<std::size_t>(n))) {
        const auto it = most.find(g);
        matched[static_cast<std::size_t>(n - 1)] += std::min(k, it == most.end() ? 0 : it->second);
        total[static_cast<std::size_t>(n - 1)] += k;
      }
    }
  }
  double log_sum = 0;
  for (int n = 0; n < max_n; ++n) {
    if (matched[static_cast<std::size_t>(n)] == 0) return 0.0;
    log_sum += std::log(static_cast<double>(matched[static_cast<std::size_t>(n)]) /
                        static_cast<double>(total[static_cast<std::size_t>(n)]));
  }
  const double brevity = c < r ? std::exp(1.0 - static_cast<double>(r) / static_cast<double>(c)) : 1.0;
  return brevity * std::exp(log_sum / max_n);
}

SequenceScores score_sequences(const std::vector<TokenSeq>& predictions,
                               const std::vector<std::vector<TokenSeq>>& references) {
  check_pairs(predictions, references);
  SequenceScores s;
  s.examples = static_cast<std::int64_t>(predictions.size());
  if (predictions.empty()) return s;
  std::int64_t wrong = 0, edits = 0, length = 0;
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    std::int64_t nearest = -1, nearest_len = 0;
    for (const TokenSeq& ref : references[i]) {
      const std::int64_t d = edit_distance(predictions[i], ref);
      if (nearest < 0 || d < nearest) nearest = d, nearest_len = static_cast<std::int64_t>(ref.size());
    }
    wrong += nearest != 0;
    edits += nearest;
    length += nearest_len;
  }
  s.word_error_rate = static_cast<double>(wrong) / static_cast<double>(s.examples);
  s.phoneme_error_rate = length ? static_cast<double>(edits) / static_cast<double>(length) : 0.0;
  s.bleu = corpus_bleu(predictions, references);
  return s;
}

}  // namespace multihead
