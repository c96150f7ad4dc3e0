// SPDX-License-Identifier: Apache-2.0
// Settings given on top of a job's preset or config: the flags of
// `multihead train`, each an alias of keys of the job's config, and --set,
// which sets any key by its path. One table (job_flags) declares the flags,
// their help and their keys; a flag whose keys a kind of job does not have
// is refused by name, so no flag is silently ignored.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "multihead/io/json_config.h"
#include "multihead/tasks/jobs.h"

namespace multihead {

struct JobFlag {
  std::string_view flag;  // "--d-model"
  std::string_view help;
  // The key paths it sets, each for one kind of job ("task") or, with an
  // empty task, for every kind that has the first such path. A kind's own
  // entries take the place of the general ones.
  std::vector<std::pair<std::string_view, std::string_view>> keys;
  bool is_switch = false;  // no value: sets true (--checkpoint-layers)
  // Keys whose defaults follow this one, taken out when the flag (or --set of
  // its first key) changes it, so that they follow the new value
  // (--precision: train.loss_scaling; --source: the title and the
  // preprocessing a preset chose for its own data).
  std::vector<std::string_view> rederives = {};
  // Only the first of the general paths that the config has (--steps: an
  // epoch job's cap, train.max_steps, else train.steps), not all of them.
  bool first_present = false;
};

// Every flag, in the order --help lists them.
const std::vector<JobFlag>& job_flags();

// One setting from the command line: a flag and its value, or "--set" and
// "path=value" (path as "model.d_model").
struct JobSetting {
  std::string flag, value;
};

// `job` with `settings` applied in order: its config written out whole,
// each setting's keys replaced (the value read as the type of the key it
// replaces), and read back, so a flag is checked as the key it sets.
// ConfigError: "--epochs and --source do not apply to language models"
// for flags the kind lacks; otherwise a bad value names its flag or path.
Job apply_settings(const Job& job, const std::vector<JobSetting>& settings);

// Every key of every kind of job: path, type, default and bounds, with the
// kinds that have it and any default that differs by kind.
struct JobKeyRow {
  KeyDescription key;                   // the first kind's
  std::vector<std::string> tasks;       // the kinds that have it
  std::vector<KeyDescription> by_task;  // each of those kinds' own, in the same order
};
std::vector<JobKeyRow> job_key_rows();
// docs/CONFIG.md: the rows as Markdown tables with the flags that alias each key.
std::string job_keys_markdown();
// The same, as plain text for `train --help`.
std::string job_keys_text();

}  // namespace multihead
