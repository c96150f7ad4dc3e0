// SPDX-License-Identifier: Apache-2.0
// Dynamic loss scaling for fp16 training, with torch.cuda.amp.GradScaler's
// semantics: the loss (so every gradient) is multiplied by `scale`; before
// clipping and the optimizer step the gradients are divided by it again; a
// step whose gradients hold an inf or NaN is skipped and the scale backs off
// (x0.5); after growth_interval clean steps in a row the scale grows (x2).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

namespace multihead {

struct GradScalerConfig {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerConfig& cfg = {});
  double scale() const { return scale_; }
  // Divides grads by the scale in place; returns false if any is inf or NaN
  // (then the optimizer step must be skipped).
  bool unscale(std::span<float> grads) const;
  // After each step: found_inf as unscale() reported it.
  void update(bool found_inf);
  std::int64_t growth_tracker() const { return growth_tracker_; }
  // Metadata entries "scaler.scale" and "scaler.growth_tracker".
  void save_state(std::map<std::string, std::string>& meta) const;
  void load_state(const std::map<std::string, std::string>& meta);

 private:
  GradScalerConfig cfg_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
};

}  // namespace multihead
