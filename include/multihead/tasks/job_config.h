// SPDX-License-Identifier: Apache-2.0
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
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/core/error.h"
#include "multihead/core/threading.h"
#include "multihead/data/tokenizer.h"
#include "multihead/io/json_config.h"
#include "multihead/nn/models.h"
#include "multihead/train/described_config.h"
#include "multihead/train/train_config.h"

namespace multihead {

// The sections every kind of job shares, for each side of the key lists
// (Base: ConfigReader, ConfigWriter or ConfigDescriber): "tokenizer",
// "model" and "train", each read by its struct's own key list and validated
// once read. "model" is read into a fresh struct (its defaults are the
// section's); "train" keeps the kind's recipe where a key is absent.
template <typename Base>
class JobKeys : public Base {
 public:
  using Base::Base;
  static constexpr bool kReads = std::is_same_v<Base, ConfigReader>;

  // "tokenizer": absent keys keep t's values.
  template <typename T>
  JobKeys& tokenizer(T& t) {
    this->section("tokenizer", [&](Base& s) { TokenizerConfig::keys(s, t); });
    return *this;
  }
  // "model": vocab_size, when the config has none, is the one given (the
  // data's or the tokenizer's, until it is known).
  template <typename M>
  JobKeys& model(M& m, std::int64_t vocab_size) {
    if constexpr (kReads) m = ModelConfig{};
    const ModelConfig fresh;
    const ModelConfig& described = std::is_same_v<Base, ConfigDescriber> ? fresh : m;
    this->section("model", [&](Base& s) {
      if constexpr (kReads) ModelConfig::keys(s, m, vocab_size);
      else ModelConfig::keys(s, described, vocab_size);
    });
    if constexpr (kReads) m.validate();
    return *this;
  }
  // "threads" and "title", which every kind has beside "task".
  template <typename J>
  JobKeys& common(J& job) {
    (*this)("threads", job.threads, between(0, kMaxThreads))
        .doc("threads the run computes on (0: all cores)")
        .may_change_on_resume();  // a thread count changes the summation order of some reductions, which a user may
                                  // accept
    (*this)("title", job.report_title).doc("report.md's title");
    return *this;
  }
  // "train", with the epoch budget's keys for jobs that train in epochs.
  // Its absent keys keep the kind's own recipe (the values its constructor
  // gives a job: one default for a config, the flags and the Python API),
  // and a description gives those values.
  template <typename T, typename B = EpochBudget>
  JobKeys& train(T& t, B* budget = nullptr) {
    this->section("train", [&](Base& s) {
      if (budget) EpochBudget::keys(s, *budget);
      TrainConfig::keys(s, t);
    });
    if constexpr (kReads) t.validate();
    return *this;
  }
};
using JobReader = JobKeys<ConfigReader>;
using JobWriter = JobKeys<ConfigWriter>;
using JobDescriber = JobKeys<ConfigDescriber>;

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
    r.common(job);
    Kind::keys(r, job);
    r.finish();
    job.validate(source);
    return job;
  }
};

// Every key of a kind's config: its type, its default (a default job's)
// and its bounds, in the order of its key list.
template <typename Kind>
std::vector<KeyDescription> describe_keys() {
  const Kind job;
  JobDescriber d;
  d("task", std::string(Kind::kTask)).doc("the kind of job (tasks/kinds.h)");
  d.common(job);
  Kind::keys(d, job);
  return d.rows();
}

// A job type: one that lists its keys through JobConfig.
template <typename Kind>
concept JobKind = std::derived_from<Kind, JobConfig<Kind>>;

// Every key of the job's config, with its value.
template <JobKind Kind>
nlohmann::json to_json(const Kind& job) {
  nlohmann::json out{{"task", Kind::kTask}};
  JobWriter w(out);
  w.common(job);
  Kind::keys(w, job);
  return out;
}

// The job's config as its run records it, with its key list's rows: what
// fit() compares with the config of a run it resumes (train/described_config.h).
template <JobKind Kind>
DescribedConfig described_config(const Kind& job) {
  return {to_json(job), describe_keys<Kind>()};
}

}  // namespace multihead
