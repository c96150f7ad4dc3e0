// SPDX-License-Identifier: Apache-2.0
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
    out.push_back(id >= 3 && id < 3 + static_cast<std::int64_t>(phonemes.size())
                      ? phonemes[static_cast<std::size_t>(id - 3)]
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

std::string cmudict_spelling(const std::string& word) {
  std::string upper = word;
  for (char& c : upper)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return upper;
}

}  // namespace multihead
