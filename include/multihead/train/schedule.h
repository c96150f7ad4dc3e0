// SPDX-License-Identifier: Apache-2.0
// Learning-rate schedules: linear warmup, then a decay.
//   warmup:       lr = base * (step + 1) / warmup_steps     for step < warmup_steps
//   constant:     lr = base
//   cosine:       lr = min + (base - min) * (1 + cos(pi * t)) / 2
//   linear:       lr = min + (base - min) * (1 - t)
//   inverse_sqrt: lr = base * sqrt(warmup_steps) / sqrt(step + 1)   (sqrt(1) without warmup)
// with t = (step - warmup) / (total - warmup) in [0, 1]. Steps count from 0.
//
// A run continued past its end (train --resume with more steps) restarts
// the decay where it stood: from restart_step on, cosine and linear decay
// from restart_lr, the rate of the step before, to min_lr over the steps
// left, t = (step - restart_step) / (total - restart_step); a run continued
// inside its warmup finishes it and decays over the whole length. Constant and
// inverse_sqrt rates do not depend on the run's length, so a continued run
// takes the rates a single run of the whole length would.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace multihead {

enum class Decay : std::uint8_t { kConstant, kCosine, kLinear, kInverseSqrt };
Decay parse_decay(std::string_view name);
std::string_view decay_name(Decay d);

struct LrSchedule {
  double base_lr = 1e-3;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  Decay decay = Decay::kConstant;
  std::int64_t restart_step = 0;  // 0: no restart
  double restart_lr = 0.0;
  // Warmup as a share of the run's steps, used when warmup_steps is 0 (as
  // Hugging Face's warmup_ratio): a run sets its length with
  // TrainConfig::set_steps, which turns it into warmup_steps.
  double warmup_ratio = 0.0;

  double lr_at(std::int64_t step) const;
};

// The global L2 norm of the gradients, summed in double over fixed chunks
// (so it does not depend on the thread count); _ref is the plain loop it is
// tested against.
double global_grad_norm(std::span<const float> grads);
double global_grad_norm_ref(std::span<const float> grads);

// torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6) when the
// norm exceeds max_norm, else 1. Training hands it to the optimizer, which
// scales each gradient as it reads it (one pass over memory, the same bits
// as scaling the buffer first).
float clip_coefficient(double norm, double max_norm);

// torch.nn.utils.clip_grad_norm_: scales grads in place by clip_coefficient.
// Returns the norm before clipping.
double clip_grad_norm(std::span<float> grads, double max_norm);

}  // namespace multihead
