// How a job's config is read and written. Each kind of job derives from
// JobConfig<Kind> and lists its keys once, in a static member template
//
//   template <class Keys, class Self> static void keys(Keys& k, Self& job);
//
// which from_json runs with a JobReader (Self = Kind) and to_json with a
// JobWriter (Self = const Kind): so a key cannot be written without being
// read, and a key that is absent from a config keeps the job's default (the
// job's own initialisers and constructor). Beside its own keys every config
// has "task" (Kind::kTask), "threads" and "title" (Kind::report_title).
#pragma once

#include <concepts>
#include <string>

#include <nlohmann/json.hpp>

#include "multihead/core/error.h"
#include "multihead/data/tokenizer.h"
#include "multihead/io/json_config.h"
#include "multihead/nn/models.h"
#include "multihead/train/train_config.h"

namespace multihead {

// Reading: ConfigReader's keys, plus the sections every kind of job shares,
// each with its own strict reader (train/train_config.h).
class JobReader : public ConfigReader {
 public:
  using ConfigReader::ConfigReader;

  // "tokenizer": absent keys keep t's values.
  JobReader& tokenizer(TokenizerConfig& t) {
    t = read_tokenizer_section(*this, source(), t);
    return *this;
  }
  // "model": vocab_size, when the config has none, is the one given (the
  // data's or the tokenizer's, until it is known).
  JobReader& model(ModelConfig& m, std::int64_t vocab_size) {
    m = read_model_section(*this, source(), vocab_size);
    return *this;
  }
  // "train", with the epoch budget's keys for jobs that train in epochs.
  JobReader& train(TrainConfig& t, EpochBudget* budget = nullptr) {
    t = read_train_section(*this, source(), budget);
    return *this;
  }
};

// Writing: every key, the shared sections whole.
class JobWriter : public ConfigWriter {
 public:
  using ConfigWriter::ConfigWriter;

  JobWriter& tokenizer(const TokenizerConfig& t) {
    out_["tokenizer"] = tokenizer_config_json(t);
    return *this;
  }
  JobWriter& model(const ModelConfig& m, std::int64_t /*vocab_size: m's own is written*/) {
    out_["model"] = model_config_json(m);
    return *this;
  }
  JobWriter& train(const TrainConfig& t, const EpochBudget* budget = nullptr) {
    nlohmann::json section = train_config_json(t);
    if (budget) budget->write(section);
    out_["train"] = std::move(section);
    return *this;
  }
};

template <typename Kind>
struct JobConfig {
  int threads = 0;  // 0: all cores
  // Whether a config may leave "task" out (meaning this kind).
  static constexpr bool kTaskOptional = false;

  // Reads a job (the format to_json writes): every key type-checked, an
  // unknown key or a value out of range a ConfigError naming `source`.
  static Kind from_json(const nlohmann::json& config, const std::string& source) {
    Kind job;
    JobReader r(config, source);
    const std::string task =
        Kind::kTaskOptional ? r.get_string("task", std::string(Kind::kTask)) : r.get_string("task");
    check<ConfigError>(task == Kind::kTask, "{}: task must be {}", source, Kind::kTask);
    job.threads = read_threads(r);
    r("title", job.report_title);
    Kind::keys(r, job);
    r.finish();
    job.validate(source);
    return job;
  }
};

// Every key of the job's config, with its value.
template <typename Kind>
  requires std::derived_from<Kind, JobConfig<Kind>>
nlohmann::json to_json(const Kind& job) {
  nlohmann::json out{{"task", Kind::kTask}, {"threads", job.threads}, {"title", job.report_title}};
  JobWriter w(out);
  Kind::keys(w, job);
  return out;
}

}  // namespace multihead
