// The pronunciation job: its vocabulary of letters and phonemes, its config
// (to and from JSON, checks, flag overrides), and CMUdict's spelling of a word.
#include "multihead/tasks/pronunciation.h"

#include "multihead/core/error.h"
#include "multihead/io/json_config.h"

namespace multihead {

using json = nlohmann::json;

std::vector<std::string> utf8_characters(const std::string& word) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < word.size();) {
    const unsigned char c = static_cast<unsigned char>(word[i]);
    const std::size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(word.substr(i, n));
    i += n;
  }
  return out;
}

std::vector<std::int64_t> PronunciationVocab::encode_word(const std::string& word) const {
  std::vector<std::int64_t> ids;
  for (const std::string& ch : utf8_characters(word)) {
    const auto it = std::find(letters.begin(), letters.end(), ch);
    ids.push_back(it == letters.end() ? kUnknownLetter : 2 + (it - letters.begin()));
  }
  return ids;
}

std::vector<std::int64_t> PronunciationVocab::encode_phonemes(const std::vector<std::string>& ps) const {
  std::vector<std::int64_t> ids;
  for (const std::string& p : ps) {
    const auto it = std::find(phonemes.begin(), phonemes.end(), p);
    check<IoError>(it != phonemes.end(), "phoneme {} is not in the vocabulary", p);
    ids.push_back(3 + (it - phonemes.begin()));
  }
  return ids;
}

std::vector<std::string> PronunciationVocab::decode_phonemes(const std::vector<std::int64_t>& ids) const {
  std::vector<std::string> out;
  for (std::int64_t id : ids)
    out.push_back(id >= 3 && id < 3 + static_cast<std::int64_t>(phonemes.size()) ? phonemes[static_cast<std::size_t>(id - 3)]
                                                                                  : "<?>");
  return out;
}

json PronunciationVocab::to_json() const { return json{{"letters", letters}, {"phonemes", phonemes}}; }

PronunciationVocab PronunciationVocab::from_json(const json& j, const std::string& source) {
  check<IoError>(j.is_object() && j.contains("letters") && j.contains("phonemes"),
                 "{}: expected an object with letters and phonemes", source);
  PronunciationVocab v;
  try {
    v.letters = j.at("letters").get<std::vector<std::string>>();
    v.phonemes = j.at("phonemes").get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    throw IoError(fmt::format("{}: {}", source, e.what()));
  }
  return v;
}

PronunciationJob::PronunciationJob() {
  model.source_vocab = 64;  // until the data is read
  model.model.vocab_size = 96;
  model.model.num_layers = 3;
  model.model.layer.d_model = 256;
  model.model.layer.nhead = 4;
  model.model.layer.dim_feedforward = 1024;
  model.model.layer.dropout = 0.1;
  model.model.layer.norm_first = true;
  model.model.positions = PositionKind::kSinusoidal;
  model.model.max_len = 64;
  train.batch = 128;
  train.schedule.base_lr = 1e-3;
  train.schedule.warmup_steps = 400;
  train.schedule.decay = Decay::kCosine;
  train.schedule.min_lr = 1e-5;
  train.clip_grad_norm = 1.0;
  train.adamw.weight_decay = 0.01;
  // bf16 widens to fp32 where the CPU has no bf16 units.
  train.precision = Precision::kBF16;
  decode.beam = 4;
  decode.length_penalty = 1.0;
  decode.max_len = 40;
}

json to_json(const PronunciationJob& j) {
  json train = train_config_json(j.train);
  j.budget.write(train);
  return json{{"task", PronunciationJob::kTask},
              {"data",
               {{"path", j.data_path},
                {"keep_stress", j.keep_stress},
                {"validation_fraction", j.validation_fraction},
                {"test_fraction", j.test_fraction},
                {"validation_words", j.validation_words},
                {"train_max_letters", j.train_max_letters}}},
              {"eval_every", j.eval_every},
              {"model", model_config_json(j.model.model)},
              {"decoder_layers", j.model.decoder_layers},
              {"label_smoothing", j.label_smoothing},
              {"decode", {{"beam", j.decode.beam}, {"length_penalty", j.decode.length_penalty}, {"max_len", j.decode.max_len}}},
              {"eval_batch", j.eval_batch},
              {"train", train},
              {"threads", j.threads},
              {"title", j.report_title}};
}

PronunciationJob PronunciationJob::from_json(const json& root, const std::string& src) {
  PronunciationJob job;
  ConfigReader r(root, src);
  read_job_basics(job, r, src);
  job.label_smoothing = r.get_number("label_smoothing", job.label_smoothing);
  job.eval_batch = r.get_int("eval_batch", job.eval_batch);
  job.eval_every = r.get_int("eval_every", job.eval_every);
  job.model.decoder_layers = r.get_int("decoder_layers", job.model.decoder_layers);
  const json data = r.get_object("data");
  ConfigReader d(data, src + ": data");
  job.data_path = d.get_string("path", job.data_path);
  job.keep_stress = d.get_bool("keep_stress", job.keep_stress);
  job.validation_fraction = d.get_number("validation_fraction", job.validation_fraction);
  job.test_fraction = d.get_number("test_fraction", job.test_fraction);
  job.validation_words = d.get_int("validation_words", job.validation_words);
  job.train_max_letters = d.get_int("train_max_letters", job.train_max_letters);
  d.finish();
  if (r.has("decode")) {
    const json dec = r.get_object("decode");
    ConfigReader dr(dec, src + ": decode");
    job.decode.beam = dr.get_int("beam", job.decode.beam);
    job.decode.length_penalty = dr.get_number("length_penalty", job.decode.length_penalty);
    job.decode.max_len = dr.get_int("max_len", job.decode.max_len);
    dr.finish();
  }
  job.model.model = read_model_section(r, src, job.model.model.vocab_size);
  job.train = read_train_section(r, src, &job.budget);
  r.finish();
  job.validate(src);
  return job;
}

void PronunciationJob::validate(const std::string& where) const {
  budget.validate(where);
  auto fraction = [&](double f, const char* name) {
    check<ConfigError>(f > 0 && f < 0.5, "{}: {} must be in (0, 0.5), got {}", where, name, f);
  };
  fraction(validation_fraction, "validation_fraction");
  fraction(test_fraction, "test_fraction");
  check<ConfigError>(validation_words >= 0 && eval_every >= 0 && train_max_letters >= 0,
                     "{}: validation_words, eval_every and train_max_letters must be non-negative", where);
  check<ConfigError>(label_smoothing >= 0 && label_smoothing < 1, "{}: label_smoothing must be in [0, 1), got {}",
                     where, label_smoothing);
  check<ConfigError>(eval_batch > 0, "{}: eval_batch must be positive, got {}", where, eval_batch);
  DecodeOptions d = decode;
  d.n_best = 1;
  try {
    d.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: decode: {}", where, e.what()));
  }
  model.validate();
}

void apply_overrides(PronunciationJob& job, const JobOverrides& o) {
  refuse_flags({{"--source", o.source.has_value()},
                {"--tokenizer", o.tokenizer.has_value()},
                {"--max-len", o.max_len.has_value()},
                {"--vocab-size", o.vocab_size.has_value()}},
               "pronunciation jobs");
  if (o.data) job.data_path = *o.data;
  if (o.epochs) job.budget.epochs = *o.epochs;
  if (o.steps) job.budget.max_steps = *o.steps;
  TokenizerConfig letters;  // the letters are the vocabulary
  apply_token_model_overrides(o, job.model.model, job.train, letters, job.threads);
  job.validate("the flags");
}

std::string cmudict_spelling(const std::string& word) {
  std::string upper = word;
  for (char& c : upper)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return upper;
}

}  // namespace multihead
