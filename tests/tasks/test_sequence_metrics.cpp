// SPDX-License-Identifier: Apache-2.0
// WER, PER and BLEU on cases worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "multihead/core/error.h"
#include "multihead/tasks/sequence_metrics.h"

namespace multihead {
namespace {

TokenSeq seq(const std::string& s) {  // "A B C" -> {"A", "B", "C"}
  TokenSeq out;
  std::size_t at = 0;
  while (at < s.size()) {
    const std::size_t end = std::min(s.find(' ', at), s.size());
    if (end > at) out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

TEST(SequenceMetrics, EditDistanceCountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance(seq("k i t t e n"), seq("s i t t i n g")), 3);  // 2 substitutions, 1 insertion
  EXPECT_EQ(edit_distance(seq(""), seq("A B")), 2);
  EXPECT_EQ(edit_distance(seq("A B C"), seq("A B C")), 0);
  EXPECT_EQ(edit_distance(seq("A B C"), seq("C B A")), 2);
}

TEST(SequenceMetrics, AWordIsRightWhenItEqualsAnyReference) {
  // READ has two pronunciations; the second prediction matches the other one.
  const std::vector<TokenSeq> pred = {seq("R IY1 D"), seq("R EH1 D"), seq("K AE1 D")};
  const std::vector<std::vector<TokenSeq>> refs = {
      {seq("R IY1 D"), seq("R EH1 D")}, {seq("R IY1 D"), seq("R EH1 D")}, {seq("K AE1 T")}};
  const SequenceScores s = score_sequences(pred, refs);
  EXPECT_EQ(s.examples, 3);
  EXPECT_DOUBLE_EQ(s.word_error_rate, 1.0 / 3);
  // Edits 0, 0, 1 to the nearest references, of lengths 3 + 3 + 3.
  EXPECT_DOUBLE_EQ(s.phoneme_error_rate, 1.0 / 9);
}

TEST(SequenceMetrics, PhonemeErrorRateUsesTheNearestReference) {
  const SequenceScores s = score_sequences({seq("A B C D")}, {{seq("X Y"), seq("A B C E F")}});
  EXPECT_DOUBLE_EQ(s.phoneme_error_rate, 2.0 / 5);  // "A B C E F": one substitution, one insertion
}

TEST(SequenceMetrics, BleuFollowsTheStandardDefinition) {
  // Identical: 1.
  EXPECT_DOUBLE_EQ(corpus_bleu({seq("A B C D E")}, {{seq("A B C D E")}}), 1.0);
  // p1..p4 = 4/5, 3/4, 2/3, 1/2, no brevity penalty: (1/5)^(1/4).
  EXPECT_NEAR(corpus_bleu({seq("A B C D E")}, {{seq("A B C D F")}}), std::pow(0.2, 0.25), 1e-12);
  // Every n-gram matches but the prediction is short: exp(1 - 6/5).
  EXPECT_NEAR(corpus_bleu({seq("A B C D E")}, {{seq("A B C D E F")}}), std::exp(1.0 - 6.0 / 5.0), 1e-12);
  // Clipping: "A A A A" against "A B A C": unigrams 2/4 (A clipped to 2), no bigram matches -> 0.
  EXPECT_EQ(corpus_bleu({seq("A A A A")}, {{seq("A B A C")}}), 0.0);
  EXPECT_NEAR(corpus_bleu({seq("A A A A")}, {{seq("A B A C")}}, 1), 0.5, 1e-12);
  // Corpus level: counts summed over examples before the precisions.
  //   1: "A B C D" vs "A B C D" -> 4/4, 3/3, 2/2, 1/1;  2: "A B C D" vs "A B C E" -> 3/4, 2/3, 1/2, 0/1.
  //   p = 7/8, 5/6, 3/4, 1/2; c = r = 8.
  const double want = std::pow(7.0 / 8 * 5.0 / 6 * 3.0 / 4 * 1.0 / 2, 0.25);
  EXPECT_NEAR(corpus_bleu({seq("A B C D"), seq("A B C D")}, {{seq("A B C D")}, {seq("A B C E")}}), want, 1e-12);
  // The closest reference length, the shorter on a tie: r = 4 for a prediction of 5 against 4 and 6.
  EXPECT_DOUBLE_EQ(corpus_bleu({seq("A B C D E")}, {{seq("A B C D"), seq("A B C D E F")}}), 1.0);
}

TEST(SequenceMetrics, MismatchedInputsAreErrors) {
  EXPECT_THROW(score_sequences({seq("A")}, {}), ShapeError);
  EXPECT_THROW(score_sequences({seq("A")}, {{}}), ShapeError);
  EXPECT_EQ(score_sequences({}, {}).examples, 0);
}

}  // namespace
}  // namespace multihead
