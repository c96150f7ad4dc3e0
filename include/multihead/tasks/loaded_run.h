// SPDX-License-Identifier: Apache-2.0
// A run directory loaded back as its parts: the job as config.json records
// it, the tokenizer it trained with (checked against the job's vocabulary
// before any weights are read) and the model with the last checkpoint's
// weights. The one loader of a trained token model: each kind's TrainedRun,
// evaluate_run and the experiments hold one.
#pragma once

#include <memory>
#include <string>

#include "multihead/data/tokenizer.h"
#include "multihead/train/fit.h"
#include "multihead/train/run_dir.h"

namespace multihead {

template <typename Job, typename Model>
struct LoadedRun {
  // `job` as the caller has it (config.json's, perhaps with another
  // precision); the model frozen for `inference` (TrainedModel).
  LoadedRun(const Job& job_in, const std::string& run_dir, Precision inference)
      : job(job_in),
        tokenizer(load_run_tokenizer(run_dir, job.model.vocab_size)),
        trained(job.model, run_dir, inference) {}
  LoadedRun(const Job& job_in, const std::string& run_dir) : LoadedRun(job_in, run_dir, job_in.train.precision) {}
  // The job read from the run's config.json (a run of another kind is a ConfigError).
  explicit LoadedRun(const std::string& run_dir) : LoadedRun(read_job(run_dir), run_dir) {}
  LoadedRun(const LoadedRun&) = delete;
  LoadedRun& operator=(const LoadedRun&) = delete;

  Model& model() { return trained.model; }

  Job job;
  std::unique_ptr<Tokenizer> tokenizer;
  TrainedModel<Model> trained;

 private:
  static Job read_job(const std::string& run_dir) {
    const RunConfig cfg = read_run_config(run_dir);
    return Job::from_json(cfg.json, cfg.path);
  }
};

}  // namespace multihead
