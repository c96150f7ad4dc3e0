// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include <hwy/highway.h>

#include "multihead/core/error.h"
#include "multihead/core/suggest.h"

namespace multihead {

Decay parse_decay(std::string_view name) {
  if (name == "constant") return Decay::kConstant;
  if (name == "cosine") return Decay::kCosine;
  if (name == "linear") return Decay::kLinear;
  if (name == "inverse_sqrt") return Decay::kInverseSqrt;
  throw ConfigError(fmt::format("schedule must be constant, cosine, linear or inverse_sqrt, got \"{}\"{}", name,
                                did_you_mean(name, {"constant", "cosine", "linear", "inverse_sqrt"})));
}

std::string_view decay_name(Decay d) {
  switch (d) {
    case Decay::kCosine: return "cosine";
    case Decay::kLinear: return "linear";
    case Decay::kInverseSqrt: return "inverse_sqrt";
    case Decay::kConstant: break;
  }
  return "constant";
}

double LrSchedule::lr_at(std::int64_t step) const {
  if (step < warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (decay == Decay::kConstant) return base_lr;
  if (decay == Decay::kInverseSqrt)
    return base_lr * std::sqrt(static_cast<double>(std::max<std::int64_t>(warmup_steps, 1))) /
           std::sqrt(static_cast<double>(step + 1));
  // A restart inside the warmup leaves the schedule as a run of the whole length has it.
  const bool restarted = restart_step > 0 && restart_step >= warmup_steps && step >= restart_step;
  const std::int64_t from = restarted ? restart_step : warmup_steps;
  const double peak = restarted ? restart_lr : base_lr;
  const double span = static_cast<double>(std::max<std::int64_t>(total_steps - from, 1));
  const double t = std::clamp(static_cast<double>(step - from) / span, 0.0, 1.0);
  const double shape = decay == Decay::kCosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * t)) : 1.0 - t;
  return min_lr + (peak - min_lr) * shape;
}

namespace {

namespace hn = hwy::HWY_NAMESPACE;

// Sum of x[i]^2 over a chunk, in double: floats widened lane by lane, four
// accumulators so the adds do not wait on each other.
double sum_of_squares(const float* x, std::size_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as doubles
  const std::size_t N = hn::Lanes(dd);
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd), a2 = hn::Zero(dd), a3 = hn::Zero(dd);
  std::size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto v0 = hn::PromoteTo(dd, hn::LoadU(df, x + i));
    const auto v1 = hn::PromoteTo(dd, hn::LoadU(df, x + i + N));
    const auto v2 = hn::PromoteTo(dd, hn::LoadU(df, x + i + 2 * N));
    const auto v3 = hn::PromoteTo(dd, hn::LoadU(df, x + i + 3 * N));
    a0 = hn::MulAdd(v0, v0, a0), a1 = hn::MulAdd(v1, v1, a1);
    a2 = hn::MulAdd(v2, v2, a2), a3 = hn::MulAdd(v3, v3, a3);
  }
  double s = hn::GetLane(hn::SumOfLanes(dd, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

// The chunks are fixed, so the norm does not depend on the thread count.
constexpr std::size_t kNormChunk = 1 << 14;

}  // namespace

double global_grad_norm(std::span<const float> grads) {
  const std::size_t chunks = (grads.size() + kNormChunk - 1) / kNormChunk;
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t begin = c * kNormChunk;
    partial[c] = sum_of_squares(grads.data() + begin, std::min(grads.size(), begin + kNormChunk) - begin);
  }
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

double global_grad_norm_ref(std::span<const float> grads) {
  double s = 0;
  for (float g : grads) s += static_cast<double>(g) * g;
  return std::sqrt(s);
}

float clip_coefficient(double norm, double max_norm) {
  check<ConfigError>(max_norm > 0, "gradient clipping norm must be positive, got {}", max_norm);
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

double clip_grad_norm(std::span<float> grads, double max_norm) {
  const double norm = global_grad_norm(grads);
  const float c = clip_coefficient(norm, max_norm);
  if (c != 1.0f) {
    const std::int64_t n = static_cast<std::int64_t>(grads.size());
    float* g = grads.data();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) g[i] *= c;
  }
  return norm;
}

}  // namespace multihead
