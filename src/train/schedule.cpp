#include "multihead/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "multihead/core/error.h"

namespace multihead {

Decay parse_decay(std::string_view name) {
  if (name == "constant") return Decay::kConstant;
  if (name == "cosine") return Decay::kCosine;
  if (name == "linear") return Decay::kLinear;
  if (name == "inverse_sqrt") return Decay::kInverseSqrt;
  throw ConfigError(fmt::format("schedule must be constant, cosine, linear or inverse_sqrt, got \"{}\"", name));
}

double LrSchedule::lr_at(std::int64_t step) const {
  if (step < warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (decay == Decay::kConstant) return base_lr;
  if (decay == Decay::kInverseSqrt)
    return base_lr * std::sqrt(static_cast<double>(std::max<std::int64_t>(warmup_steps, 1))) /
           std::sqrt(static_cast<double>(step + 1));
  const double span = static_cast<double>(std::max<std::int64_t>(total_steps - warmup_steps, 1));
  const double t = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  const double shape = decay == Decay::kCosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * t)) : 1.0 - t;
  return min_lr + (base_lr - min_lr) * shape;
}

double global_grad_norm(std::span<const float> grads) {
  constexpr std::size_t kChunk = 1 << 14;
  const std::size_t chunks = (grads.size() + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static)
  for (std::size_t c = 0; c < chunks; ++c) {
    double s = 0;
    const std::size_t end = std::min(grads.size(), (c + 1) * kChunk);
    for (std::size_t i = c * kChunk; i < end; ++i) s += static_cast<double>(grads[i]) * grads[i];
    partial[c] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

double clip_grad_norm(std::span<float> grads, double max_norm) {
  check<ConfigError>(max_norm > 0, "gradient clipping norm must be positive, got {}", max_norm);
  const double norm = global_grad_norm(grads);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const float c = static_cast<float>(coef);
    for (float& g : grads) g *= c;
  }
  return norm;
}

}  // namespace multihead
