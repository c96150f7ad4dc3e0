// SPDX-License-Identifier: Apache-2.0
#include "pronunciation_data.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "multihead/core/error.h"
#include "multihead/core/threading.h"
#include "multihead/data/text_datasets.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/train/fit.h"

namespace multihead {

std::vector<std::vector<Hypothesis>> decode_in_batches(EncoderDecoder& model,
                                                       const std::vector<const std::vector<std::int64_t>*>& letters,
                                                       const DecodeOptions& o, std::int64_t batch, StopRequest* stop) {
  std::vector<std::size_t> order(letters.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return letters[a]->size() < letters[b]->size(); });
  std::vector<std::vector<Hypothesis>> out(letters.size());
  for (std::size_t i = 0; i < order.size(); i += static_cast<std::size_t>(batch)) {
    stop_point(stop);
    const std::size_t end = std::min(order.size(), i + static_cast<std::size_t>(batch));
    std::vector<const std::vector<std::int64_t>*> part;
    for (std::size_t k = i; k < end; ++k) part.push_back(letters[order[k]]);
    const LetterBatch b = letter_batch(part);
    std::size_t k = i;
    if (o.beam == 1) {
      for (Hypothesis& h : greedy_decode(model, b.ids, &b.padding, o)) out[order[k++]] = {std::move(h)};
    } else {
      for (auto& hyps : beam_search(model, b.ids, &b.padding, o)) out[order[k++]] = std::move(hyps);
    }
  }
  return out;
}

LetterBatch letter_batch(const std::vector<const std::vector<std::int64_t>*>& words) {
  const std::int64_t B = static_cast<std::int64_t>(words.size());
  std::int64_t S = 1;
  for (const auto* w : words) S = std::max<std::int64_t>(S, static_cast<std::int64_t>(w->size()));
  LetterBatch b{Tensor({B, S}, DType::kI64), Tensor({B, S}, DType::kBool)};
  for (std::int64_t r = 0; r < B; ++r) {
    const auto& ls = *words[static_cast<std::size_t>(r)];
    for (std::int64_t s = 0; s < S; ++s) {
      const bool pad = s >= static_cast<std::int64_t>(ls.size());
      b.ids.data<std::int64_t>()[r * S + s] = pad ? PronunciationVocab::kPad : ls[static_cast<std::size_t>(s)];
      b.padding.data<std::uint8_t>()[r * S + s] = pad;
    }
  }
  return b;
}

namespace {

std::vector<std::int64_t> pairs_of(const PronunciationData& d, const std::vector<std::int64_t>& words) {
  std::vector<std::int64_t> pairs;
  for (auto w : words)
    for (std::size_t v = 0; v < d.phonemes[static_cast<std::size_t>(w)].size(); ++v)
      pairs.push_back(w * PronunciationData::kVariantStride + static_cast<std::int64_t>(v));
  return pairs;
}

}  // namespace

PronunciationData load_data(const PronunciationJob& job, const PronunciationVocab* saved_vocab) {
  check<IoError>(std::filesystem::exists(job.data_path), "{}: CMUdict is not there; run scripts/setup.sh --data first",
                 job.data_path);
  PronunciationData d;
  d.dict = load_cmudict(job.data_path, job.keep_stress);
  const SplitIndices s = split_indices(static_cast<std::int64_t>(d.dict.words.size()), job.validation_fraction,
                                       job.test_fraction, job.train.seed);
  d.train_words = s.train, d.validation_words = s.validation, d.test_words = s.test;
  check<IoError>(!d.train_words.empty() && !d.test_words.empty() && !d.validation_words.empty(),
                 "{}: too few words ({}) for the splits", job.data_path, d.dict.words.size());
  if (saved_vocab) {
    d.vocab = *saved_vocab;
  } else {  // from the training words
    std::set<std::string> letters, phonemes;
    for (auto w : d.train_words) {
      const CmuWord& cw = d.dict.words[static_cast<std::size_t>(w)];
      for (auto& ch : utf8_characters(cw.word)) letters.insert(ch);
      for (const auto& p : cw.pronunciations) phonemes.insert(p.begin(), p.end());
    }
    d.vocab.letters.assign(letters.begin(), letters.end());
    d.vocab.phonemes.assign(phonemes.begin(), phonemes.end());
  }
  d.letters.resize(d.dict.words.size());
  d.phonemes.resize(d.dict.words.size());
  for (std::size_t w = 0; w < d.dict.words.size(); ++w) {
    const CmuWord& cw = d.dict.words[w];
    check<IoError>(static_cast<std::int64_t>(cw.pronunciations.size()) < PronunciationData::kVariantStride,
                   "{}: {} has {} pronunciations", job.data_path, cw.word, cw.pronunciations.size());
    d.letters[w] = d.vocab.encode_word(cw.word);
    for (const auto& p : cw.pronunciations) {
      // A phoneme only outside the training words cannot be predicted: kept
      // out of the vocabulary, it scores as an error in the test.
      std::vector<std::string> known;
      for (const auto& symbol : p)
        if (std::find(d.vocab.phonemes.begin(), d.vocab.phonemes.end(), symbol) != d.vocab.phonemes.end())
          known.push_back(symbol);
      d.phonemes[w].push_back(d.vocab.encode_phonemes(known));
    }
  }
  if (job.train_max_letters > 0) {
    auto longer = [&](std::int64_t w) {
      return static_cast<std::int64_t>(d.letters[static_cast<std::size_t>(w)].size()) > job.train_max_letters;
    };
    std::erase_if(d.train_words, longer);
    std::erase_if(d.validation_words, longer);
    check<IoError>(!d.train_words.empty() && !d.validation_words.empty(), "{}: no training words of at most {} letters",
                   job.data_path, job.train_max_letters);
  }
  d.train_pairs = pairs_of(d, d.train_words);
  d.validation_pairs = pairs_of(d, d.validation_words);
  // Validation batches words of similar length together (less padding).
  std::stable_sort(d.validation_pairs.begin(), d.validation_pairs.end(),
                   [&](std::int64_t a, std::int64_t b) { return d.letters_of(a).size() < d.letters_of(b).size(); });
  return d;
}

Seq2SeqBatch make_batch(const PronunciationData& d, std::span<const std::int64_t> pairs) {
  const std::int64_t B = static_cast<std::int64_t>(pairs.size());
  std::int64_t T = 1;
  std::vector<const std::vector<std::int64_t>*> words;
  for (auto p : pairs) {
    T = std::max<std::int64_t>(T, 1 + static_cast<std::int64_t>(d.phonemes_of(p).size()));
    words.push_back(&d.letters_of(p));
  }
  LetterBatch letters = letter_batch(words);
  Seq2SeqBatch b{std::move(letters.ids), std::move(letters.padding), Tensor({B, T}, DType::kI64),
                 Tensor({B * T}, DType::kI64), 0};
  for (std::int64_t r = 0; r < B; ++r) {
    const auto& ps = d.phonemes_of(pairs[static_cast<std::size_t>(r)]);
    const std::int64_t n = static_cast<std::int64_t>(ps.size());
    for (std::int64_t t = 0; t < T; ++t) {
      b.target_in.data<std::int64_t>()[r * T + t] = t == 0   ? PronunciationVocab::kStart
                                                    : t <= n ? ps[static_cast<std::size_t>(t - 1)]
                                                             : PronunciationVocab::kPad;
      b.targets.data<std::int64_t>()[r * T + t] = t < n    ? ps[static_cast<std::size_t>(t)]
                                                  : t == n ? PronunciationVocab::kEnd
                                                           : kIgnoreIndex;
    }
    b.tokens += n + 1;
  }
  return b;
}

DecodeOptions decode_options(const PronunciationJob& job, std::int64_t beam) {
  DecodeOptions o = job.decode;
  o.beam = beam;
  o.n_best = 1;
  o.start_token = PronunciationVocab::kStart;
  o.end_token = PronunciationVocab::kEnd;
  o.precision = job.train.precision;
  return o;
}

std::vector<TokenSeq> decode_words(EncoderDecoder& model, const PronunciationData& d,
                                   const std::vector<std::int64_t>& words, const DecodeOptions& o, std::int64_t batch,
                                   StopRequest* stop) {
  std::vector<const std::vector<std::int64_t>*> letters;
  for (auto w : words) letters.push_back(&d.letters[static_cast<std::size_t>(w)]);
  std::vector<TokenSeq> out;
  for (const auto& hyps : decode_in_batches(model, letters, o, batch, stop))
    out.push_back(d.vocab.decode_phonemes(hyps.front().tokens));
  return out;
}

std::vector<std::vector<TokenSeq>> references(const PronunciationData& d, const std::vector<std::int64_t>& words) {
  std::vector<std::vector<TokenSeq>> refs;
  for (auto w : words) refs.push_back(d.dict.words[static_cast<std::size_t>(w)].pronunciations);
  return refs;
}
}  // namespace multihead
