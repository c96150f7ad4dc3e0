// SPDX-License-Identifier: Apache-2.0
// The CMU Pronouncing Dictionary loader: variants kept together under their
// word, stress marks kept or dropped, Latin-1 words in UTF-8, and malformed
// lines named.
#include <gtest/gtest.h>

#include "multihead/core/error.h"
#include "multihead/data/cmudict.h"
#include "multihead/data/text_datasets.h"

namespace multihead {
namespace {

using Phones = std::vector<std::string>;

const std::string kSample =
    ";;; a comment\n"
    "A  AH0\n"
    "A(1)  EY1\n"
    "ABANDON  AH0 B AE1 N D AH0 N\r\n"
    "\n"
    "D\xC9J\xC0  D EY2 JH AA1\n"
    "READ  R IY1 D\n"
    "READ(1)  R EH1 D\n";

TEST(CmuDict, KeepsEveryVariantUnderItsWordInFileOrder) {
  const CmuDict d = parse_cmudict(kSample, "sample");
  ASSERT_EQ(d.words.size(), 4u);
  EXPECT_EQ(d.pronunciations(), 6);
  EXPECT_EQ(d.words[0].word, "A");
  EXPECT_EQ(d.words[0].pronunciations, (std::vector<Phones>{{"AH0"}, {"EY1"}}));
  EXPECT_EQ(d.words[1].pronunciations, (std::vector<Phones>{{"AH0", "B", "AE1", "N", "D", "AH0", "N"}}));
  EXPECT_EQ(d.words[2].word, "D\u00C9J\u00C0");  // Latin-1 in the file, UTF-8 here
  EXPECT_EQ(d.words[3].pronunciations.size(), 2u);
  // A file in UTF-8 is read as it is.
  const CmuDict u = parse_cmudict("D\u00C9J\u00C0  D EY2 JH AA1\n", "utf8");
  EXPECT_EQ(u.words[0].word, "D\u00C9J\u00C0");
}

TEST(CmuDict, StressMarksCanBeDropped) {
  const CmuDict d = parse_cmudict(kSample, "sample", false);
  EXPECT_EQ(d.words[1].pronunciations[0], (Phones{"AH", "B", "AE", "N", "D", "AH", "N"}));
  EXPECT_EQ(d.words[3].pronunciations[1], (Phones{"R", "EH", "D"}));
}

TEST(CmuDict, MalformedLinesAreNamed) {
  const std::pair<std::string, std::string> cases[] = {
      {"A  AH0\nB\n", "sample:2: expected a word, then its phonemes: \"B\""},
      {"A  AH0\nB  \n", "sample:2: no phonemes: \"B  \""},
      {"ABLE  EY1 b AH0 L\n", "sample:1: 'b' is not an ARPAbet symbol: \"ABLE  EY1 b AH0 L\""},
      {"ABLE  EY3 B\n", "sample:1: 'EY3' is not an ARPAbet symbol: \"ABLE  EY3 B\""},
      {"A(x)  EY1\n", "sample:1: a variant is written WORD(n): \"A(x)  EY1\""},
      {";;; only comments\n", "sample: no pronunciations"},
  };
  for (const auto& [text, msg] : cases) {
    try {
      parse_cmudict(text, "sample");
      ADD_FAILURE() << "no error for " << text;
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
  }
  EXPECT_THROW(load_cmudict("/nonexistent/dict.txt"), IoError);
}

// Splits are drawn over words, so a word's variants never straddle two splits.
TEST(CmuDict, SplitsByWordKeepVariantsTogether) {
  const CmuDict d = parse_cmudict(kSample, "sample");
  const SplitIndices s = split_indices(static_cast<std::int64_t>(d.words.size()), 0.25, 0.25, 3);
  EXPECT_EQ(s.train.size() + s.validation.size() + s.test.size(), d.words.size());
}

TEST(CmuDict, RegularSpellingsAreDistinctWordsOfOnePhonemeALetter) {
  const CmuDict d = parse_cmudict(regular_spelling_dictionary(120, 2), "regular");
  ASSERT_EQ(d.words.size(), 120u);          // distinct words: no two lines merged
  EXPECT_EQ(d.pronunciations(), 120 + 12);  // every tenth word has two
  for (const CmuWord& w : d.words) {
    EXPECT_GE(w.word.size(), 3u);
    EXPECT_LE(w.word.size(), 5u);
    EXPECT_EQ(w.pronunciations.front().size(), w.word.size()) << w.word;
  }
  EXPECT_EQ(d.words[0].pronunciations.back().back(), "IY0");
  EXPECT_THROW(regular_spelling_dictionary(181), ConfigError);
}

}  // namespace
}  // namespace multihead
