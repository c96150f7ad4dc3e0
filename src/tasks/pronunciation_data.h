// SPDX-License-Identifier: Apache-2.0
// The pronunciation task's data: the dictionary split by word and encoded,
// its teacher-forced batches, and decoding words in length-sorted batches.
// Internal header of src/tasks (pronunciation*.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "multihead/core/tensor.h"
#include "multihead/data/cmudict.h"
#include "multihead/tasks/pronunciation.h"

namespace multihead {

// The dictionary split by word, and every split's pronunciations encoded.
struct PronunciationData {
  CmuDict dict;
  PronunciationVocab vocab;
  std::vector<std::int64_t> train_words, validation_words, test_words;  // indices into dict.words
  std::vector<std::vector<std::int64_t>> letters;                       // per word
  std::vector<std::vector<std::vector<std::int64_t>>> phonemes;         // per word, per variant
  // Training examples: (word, variant) pairs, as word * kVariantStride + variant.
  std::vector<std::int64_t> train_pairs, validation_pairs;
  static constexpr std::int64_t kVariantStride = 64;
  const std::vector<std::int64_t>& letters_of(std::int64_t pair) const {
    return letters[static_cast<std::size_t>(pair / kVariantStride)];
  }
  const std::vector<std::int64_t>& phonemes_of(std::int64_t pair) const {
    return phonemes[static_cast<std::size_t>(pair / kVariantStride)][static_cast<std::size_t>(pair % kVariantStride)];
  }
  std::int64_t pronunciations(const std::vector<std::int64_t>& words) const {
    std::int64_t n = 0;
    for (auto w : words) n += static_cast<std::int64_t>(dict.words[static_cast<std::size_t>(w)].pronunciations.size());
    return n;
  }
};

// The dictionary at job.data_path, split (by job.train.seed) and encoded with
// saved_vocab, or with a vocabulary of the training words when it is null.
PronunciationData load_data(const PronunciationJob& job, const PronunciationVocab* saved_vocab);

// A teacher-forced batch: source letters (B, S) with padding, the decoder's
// input (B, T) = start + phonemes, and targets (B T) = phonemes + end, the
// padding ignored.
struct Seq2SeqBatch {
  Tensor source, padding, target_in, targets;
  std::int64_t tokens = 0;
};

Seq2SeqBatch make_batch(const PronunciationData& d, std::span<const std::int64_t> pairs);

// The job's decoding settings with this beam, one best each.
DecodeOptions decode_options(const PronunciationJob& job, std::int64_t beam);

// Each word's hypotheses (letter ids; options.n_best of them, or the greedy
// one when the beam is 1), decoded `batch` words at a time, words of similar
// length together (a batch decodes until its longest word is done).
std::vector<std::vector<Hypothesis>> decode_in_batches(EncoderDecoder& model,
                                                       const std::vector<const std::vector<std::int64_t>*>& letters,
                                                       const DecodeOptions& o, std::int64_t batch,
                                                       StopRequest* stop = nullptr);

// The best pronunciation of each word, decoded in batches.
std::vector<TokenSeq> decode_words(EncoderDecoder& model, const PronunciationData& d,
                                   const std::vector<std::int64_t>& words, const DecodeOptions& o, std::int64_t batch,
                                   StopRequest* stop = nullptr);

// Each word's pronunciations in the dictionary.
std::vector<std::vector<TokenSeq>> references(const PronunciationData& d, const std::vector<std::int64_t>& words);

}  // namespace multihead
