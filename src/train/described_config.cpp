// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/described_config.h"

#include "multihead/io/json_config.h"

namespace multihead {

TrainSection train_section(const nlohmann::json& config, const std::string& source) {
  TrainSection t;
  const auto it = config.find("train");
  if (it == config.end() || !it->is_object()) return t;
  t.present = true;
  ConfigReader reader(*it, source + ": train");
  TrainConfig::keys(reader, t.train);
  EpochBudget::keys(reader, t.budget);
  return t;
}

}  // namespace multihead
