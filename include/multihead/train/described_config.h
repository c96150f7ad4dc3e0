// SPDX-License-Identifier: Apache-2.0
// A job's config as its run records it, with what its key list says of each
// key: what fit() is given to write as config.json, or to compare with the
// config.json of the run it resumes (train/resume.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "multihead/io/config_keys.h"
#include "multihead/train/train_config.h"

namespace multihead {

struct DescribedConfig {
  nlohmann::json json;  // every key, with its value (the job's to_json)
  // The key list's rows (tasks/job_config.h: describe_keys): each key's
  // default, which a key absent from an older run's config.json takes, and
  // whether a resume may change it (KeyDescription::may_change_on_resume).
  std::vector<KeyDescription> keys;
};

// A recorded config's train section, read by its key list: the values a
// run trained with (a config without the section: the defaults, and
// present false). Keys other than the section's pass unread (a config's
// train section also holds the epoch budget's, read here too); a value out
// of range is a ConfigError naming `source`.
struct TrainSection {
  TrainConfig train;
  EpochBudget budget;
  bool present = false;
};
TrainSection train_section(const nlohmann::json& config, const std::string& source);

}  // namespace multihead
