// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/grad_scaler.h"

#include <cmath>

#include <fmt/format.h>

#include "multihead/core/error.h"

namespace multihead {

GradScaler::GradScaler(const GradScalerConfig& cfg) : cfg_(cfg), scale_(cfg.init_scale) {
  check<ConfigError>(cfg.init_scale > 0 && cfg.growth_factor > 1 && cfg.backoff_factor > 0 && cfg.backoff_factor < 1 &&
                         cfg.growth_interval > 0,
                     "loss scaling needs a positive scale, growth > 1, 0 < backoff < 1 and a positive interval");
}

bool GradScaler::unscale(std::span<float> grads) const {
  // Multiplying by the reciprocal, as PyTorch does (a power of two while the
  // factors are, so exact).
  const float inv = static_cast<float>(1.0 / scale_);
  bool finite = true;
  for (float& g : grads) {
    g *= inv;
    finite = finite && std::isfinite(g);
  }
  return finite;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= cfg_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == cfg_.growth_interval) {
    scale_ *= cfg_.growth_factor;
    growth_tracker_ = 0;
  }
}

void GradScaler::save_state(std::map<std::string, std::string>& meta) const {
  meta["scaler.scale"] = fmt::format("{}", scale_);  // shortest exact round trip
  meta["scaler.growth_tracker"] = std::to_string(growth_tracker_);
}

void GradScaler::load_state(const std::map<std::string, std::string>& meta) {
  auto s = meta.find("scaler.scale"), t = meta.find("scaler.growth_tracker");
  check<IoError>(s != meta.end() && t != meta.end(), "checkpoint holds no loss-scaler state");
  try {
    scale_ = std::stod(s->second);
    growth_tracker_ = std::stoll(t->second);
  } catch (const std::exception&) {
    throw IoError(fmt::format("checkpoint loss-scaler state '{}', '{}' is not numeric", s->second, t->second));
  }
  check<IoError>(scale_ > 0 && std::isfinite(scale_), "checkpoint loss scale {} is not a positive number", scale_);
}

}  // namespace multihead
