// SPDX-License-Identifier: Apache-2.0
// Scores of predicted token sequences against references, each example
// having one or more correct answers (a word's pronunciations):
//   word error rate     the share of examples whose prediction equals none of its references;
//   phoneme error rate  the edit distance to the nearest reference, summed, over those references'
//                       summed lengths;
//   BLEU                corpus BLEU (Papineni et al. 2002): clipped n-gram precisions for n = 1..4
//                       (counts clipped by the most any one reference holds), their geometric mean,
//                       times the brevity penalty exp(1 - r / c) when the predictions' length c is
//                       below r, the summed lengths of the references closest in length (the shorter
//                       on a tie). No smoothing: a corpus with no matching 4-gram scores 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace multihead {

using TokenSeq = std::vector<std::string>;

// Levenshtein distance: insertions, deletions and substitutions of one token cost 1.
std::int64_t edit_distance(const TokenSeq& a, const TokenSeq& b);

struct SequenceScores {
  double word_error_rate = 0, phoneme_error_rate = 0, bleu = 0;
  std::int64_t examples = 0;
};

// predictions[i] against references[i] (at least one each); ShapeError when
// the counts differ or an example has no reference.
SequenceScores score_sequences(const std::vector<TokenSeq>& predictions,
                               const std::vector<std::vector<TokenSeq>>& references);
double corpus_bleu(const std::vector<TokenSeq>& predictions, const std::vector<std::vector<TokenSeq>>& references,
                   int max_n = 4);

}  // namespace multihead
