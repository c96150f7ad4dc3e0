// SPDX-License-Identifier: Apache-2.0
#include "multihead/tasks/trained_run.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <limits>

#include <fmt/ranges.h>

#include "multihead/core/error.h"
#include "multihead/data/batching.h"
#include "multihead/data/text_datasets.h"
#include "multihead/io/atomic_file.h"
#include "multihead/io/json_config.h"
#include "multihead/nn/state_dict.h"
#include "multihead/tasks/answers.h"
#include "multihead/tasks/classification_report.h"
#include "multihead/tasks/embedding.h"
#include "multihead/tasks/jobs.h"
#include "multihead/tasks/loaded_run.h"
#include "multihead/train/checkpoint.h"
#include "multihead/train/fit.h"
#include "multihead/train/hf_checkpoint.h"
#include "multihead/train/run_dir.h"

namespace multihead {

namespace fs = std::filesystem;

namespace {

// The tokens of a text, checked: valid UTF-8, something besides white space
// and control characters (NUL alone is no more a text than a space), and at
// least one token; the first max_tokens of them (the rest is not read).
std::vector<std::int64_t> encode_text(const Tokenizer& tok, const std::string& text, const char* what,
                                      std::size_t max_tokens = std::numeric_limits<std::size_t>::max()) {
  check_utf8(text, what);
  const bool blank = std::all_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
  check<ConfigError>(!blank, "{} has no text (only white space or control characters)", what);
  std::vector<std::int64_t> ids = tok.encode_prefix(text, max_tokens);
  check<ConfigError>(!ids.empty(), "{} has no tokens", what);
  return ids;
}

// The padded tokens of a batch of inputs answered together. Batches this
// small keep a layer's activations in the caches: measured on the spam
// preset's model (d_model 128) over its 1,209 test texts on two Zen 5 cores,
// 4,096 tokens a batch took 2.4 s and 180 MB, 24,576 (64 texts of 384
// tokens) 3.6 s and 510 MB, 512 3.1 s.
constexpr std::int64_t kAnswerBatchTokens = 4096;

// What every loaded run of a token model has: its job, its tokenizer and
// its model with the last checkpoint's weights (tasks/loaded_run.h).
template <typename Job, typename Model>
class TokenModelRun : public TrainedRun {
 public:
  const char* task() const override { return Job::kTask; }

 protected:
  TokenModelRun(const Job& job, const std::string& dir, Precision precision)
      : loaded_(job, dir, precision), precision_(precision) {}

  LoadedRun<Job, Model> loaded_;
  Precision precision_;
  const Job& job_ = loaded_.job;
  const std::unique_ptr<Tokenizer>& tok_ = loaded_.tokenizer;
  Model& model_ = loaded_.model();
};

class ClassifierRun final : public TokenModelRun<TextClassificationJob, SequenceClassifier> {
 public:
  ClassifierRun(const TextClassificationJob& job, const std::string& dir, Precision precision)
      : TokenModelRun(job, dir, precision) {
    if (is_hf_checkpoint(dir)) {
      const HfCheckpoint c = read_hf_checkpoint(dir);
      if (!c.has_head)
        no_head_ = fmt::format(
            "{} is an encoder ({}) with no classification head: embed with it, or fine-tune it "
            "first (multihead train --init-from {})",
            dir, c.architecture, dir);
    }
    pooling_ = embedding_pooling(dir, job_.model.pooling);
    labels_ = run_class_names(dir, job_.model.num_classes, &warnings_);
  }

  std::vector<std::string> labels() const override { return labels_; }

  std::vector<std::string> request_fields() const override { return {"threshold"}; }

  void check_settings(const AnswerSettings& s) override {
    TrainedRun::check_settings(s);
    if (s.threshold == -1) return;
    check<ConfigError>(s.threshold >= 0 && s.threshold <= 1, "--threshold must be in [0, 1], got {}", s.threshold);
    check<ConfigError>(labels_.size() == 2, "--threshold applies to two-class classifiers; this one has {} classes",
                       labels_.size());
  }

  std::vector<nlohmann::json> answer(const std::vector<std::string>& inputs, const AnswerSettings& s) override {
    // Before any input is read: an encoder without a head classifies nothing (it embeds; serve answers /v1/embed).
    check<ConfigError>(no_head_.empty(), "{}", no_head_);
    return batched_answers(
        inputs,
        [&](const std::vector<std::string>& texts) {
          std::vector<Prediction> got = predict(texts);
          std::vector<nlohmann::json> out;
          for (std::size_t i = 0; i < texts.size(); ++i) {
            // The positive (second) class from the threshold up, as a deployer sets it for a precision.
            if (s.threshold != -1) got[i].label = labels_[got[i].probabilities[1] >= s.threshold ? 1 : 0];
            out.push_back(classified_answer(texts[i], got[i], labels_));
            if (s.threshold != -1) out.back()["threshold"] = s.threshold;
          }
          return out;
        },
        [&](const std::string& text) { predict({text}); });
  }

  // In batches of similar length, at most kAnswerBatchTokens padded tokens
  // each (data/batching.h): however many texts and however long, the
  // activations stay those of one small batch.
  std::vector<Prediction> predict(const std::vector<std::string>& texts) override {
    check<ConfigError>(no_head_.empty(), "{}", no_head_);
    std::vector<Prediction> out(texts.size());
    const std::vector<bool> cut = run_batches(texts, [&](const std::vector<std::int64_t>& rows, const Tensor& logits) {
      const std::int64_t C = logits.dim(1);
      for (std::int64_t r = 0; r < logits.dim(0); ++r) {
        const float* z = logits.f32() + r * C;
        Prediction& p = out[static_cast<std::size_t>(rows[static_cast<std::size_t>(r)])];
        append_probabilities(p.probabilities, z, C);
        p.label = labels_[static_cast<std::size_t>(std::max_element(z, z + C) - z)];
      }
    });
    for (std::size_t i = 0; i < out.size(); ++i) out[i].truncated = cut[i];
    return out;
  }

  std::vector<std::vector<float>> embed(const std::vector<std::string>& texts) override {
    std::vector<std::vector<float>> out(texts.size());
    run_batches(texts, [&](const std::vector<std::int64_t>& rows, const Tensor&) {
      std::vector<std::vector<float>> v = pool_embeddings(model_.hidden(), *padding_, pooling_);
      for (std::size_t r = 0; r < rows.size(); ++r) out[static_cast<std::size_t>(rows[r])] = std::move(v[r]);
    });
    return out;
  }

  void describe(nlohmann::json& model) const override {
    if (no_head_.empty()) model["labels"] = labels_;
    model["embedding"] = pooling_.describe();
  }

 private:
  // The texts through the model in batches of similar length, at most
  // kAnswerBatchTokens padded tokens each (data/batching.h): however many
  // texts and however long, the activations stay those of one small batch.
  // use(rows, logits) sees each batch (rows: its texts' indices; the
  // encoder's states in model_.hidden(), the padding in *padding_). Returns
  // which texts had more tokens than the model reads (their first were read).
  template <typename Use>
  std::vector<bool> run_batches(const std::vector<std::string>& texts, Use&& use) {
    // One token past what the model reads tells a text that was cut.
    const TokenFrame frame = tok_->frame();
    const auto framing = frame.before.size() + frame.after.size();
    const auto room = static_cast<std::size_t>(job_.max_len) - framing;
    std::vector<std::vector<std::int64_t>> ids = encode_texts(texts, room + 1);
    std::vector<bool> cut(texts.size(), false);
    std::vector<std::int64_t> lengths;  // as the model reads them, framed ([CLS] first)
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i].size() > room) ids[i].resize(room), cut[i] = true;
      lengths.push_back(static_cast<std::int64_t>(ids[i].size() + framing));
    }
    const ForwardContext ctx = eval_context(precision_);
    for (const auto& batch : length_sorted_batches(lengths, kAnswerBatchTokens)) {
      std::vector<const std::vector<std::int64_t>*> part;
      for (const std::int64_t i : batch) part.push_back(&ids[static_cast<std::size_t>(i)]);
      TokenBatch tb = make_token_batch(part, std::vector<std::int64_t>(part.size(), 0), job_.max_len, frame);
      padding_ = &tb.padding;
      // A batch with no padding (one text, or texts of one length) masks no key: the model
      // takes no mask then, the same numbers without the masked kernels' work.
      const bool padded = tb.tokens < tb.ids.numel();
      use(batch, model_.forward(tb.ids, padded ? &tb.padding : nullptr, ctx));
      padding_ = nullptr;
      model_.release_saved();
    }
    return cut;
  }

 public:
  // The texts' first max_tokens tokens each (encode_text), on every thread:
  // the tokenizers' encode is const and shares nothing between calls. A bad
  // text throws the error of the first one, as an InputError naming it.
  std::vector<std::vector<std::int64_t>> encode_texts(const std::vector<std::string>& texts, std::size_t max_tokens) {
    const auto n = static_cast<std::int64_t>(texts.size());
    std::vector<std::vector<std::int64_t>> ids(texts.size());
    std::vector<std::exception_ptr> failed(texts.size());
#pragma omp parallel for schedule(dynamic, 4) if (n > 1)
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      try {
        ids[k] = encode_text(*tok_, texts[k], "a text to classify", max_tokens);
      } catch (...) {
        failed[k] = std::current_exception();
      }
    }
    for (std::size_t k = 0; k < failed.size(); ++k) {
      if (!failed[k]) continue;
      try {
        std::rethrow_exception(failed[k]);
      } catch (const ConfigError& e) {
        throw InputError(k, e.what());  // naming the text that failed
      }
    }
    return ids;
  }

  AttentionMaps attention(const std::string& text, std::int64_t max_tokens) override {
    return attention(text, max_tokens, false);
  }

  // With each head's ablation effect on the prediction.
  std::vector<AttentionMaps> attention_views(const std::string& text, std::int64_t max_tokens) override {
    return {attention(text, max_tokens, true)};
  }

 private:
  std::vector<std::string> labels_;
  std::string no_head_;  // why this run cannot classify (an encoder's checkpoint), or ""
  EmbeddingPooling pooling_;
  const Tensor* padding_ = nullptr;  // the batch's, while run_batches runs

  AttentionMaps attention(const std::string& text, std::int64_t max_tokens, bool ablate) {
    check<ConfigError>(max_tokens > 1, "max tokens must be at least 2, got {}", max_tokens);
    // An encoder without a head predicts nothing: its maps are the attention alone.
    AttentionMaps maps =
        classifier_attention(model_, *tok_, encode_text(*tok_, text, "the text"), std::min(max_tokens, job_.max_len),
                             labels_, precision_, ablate && no_head_.empty());
    if (!no_head_.empty()) maps.prediction.clear();
    return maps;
  }
};

class LanguageModelRun final : public TokenModelRun<LanguageModelJob, LanguageModel> {
 public:
  LanguageModelRun(const LanguageModelJob& job, const std::string& dir, Precision precision)
      : TokenModelRun(job, dir, precision) {}

  std::vector<std::string> request_fields() const override {
    return {"tokens", "temperature", "top_k", "top_p", "seed"};
  }

  void check_settings(const AnswerSettings& s) override {
    check_no_pronunciation_settings(s);
    check_no_threshold(s);
    check<ConfigError>(s.tokens >= 0 && s.tokens <= kMaxGeneratedTokens, "--tokens must be in [0, {}], got {}",
                       kMaxGeneratedTokens, s.tokens);
    check<ConfigError>(s.sampling.temperature >= 0, "--temperature must be >= 0, got {}", s.sampling.temperature);
    check<ConfigError>(s.sampling.top_p > 0 && s.sampling.top_p <= 1, "--top-p must be in (0, 1], got {}",
                       s.sampling.top_p);
    check<ConfigError>(s.sampling.top_k >= 0, "--top-k must be >= 0, got {}", s.sampling.top_k);
  }

  // One input at a time, each sampled from the settings' seed.
  std::vector<nlohmann::json> answer(const std::vector<std::string>& inputs, const AnswerSettings& s) override {
    std::vector<nlohmann::json> out;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      try {
        out.push_back({{"input", inputs[i]}, {"output", generate(inputs[i], s.tokens, s.sampling)}});
      } catch (const Error& e) {
        throw InputError(i, e.what());
      }
    }
    return out;
  }

  std::string generate(const std::string& prompt, std::int64_t tokens, const SamplingConfig& sampling) override {
    const std::vector<std::int64_t> ids = encode_text(*tok_, prompt, "the prompt");
    return tok_->decode(multihead::generate(model_, ids, tokens, sampling, job_.train.seq_len, precision_));
  }

  std::vector<std::string> generate_batch(const std::vector<std::string>& prompts, std::int64_t tokens,
                                          const SamplingConfig& sampling) override {
    std::vector<std::vector<std::int64_t>> ids;
    for (const std::string& p : prompts) ids.push_back(encode_text(*tok_, p, "a prompt"));
    std::vector<std::string> out;
    for (const auto& row : multihead::generate_batch(model_, ids, tokens, sampling, job_.train.seq_len, precision_))
      out.push_back(tok_->decode(row));
    return out;
  }

  AttentionMaps attention(const std::string& text, std::int64_t max_tokens) override {
    check<ConfigError>(max_tokens > 1, "max tokens must be at least 2, got {}", max_tokens);
    std::vector<std::int64_t> ids = encode_text(*tok_, text, "the text");
    ids.resize(std::min<std::size_t>(ids.size(), static_cast<std::size_t>(max_tokens)));
    return language_model_attention(model_, *tok_, ids, 0, precision_);
  }
};

PronunciationJob with_precision(PronunciationJob job, Precision precision) {
  job.train.precision = precision;
  return job;
}

// A pronunciation run: no tokenizer, its own vocabulary (vocab.json).
class PronunciationRun final : public TrainedRun {
 public:
  PronunciationRun(const PronunciationJob& job, const std::string& dir, Precision precision)
      : run_(std::make_unique<LoadedPronouncer>(with_precision(job, precision), dir)) {}

  const char* task() const override { return PronunciationJob::kTask; }

  std::vector<std::string> request_fields() const override { return {"n_best", "beam"}; }
  void check_settings(const AnswerSettings& s) override {
    check_no_generation_settings(s);
    check_no_threshold(s);
    pronounce({}, s.n_best, s.beam);  // checks, no word
  }

  std::vector<nlohmann::json> answer(const std::vector<std::string>& inputs, const AnswerSettings& s) override {
    return batched_answers(
        inputs,
        [&](const std::vector<std::string>& words) {
          const std::vector<std::vector<Pronounced>> got = pronounce(words, s.n_best, s.beam);
          std::vector<nlohmann::json> out;
          for (std::size_t i = 0; i < words.size(); ++i) out.push_back(pronounced_answer(words[i], got[i]));
          return out;
        },
        [&](const std::string& word) { pronounce({word}, s.n_best, s.beam); });
  }

  std::vector<std::vector<Pronounced>> pronounce(const std::vector<std::string>& words, std::int64_t n_best,
                                                 std::int64_t beam) override {
    DecodeOptions o = run_->job.decode;
    o.beam = beam > 0 ? beam : std::max(o.beam, n_best);
    o.n_best = n_best;
    o.precision = run_->job.train.precision;
    return pronounce_words(*run_, words, o);
  }

  // The encoder's self-attention over the word's letters, spelled as pronounce reads them.
  AttentionMaps attention(const std::string& text, std::int64_t max_tokens) override {
    check_utf8(text, "the word");
    std::vector<std::string> letters = utf8_characters(cmudict_spelling(text));
    check<ConfigError>(!letters.empty(), "the word is empty");
    letters.resize(
        std::min<std::size_t>(letters.size(), static_cast<std::size_t>(std::max<std::int64_t>(max_tokens, 1))));
    std::string word;
    for (const auto& l : letters) word += l;
    return encoder_self_attention(run_->model(), run_->vocab.encode_word(word), letters, run_->job.train.precision);
  }

  // The encoder's self-attention, then the decoder's cross-attention over
  // the letters and its self-attention over the phonemes while it reads the
  // greedy pronunciation it gives the word.
  std::vector<AttentionMaps> attention_views(const std::string& text, std::int64_t max_tokens) override {
    AttentionMaps encoder = attention(text, max_tokens);
    std::string word;
    for (const auto& l : encoder.tokens) word += l;
    const std::vector<Pronounced> best = pronounce({word}, 1, 1).front();
    DecoderAttentionMaps decoder =
        decoder_attention_maps(run_->model(), run_->vocab, run_->vocab.encode_word(word), encoder.tokens,
                               run_->vocab.encode_phonemes(best.front().phonemes), run_->job.train.precision);
    encoder.prediction = fmt::format("{}", fmt::join(best.front().phonemes, " "));
    decoder.cross.prediction = decoder.self.prediction = encoder.prediction;
    return {std::move(encoder), std::move(decoder.cross), std::move(decoder.self)};
  }

 private:
  std::unique_ptr<LoadedPronouncer> run_;
};

}  // namespace

AttentionMaps classifier_attention(SequenceClassifier& model, const Tokenizer& tok,
                                   const std::vector<std::int64_t>& ids, std::int64_t max_len,
                                   const std::vector<std::string>& labels, Precision precision, bool ablate) {
  check<ConfigError>(model.config().layer.pattern.has_weights(),
                     "this model's attention is linear: it computes no attention weights to show");
  TokenBatch tb = make_token_batch({&ids}, {0}, max_len, tok.frame());
  std::vector<std::string> tokens;
  for (std::int64_t l = 0; l < tb.ids.dim(1); ++l) tokens.push_back(tok.piece(tb.ids.data<std::int64_t>()[l]));
  model.encoder().set_capture_weights(true);
  Tensor logits = model.forward(tb.ids, &tb.padding, eval_context(precision));
  model.encoder().set_capture_weights(false);
  AttentionMaps maps = captured_attention(model.encoder(), 0, std::move(tokens));
  const std::int64_t C = logits.dim(1);
  const std::int64_t top = std::max_element(logits.f32(), logits.f32() + C) - logits.f32();
  maps.prediction = labels.at(static_cast<std::size_t>(top));
  // The predicted class's probability, from logits (1, C).
  auto probability = [&](const Tensor& z) {
    double sum = 0;
    for (std::int64_t c = 0; c < C; ++c) sum += std::exp(static_cast<double>(z.f32()[c] - z.f32()[top]));
    return 1.0 / sum;
  };
  if (ablate) {
    const double base = probability(logits);
    for (std::int64_t l = 0; l < maps.layers; ++l) {
      MultiheadAttention& attn = model.encoder().layer(l).self_attention();
      for (std::int64_t h = 0; h < maps.heads; ++h) {
        std::vector<std::uint8_t> mask(static_cast<std::size_t>(maps.heads), 0);
        mask[static_cast<std::size_t>(h)] = 1;
        attn.set_head_mask(std::move(mask));
        maps.ablation.push_back(base - probability(model.forward(tb.ids, &tb.padding, eval_context(precision))));
        attn.set_head_mask({});
      }
    }
  }
  model.release_saved();
  return maps;
}

AttentionMaps language_model_attention(LanguageModel& model, const Tokenizer& tok, const std::vector<std::int64_t>& ids,
                                       std::int64_t first_layer, Precision precision) {
  check<ConfigError>(model.config().layer.pattern.has_weights(),
                     "this model's attention is linear: it computes no attention weights to show");
  std::vector<std::string> tokens;
  for (auto id : ids) tokens.push_back(tok.piece(id));
  TransformerEncoder& encoder = model.encoder();
  for (std::int64_t l = first_layer; l < encoder.num_layers(); ++l) encoder.layer(l).set_capture_weights(true);
  model.forward(Tensor::from_i64({1, static_cast<std::int64_t>(ids.size())}, ids), eval_context(precision));
  encoder.set_capture_weights(false);
  AttentionMaps maps = captured_attention(encoder, first_layer, std::move(tokens));
  maps.name = "causal self-attention";
  maps.causal = true;
  model.release_saved();
  return maps;
}

namespace {

// The loaded run of each kind whose kAnswers says it answers (tasks/kinds.h).
// Left undefined for the others: a kind that claims answers without a
// loaded run here does not compile.
template <typename J>
struct LoadedRunOf;
template <>
struct LoadedRunOf<TextClassificationJob> {
  using type = ClassifierRun;
};
template <>
struct LoadedRunOf<LanguageModelJob> {
  using type = LanguageModelRun;
};
template <>
struct LoadedRunOf<PronunciationJob> {
  using type = PronunciationRun;
};

// In the run's own precision unless another is asked for; none for a kind
// without answers.
template <typename J>
std::unique_ptr<TrainedRun> load_kind(const J& j, const std::string& dir, std::optional<Precision> p) {
  if constexpr (J::kAnswers == RunAnswers::kNone) {
    return nullptr;
  } else {
    return std::make_unique<typename LoadedRunOf<J>::type>(j, dir, p.value_or(j.train.precision));
  }
}

// "text classifiers, language models and pronunciation jobs": the kinds with a loaded run.
std::string answering_nouns() {
  std::vector<std::string> nouns;
  for (const KindInfo& k : kinds())
    if (k.answers != RunAnswers::kNone) nouns.emplace_back(k.noun);
  std::string s;
  for (std::size_t i = 0; i < nouns.size(); ++i) s += (i == 0 ? "" : i + 1 == nouns.size() ? " and " : ", ") + nouns[i];
  return s;
}

}  // namespace

std::unique_ptr<TrainedRun> TrainedRun::load(const std::string& run_dir, std::optional<Precision> precision) {
  const RunConfig cfg = read_run_config(run_dir);
  const Job job = job_from_json(cfg.json, cfg.path);
  std::unique_ptr<TrainedRun> run = std::visit([&](const auto& j) { return load_kind(j, run_dir, precision); }, job);
  if (run) {
    if (std::string w = run_checkpoint_warning(run_dir); !w.empty())
      run->warnings_.insert(run->warnings_.begin(), std::move(w));
    return run;
  }
  throw ConfigError(fmt::format("{}: inspect and load_run read the runs of {}, this run's task is '{}'", cfg.path,
                                answering_nouns(), job_task(job)));
}

void TrainedRun::check_settings(const AnswerSettings& s) {
  check_no_pronunciation_settings(s);
  check_no_generation_settings(s);
}

void TrainedRun::check_no_threshold(const AnswerSettings& s) {
  check<ConfigError>(s.threshold == -1, "--threshold applies to two-class classifiers only");
}

void TrainedRun::check_no_pronunciation_settings(const AnswerSettings& s) {
  check<ConfigError>(s.n_best == 1 && s.beam == 0, "--n-best and --beam apply to pronunciation runs only");
}

void TrainedRun::check_no_generation_settings(const AnswerSettings& s) {
  const AnswerSettings defaults;
  check<ConfigError>(s.tokens == defaults.tokens && s.sampling.temperature == defaults.sampling.temperature &&
                         s.sampling.top_k == defaults.sampling.top_k && s.sampling.top_p == defaults.sampling.top_p &&
                         s.sampling.seed == defaults.sampling.seed,
                     "--tokens, --temperature, --top-k, --top-p and --seed apply to language model runs only");
}

std::vector<std::string> TrainedRun::labels() const {
  throw ConfigError(fmt::format("a {} run has no classes", task()));
}

std::vector<std::vector<float>> TrainedRun::embed(const std::vector<std::string>&) {
  throw ConfigError(
      fmt::format("embed needs a text encoder (a classifier's run or a checkpoint); this run's task "
                  "is {}",
                  task()));
}

std::vector<Prediction> TrainedRun::predict(const std::vector<std::string>&) {
  throw ConfigError(fmt::format("predict needs a text classification run; this run's task is {}", task()));
}

std::string TrainedRun::generate(const std::string&, std::int64_t, const SamplingConfig&) {
  throw ConfigError(fmt::format("generate needs a language model run; this run's task is {}", task()));
}

std::vector<std::string> TrainedRun::generate_batch(const std::vector<std::string>&, std::int64_t,
                                                    const SamplingConfig&) {
  throw ConfigError(fmt::format("generate needs a language model run; this run's task is {}", task()));
}

std::vector<std::vector<Pronounced>> TrainedRun::pronounce(const std::vector<std::string>&, std::int64_t,
                                                           std::int64_t) {
  throw ConfigError(fmt::format("pronounce needs a pronunciation run; this run's task is {}", task()));
}

}  // namespace multihead
