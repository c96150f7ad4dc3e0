// SPDX-License-Identifier: Apache-2.0
// The job registry: every kind of training job, read from a config or a
// preset, adjusted by flags, trained into a run directory and evaluated from
// one, with a single dispatch on the kind (Job's alternative).
//
// Adding a task: its header and file under tasks/ giving, for its job type
// XJob, kTask (the "task" key of its configs), kNoun, kAnswers and kModel
// (the registry of kinds, tasks/kinds.h), its key list (from_json, to_json),
// run_job, summary_lines, evaluate_run and sample_model; a loaded run
// (trained_run.cpp's LoadedRunOf) when kAnswers says it answers; then its
// type in Job below. What else differs by kind reads the registry: the CLI's
// task list, the Python package (`kinds()`), the loaders' messages.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/core/precision.h"
#include "multihead/io/output_path.h"
#include "multihead/tasks/image_classification.h"
#include "multihead/tasks/language_modeling.h"
#include "multihead/tasks/pronunciation.h"
#include "multihead/tasks/sequence_task.h"
#include "multihead/tasks/text_classification.h"
#include "multihead/tasks/word_stress.h"
#include "multihead/train/progress.h"
#include "multihead/train/run_dir.h"

namespace multihead {

using Job = std::variant<TextClassificationJob, LanguageModelJob, ImageClassificationJob, SequenceTaskJob,
                         PronunciationJob, WordStressJob>;

// The kind's name: "text_classification", "language_modeling", ...
const char* job_task(const Job& job);
// The names job_from_json knows, in Job's order.
std::vector<std::string> job_tasks();

// A job config by its "task" (text_classification when it has none); an
// unknown task is a ConfigError naming the known ones.
Job job_from_json(const nlohmann::json& config, const std::string& source);
Job job_from_file(const std::string& path);
nlohmann::json to_json(const Job& job);

// Trains `job` into the run directory `out`, which `mode` says what to do
// with (RunDir: a new or empty one; resume from its last checkpoint when
// there is one; or replace the run there). A run that fails before its
// first checkpoint removes what it wrote (and the directory, when it made
// it); a later failure keeps the checkpoints, which are worth resuming from. Returns the lines `multihead
// train` prints: the results, and where the report is.
// A stop asked for of `stop` (may be null) ends it after the step under way,
// with a checkpoint there, or in the test after training (Interrupted).
// An `out` that is, contains or lies inside any of the job's inputs
// (job_inputs) or `more_inputs` (the config file it was read from) is a
// ConfigError before anything is touched (io/output_path.h).
std::vector<std::string> train_job(const Job& job, const std::string& out, RunMode mode, Progress& progress,
                                   StopRequest* stop = nullptr, const std::vector<NamedInput>& more_inputs = {});

// Every path a job reads (its data, train.init_from, tokenizer.from), named.
std::vector<NamedInput> job_inputs(const Job& job);

// The thread count a job's config asks for (0: all cores), which its entry
// point binds (in its ContextScope) before running it.
int job_threads(const Job& job);

// Evaluates the model of the run in run_dir, whatever its kind, in the
// run's own precision or `precision`; returns the lines `multihead eval`
// prints. `req` (tasks/evaluation.h) asks for another file to score, which
// classifiers and language models take (another kind: a ConfigError), and
// a classifier's report folder. Like every call of the library, on the
// threads of the calling thread's context (core/context.h).
std::vector<std::string> evaluate_run(const std::string& run_dir, std::optional<Precision> precision = std::nullopt,
                                      const EvalRequest& req = {});

// The test split of the run in run_dir as text (tasks/model_sample.h): a
// text classification or pronunciation run's; another kind is a ConfigError.
TestTexts run_test_texts(const std::string& run_dir);

// The model of the run in run_dir on a batch of its own test data, in fp32,
// whatever its kind (tasks/model_sample.h).
ModelSample sample_run_model(const std::string& run_dir, const ModelSampleSettings& settings);

}  // namespace multihead
