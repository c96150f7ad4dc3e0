// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/pronunciation.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "multihead/data/cmudict.h"
#include "multihead/data/text_datasets.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/kernels/cross_entropy.h"
#include "multihead/nn/state_dict.h"
#include "multihead/report/plots.h"
#include "multihead/report/run_report.h"
#include "multihead/tasks/attention_explorer.h"
#include "multihead/tasks/inspect.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/fit.h"
#include "pronunciation_data.h"

namespace multihead {

using json = nlohmann::json;

namespace {

class PronunciationTask final : public TrainingTask {
 public:
  PronunciationTask(EncoderDecoder& model, const PronunciationJob& job, const PronunciationData& data)
      : model_(model), job_(job), data_(data) {}

  MicroBatchLoss micro_step(std::span<const std::int64_t> pairs, const ForwardContext& ctx,
                            double grad_scale) override {
    Seq2SeqBatch b = make_batch(data_, pairs);
    Tensor logits = model_.forward(b.source, &b.padding, b.target_in, ctx);
    return {cross_entropy_backward(model_, logits, b.targets.data<std::int64_t>(), grad_scale, job_.label_smoothing),
            b.tokens};
  }

  // Loss per phoneme (teacher forced, no smoothing) and greedy word accuracy.
  Validation validate() override {
    double loss = 0;
    std::int64_t tokens = 0;
    const ForwardContext ctx = eval_context(job_.train.precision);
    for (std::size_t i = 0; i < data_.validation_pairs.size(); i += static_cast<std::size_t>(job_.eval_batch)) {
      const std::span<const std::int64_t> part(
          data_.validation_pairs.data() + i,
          std::min(data_.validation_pairs.size() - i, static_cast<std::size_t>(job_.eval_batch)));
      Seq2SeqBatch b = make_batch(data_, part);
      Tensor logits = model_.forward(b.source, &b.padding, b.target_in, ctx);
      model_.release_saved();
      const CrossEntropyResult r =
          cross_entropy<float>(nullptr, logits.f32(), b.targets.data<std::int64_t>(), b.targets.numel(), logits.dim(2));
      loss += r.loss * static_cast<double>(r.count);
      tokens += r.count;
    }
    std::vector<std::int64_t> words = data_.validation_words;
    if (job_.validation_words > 0 && static_cast<std::int64_t>(words.size()) > job_.validation_words)
      words.resize(static_cast<std::size_t>(job_.validation_words));
    const SequenceScores s = score_sequences(
        decode_words(model_, data_, words, decode_options(job_, 1), job_.eval_batch), references(data_, words));
    return {tokens ? loss / static_cast<double>(tokens) : 0.0, 1.0 - s.word_error_rate, s.examples};
  }

 private:
  EncoderDecoder& model_;
  const PronunciationJob& job_;
  const PronunciationData& data_;
};

// Word-length buckets of the test: letters 1-4, 5-7, 8-10, 11-14, 15 and more.
const std::vector<std::pair<std::int64_t, std::int64_t>> kLengthBuckets = {
    {1, 4}, {5, 7}, {8, 10}, {11, 14}, {15, 1000}};

struct TestOutcome {
  SequenceScores overall, longer;
  std::vector<LengthScores> by_length;
  std::vector<TokenSeq> predictions;
  double seconds = 0;
};

TestOutcome test_model(EncoderDecoder& model, const PronunciationJob& job, const PronunciationData& d,
                       StopRequest* stop = nullptr) {
  TestOutcome t;
  const auto start = std::chrono::steady_clock::now();
  t.predictions = decode_words(model, d, d.test_words, decode_options(job, job.decode.beam), job.eval_batch, stop);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto refs = references(d, d.test_words);
  t.overall = score_sequences(t.predictions, refs);
  for (const auto& [lo, hi] : kLengthBuckets) {
    std::vector<TokenSeq> p;
    std::vector<std::vector<TokenSeq>> r;
    for (std::size_t i = 0; i < d.test_words.size(); ++i) {
      const auto n = static_cast<std::int64_t>(d.letters[static_cast<std::size_t>(d.test_words[i])].size());
      if (n >= lo && n <= hi) p.push_back(t.predictions[i]), r.push_back(refs[i]);
    }
    if (!p.empty()) t.by_length.push_back({lo, hi, score_sequences(p, r)});
  }
  if (job.train_max_letters > 0) {
    std::vector<TokenSeq> p;
    std::vector<std::vector<TokenSeq>> r;
    for (std::size_t i = 0; i < d.test_words.size(); ++i)
      if (static_cast<std::int64_t>(d.letters[static_cast<std::size_t>(d.test_words[i])].size()) >
          job.train_max_letters)
        p.push_back(t.predictions[i]), r.push_back(refs[i]);
    if (!p.empty()) t.longer = score_sequences(p, r);
  }
  return t;
}

std::string scores_line(const SequenceScores& s) {
  return fmt::format("WER {:.2f}%, PER {:.2f}%, BLEU {:.2f}", 100 * s.word_error_rate, 100 * s.phoneme_error_rate,
                     100 * s.bleu);
}

std::string bucket_name(const LengthScores& b) {
  return b.max_len >= 1000 ? fmt::format("{}+", b.min_len) : fmt::format("{}-{}", b.min_len, b.max_len);
}

// What train and eval print of the test: the scores, by length, and on
// words longer than any trained on.
std::vector<std::string> test_lines(const SequenceScores& test, const std::vector<LengthScores>& by_length,
                                    const SequenceScores& longer) {
  std::vector<std::string> lines = {fmt::format("test: {} ({} words)", scores_line(test), test.examples)};
  for (const auto& b : by_length)
    lines.push_back(
        fmt::format("  {} letters ({} words): {}", bucket_name(b), b.scores.examples, scores_line(b.scores)));
  if (longer.examples > 0)
    lines.push_back(
        fmt::format("  longer than every training word ({} words): {}", longer.examples, scores_line(longer)));
  return lines;
}

std::string join(const TokenSeq& s) { return fmt::format("{}", fmt::join(s, " ")); }

// The report's sections: scores by length, the worst errors, the
// cross-attention of the first test words.
std::string report_sections(EncoderDecoder& model, const PronunciationJob& job, const PronunciationData& d,
                            const TestOutcome& t, RunDir& run) {
  std::string s = "## Test by word length\n\n| letters | words | WER | PER | BLEU |\n|---|---|---|---|---|\n";
  for (const auto& b : t.by_length)
    s += fmt::format("| {} | {} | {:.2f}% | {:.2f}% | {:.2f} |\n", bucket_name(b), b.scores.examples,
                     100 * b.scores.word_error_rate, 100 * b.scores.phoneme_error_rate, 100 * b.scores.bleu);
  // The worst: the largest edit distance to the nearest reference.
  std::vector<std::pair<std::int64_t, std::size_t>> errors;
  for (std::size_t i = 0; i < d.test_words.size(); ++i) {
    std::int64_t best = 1 << 30;
    for (const auto& r : d.dict.words[static_cast<std::size_t>(d.test_words[i])].pronunciations)
      best = std::min(best, edit_distance(t.predictions[i], r));
    if (best > 0) errors.push_back({best, i});
  }
  std::stable_sort(errors.begin(), errors.end(), [](auto& a, auto& b) { return a.first > b.first; });
  s += "\n## The worst errors\n\n| word | predicted | reference(s) | edits |\n|---|---|---|---|\n";
  for (std::size_t k = 0; k < std::min<std::size_t>(errors.size(), 15); ++k) {
    const auto i = errors[k].second;
    const CmuWord& w = d.dict.words[static_cast<std::size_t>(d.test_words[i])];
    std::vector<std::string> refs;
    for (const auto& r : w.pronunciations) refs.push_back(join(r));
    s +=
        fmt::format("| {} | {} | {} | {} |\n", w.word, join(t.predictions[i]), fmt::join(refs, " / "), errors[k].first);
  }
  // The decoder's attention while it reads the reference of the first test
  // word; the last layer's cross-attention drawn: which letters each phoneme
  // attends to.
  const CmuWord& cw = d.dict.words[static_cast<std::size_t>(d.test_words.front())];
  DecoderAttentionMaps decoder =
      decoder_attention_maps(model, d.vocab, d.vocab.encode_word(cw.word), utf8_characters(cw.word),
                             d.vocab.encode_phonemes(cw.pronunciations.front()), job.train.precision);
  const AttentionMaps& cross = decoder.cross;
  s += fmt::format(
      "\n## Cross-attention\n\nThe last decoder layer's cross-attention for \"{}\" ({}), the decoder "
      "reading the reference: rows are the phonemes read so far (each row predicts the next), "
      "columns the letters. Colours run from 0 to each head's largest weight.\n\n",
      cw.word, join(cw.pronunciations.front()));
  {
    AttentionMaps encoder =
        encoder_self_attention(model, d.vocab.encode_word(cw.word), utf8_characters(cw.word), job.train.precision);
    s +=
        report_explorer(run, {job.report_title,
                              fmt::format("\"{}\" read as its reference, {}", cw.word, join(cw.pronunciations.front())),
                              {std::move(encoder), cross, std::move(decoder.self)}});
  }
  const std::int64_t last = cross.first_layer + cross.layers - 1;
  for (std::int64_t h = 0; h < std::min(cross.heads, kReportHeatmaps); ++h) {
    const std::string name = fmt::format("cross_attention_head{}.png", h);
    const float* m = cross.map(last, h);
    heatmap_png(run.file("plots/" + name), fmt::format("{}: head {}", cw.word, h),
                std::vector<float>(m, m + cross.T * cross.S), cross.T, cross.S, cross.tokens, cross.keys);
    s += fmt::format("![{0}](plots/{0})\n", name);
  }
  return s;
}

}  // namespace

AttentionMaps encoder_self_attention(EncoderDecoder& model, const std::vector<std::int64_t>& letter_ids,
                                     std::vector<std::string> letters, Precision precision) {
  const LetterBatch b = letter_batch({&letter_ids});
  model.encoder().set_capture_weights(true);
  model.encode(b.ids, &b.padding, precision);
  model.encoder().set_capture_weights(false);
  AttentionMaps maps = captured_attention(model.encoder(), 0, std::move(letters));
  maps.name = "encoder self-attention";
  return maps;
}

DecoderAttentionMaps decoder_attention_maps(EncoderDecoder& model, const PronunciationVocab& vocab,
                                            const std::vector<std::int64_t>& letter_ids,
                                            std::vector<std::string> letters,
                                            const std::vector<std::int64_t>& phoneme_ids, Precision precision) {
  const LetterBatch b = letter_batch({&letter_ids});
  TransformerDecoder& decoder = model.decoder();
  DecoderAttentionMaps out;
  AttentionMaps& cross = out.cross;
  cross.name = "cross-attention";
  cross.tokens = {"<s>"};
  for (const std::string& p : vocab.decode_phonemes(phoneme_ids)) cross.tokens.push_back(p);
  cross.keys = std::move(letters);
  cross.layers = decoder.num_layers();
  cross.heads = model.config().model.layer.nhead;
  cross.T = 1 + static_cast<std::int64_t>(phoneme_ids.size());
  cross.S = b.ids.dim(1);
  check<ShapeError>(static_cast<std::int64_t>(cross.keys.size()) == cross.S, "{} letter labels for {} letters",
                    cross.keys.size(), cross.S);
  AttentionMaps& self = out.self;
  self.name = "decoder self-attention";
  self.tokens = self.keys = cross.tokens;
  self.layers = cross.layers, self.heads = cross.heads, self.T = self.S = cross.T;
  self.causal = true;
  const std::int64_t L = cross.layers, H = cross.heads, T = cross.T;
  cross.weights.resize(static_cast<std::size_t>(L * H * T * cross.S));
  self.weights.assign(static_cast<std::size_t>(L * H * T * T), 0.0f);  // keys after a row stay 0
  decoder.set_capture_weights(true);
  const EncodedMemory memory = model.encode(b.ids, &b.padding, precision);
  std::vector<KvCache> caches;
  for (std::int64_t step = 0; step < T; ++step) {
    const std::int64_t id = step == 0 ? PronunciationVocab::kStart : phoneme_ids[static_cast<std::size_t>(step - 1)];
    model.decode_step(Tensor::from_i64({1, 1}, std::vector<std::int64_t>{id}), caches, memory, T, precision);
    for (std::int64_t l = 0; l < L; ++l) {
      const Tensor& wc = decoder.layer(l).cross_attention_weights();  // (1, H, 1, S)
      const Tensor& ws = decoder.layer(l).self_attention_weights();   // (1, H, 1, step + 1)
      for (std::int64_t h = 0; h < H; ++h) {
        std::copy_n(wc.f32() + h * cross.S, cross.S, cross.weights.begin() + ((l * H + h) * T + step) * cross.S);
        std::copy_n(ws.f32() + h * (step + 1), step + 1, self.weights.begin() + ((l * H + h) * T + step) * T);
      }
    }
  }
  decoder.set_capture_weights(false);
  return out;
}

PronunciationResult run_job(const PronunciationJob& job_in, RunDir& run, Progress& progress, StopRequest* stop) {
  PronunciationJob job = job_in;
  const PronunciationData data = load_data(job, nullptr);
  PronunciationResult r;
  r.train_words = static_cast<std::int64_t>(data.train_words.size());
  r.validation_words = static_cast<std::int64_t>(data.validation_words.size());
  r.test_words = static_cast<std::int64_t>(data.test_words.size());
  r.train_pronunciations = data.pronunciations(data.train_words);
  r.validation_pronunciations = data.pronunciations(data.validation_words);
  r.test_pronunciations = data.pronunciations(data.test_words);
  progress.log(
      fmt::format("data: {} words, {} pronunciations; train {} / {}, validation {} / {}, test {} / {}; "
                  "{} letters, {} phonemes",
                  data.dict.words.size(), data.dict.pronunciations(), r.train_words, r.train_pronunciations,
                  r.validation_words, r.validation_pronunciations, r.test_words, r.test_pronunciations,
                  data.vocab.letters.size(), data.vocab.phonemes.size()));
  run.write_text("vocab.json", data.vocab.to_json().dump(1));
  job.model.source_vocab = 2 + static_cast<std::int64_t>(data.vocab.letters.size());
  job.model.model.vocab_size = 3 + static_cast<std::int64_t>(data.vocab.phonemes.size());
  std::int64_t longest = 0;
  for (std::size_t w = 0; w < data.letters.size(); ++w) {
    longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(data.letters[w].size()));
    for (const auto& p : data.phonemes[w])
      longest = std::max<std::int64_t>(longest, 1 + static_cast<std::int64_t>(p.size()));
  }
  job.model.model.max_len = at_least_max_len(job.model.model.max_len, std::max(longest, job.decode.max_len), progress);
  job.train.set_steps(job.budget.steps(static_cast<std::int64_t>(data.train_pairs.size()), job.train.batch));
  job.validate("the job");

  ModelToTrain<EncoderDecoder> m(job.model, job.train, progress);
  PronunciationTask task(m.model, job, data);
  FitPlan plan;
  plan.on_curves = live_curves(run);  // plots/*.png redrawn as it trains
  plan.epoch_examples = data.train_pairs;
  // Both sides pad to the batch's longest word or pronunciation.
  for (auto p : data.train_pairs)
    plan.example_lengths.push_back(std::max(static_cast<std::int64_t>(data.letters_of(p).size()),
                                            1 + static_cast<std::int64_t>(data.phonemes_of(p).size())));
  plan.unit = "phonemes/s";
  plan.throughput_key = "phonemes_per_s";
  plan.loss_unit = " nats/phoneme";
  plan.eval_every = job.eval_every;
  const FitResult fitted = fit(task, m.store, job.train, plan, described_config(job), run, progress, stop);
  r.steps = fitted.steps;
  r.skipped_steps = fitted.skipped_steps;
  r.train_seconds = fitted.total_seconds;
  r.trained = fitted.steps_and_time();
  r.ms_per_step = 1e3 * fitted.seconds / static_cast<double>(std::max<std::int64_t>(1, r.steps - fitted.first_step));
  if (fitted.validation) {
    check_finite_result("the validation loss", fitted.validation->loss);
    r.validation_word_accuracy = fitted.validation->accuracy.value_or(0);
  }
  for (std::size_t i = 0; i < fitted.curves.eval_step.size(); ++i)
    r.validation_curve.emplace_back(static_cast<std::int64_t>(fitted.curves.eval_step[i]),
                                    fitted.curves.eval_accuracy[i]);

  const TestOutcome t = test_model(m.model, job, data, stop);
  r.test = t.overall;
  r.longer_than_training = t.longer;
  r.by_length = t.by_length;
  r.decode_seconds = t.seconds;
  json by_length = json::array();
  for (const auto& b : t.by_length)
    by_length.push_back({{"letters", bucket_name(b)},
                         {"words", b.scores.examples},
                         {"wer", b.scores.word_error_rate},
                         {"per", b.scores.phoneme_error_rate},
                         {"bleu", b.scores.bleu}});
  run.append_metrics({{"step", r.steps},
                      {"test_wer", r.test.word_error_rate},
                      {"test_per", r.test.phoneme_error_rate},
                      {"test_bleu", r.test.bleu}});
  run.write_results({{"test_wer", r.test.word_error_rate},
                     {"test_per", r.test.phoneme_error_rate},
                     {"test_bleu", r.test.bleu},
                     {"test_words", r.test_words},
                     {"by_length", by_length},
                     {"validation_word_accuracy", r.validation_word_accuracy},
                     {"longer_than_training",
                      {{"words", r.longer_than_training.examples},
                       {"wer", r.longer_than_training.word_error_rate},
                       {"per", r.longer_than_training.phoneme_error_rate}}},
                     {"train_seconds", r.train_seconds},
                     {"decode_seconds", r.decode_seconds},
                     {"steps", r.steps},
                     {"skipped_steps", r.skipped_steps}});
  RunReport report{job.report_title, {}, ""};
  report.rows = {
      {"test", fmt::format("{} ({} words, beam {}, length penalty {})", scores_line(r.test), r.test_words,
                           job.decode.beam, job.decode.length_penalty)},
      {"validation word accuracy", fmt::format("{:.2f}% (greedy)", 100 * r.validation_word_accuracy)},
      {"training", fitted.summary()},
      {"model", job.model.describe(m.store.numel())},
      {"data",
       fmt::format("{}: train {} words ({} pronunciations), validation {} ({}), test {} ({}); stress {}", job.data_path,
                   r.train_words, r.train_pronunciations, r.validation_words, r.validation_pronunciations, r.test_words,
                   r.test_pronunciations, job.keep_stress ? "kept" : "dropped") +
           (job.train_max_letters > 0 ? fmt::format("; trained on words of at most {} letters", job.train_max_letters)
                                      : std::string())}};
  report.sections = report_sections(m.model, job, data, t, run);
  write_run_report(run, fitted, report);
  return r;
}

std::vector<std::string> summary_lines(const PronunciationResult& r) {
  std::vector<std::string> lines = test_lines(r.test, r.by_length, r.longer_than_training);
  lines.push_back(fmt::format("training: {}; test decoding {:.1f} s", r.trained, r.decode_seconds));
  return lines;
}

PronunciationVocab load_run_vocab(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / "vocab.json").string();
  return PronunciationVocab::from_json(ConfigReader::parse(read_file(path), path), path);
}

TestTexts test_texts(const PronunciationJob& job, const std::string& run_dir) {
  const PronunciationVocab vocab = load_run_vocab(run_dir);
  const PronunciationData data = load_data(job, &vocab);
  TestTexts out;
  for (std::int64_t w : data.test_words) {
    const CmuWord& word = data.dict.words[static_cast<std::size_t>(w)];
    out.inputs.push_back(word.word);
    out.answers.push_back(fmt::format("{}", fmt::join(word.pronunciations.front(), " ")));
  }
  return out;
}

namespace {

PronunciationJob with_vocab_sizes(PronunciationJob job, const PronunciationVocab& vocab) {
  job.model.source_vocab = 2 + static_cast<std::int64_t>(vocab.letters.size());
  job.model.model.vocab_size = 3 + static_cast<std::int64_t>(vocab.phonemes.size());
  return job;
}

}  // namespace

LoadedPronouncer::LoadedPronouncer(const PronunciationJob& job_in, const std::string& run_dir)
    : vocab(load_run_vocab(run_dir)),
      job(with_vocab_sizes(job_in, vocab)),
      trained(job.model, run_dir, job.train.precision) {}

std::vector<std::vector<Pronounced>> pronounce_words(LoadedPronouncer& run, const std::vector<std::string>& words,
                                                     DecodeOptions o) {
  o.start_token = PronunciationVocab::kStart;
  o.end_token = PronunciationVocab::kEnd;
  o.validate();  // before any word, so that no words checks the options alone
  const std::int64_t longest = run.job.model.model.max_len;
  std::vector<std::vector<std::int64_t>> ids;
  for (const std::string& word : words) {
    check_utf8(word, "a word");
    ids.push_back(run.vocab.encode_word(cmudict_spelling(word)));
    check<ConfigError>(!ids.back().empty(), "a word to pronounce is empty");
    check<ConfigError>(static_cast<std::int64_t>(ids.back().size()) <= longest,
                       "'{}' has {} letters; the model reads at most {}", word, ids.back().size(), longest);
  }
  std::vector<const std::vector<std::int64_t>*> letters;
  for (const auto& w : ids) letters.push_back(&w);
  std::vector<std::vector<Pronounced>> out;
  for (const auto& hyps : decode_in_batches(run.model(), letters, o, run.job.eval_batch)) {
    std::vector<Pronounced> p;
    for (const Hypothesis& h : hyps) p.push_back({run.vocab.decode_phonemes(h.tokens), h.log_prob, h.score, h.ended});
    out.push_back(std::move(p));
  }
  return out;
}

ModelSample sample_model(const PronunciationJob& job, const std::string& run_dir, const ModelSampleSettings& settings) {
  LoadedPronouncer run(job, run_dir);
  const PronunciationData data = load_data(job, &run.vocab);
  // The first test words' first pronunciations, teacher forced.
  std::vector<std::int64_t> pairs;
  for (std::size_t i = 0; i < data.test_words.size() && static_cast<std::int64_t>(pairs.size()) < settings.examples;
       ++i)
    pairs.push_back(data.test_words[i] * PronunciationData::kVariantStride);
  Seq2SeqBatch b = make_batch(data, pairs);
  Tensor logits = run.model().forward(b.source, &b.padding, b.target_in, settings.context());
  run.model().release_saved();
  return std::move(ModelSample(std::move(logits))
                       .input("source", std::move(b.source))
                       .input("source_padding", std::move(b.padding))
                       .input("target", std::move(b.target_in)));
}

std::vector<std::string> evaluate_run(const PronunciationJob& job, const std::string& run_dir) {
  LoadedPronouncer run(job, run_dir);
  const PronunciationData data = load_data(job, &run.vocab);
  const TestOutcome t = test_model(run.model(), job, data);
  return test_lines(t.overall, t.by_length, t.longer);
}

}  // namespace multihead
