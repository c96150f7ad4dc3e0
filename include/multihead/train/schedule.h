// Learning-rate schedules: linear warmup, then a decay.
//   warmup:       lr = base * (step + 1) / warmup_steps     for step < warmup_steps
//   constant:     lr = base
//   cosine:       lr = min + (base - min) * (1 + cos(pi * t)) / 2
//   linear:       lr = min + (base - min) * (1 - t)
//   inverse_sqrt: lr = base * sqrt(warmup_steps) / sqrt(step + 1)   (sqrt(1) without warmup)
// with t = (step - warmup) / (total - warmup) in [0, 1]. Steps count from 0.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace multihead {

enum class Decay : std::uint8_t { kConstant, kCosine, kLinear, kInverseSqrt };
Decay parse_decay(std::string_view name);

struct LrSchedule {
  double base_lr = 1e-3;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  Decay decay = Decay::kConstant;

  double lr_at(std::int64_t step) const;
};

// torch.nn.utils.clip_grad_norm_: scales grads by max_norm / (norm + 1e-6)
// when the global L2 norm exceeds max_norm. Returns the norm before clipping.
// The sum runs in fixed chunks, so it does not depend on the thread count.
double clip_grad_norm(std::span<float> grads, double max_norm);
double global_grad_norm(std::span<const float> grads);

}  // namespace multihead
