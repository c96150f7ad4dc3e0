// SPDX-License-Identifier: Apache-2.0
// Where a training step's time goes, for `bench train`: wall time inside the
// GEMMs, the attention kernels and the optimizer (with clipping); the rest of
// a step is elementwise work (norms, activations, dropout, softmax of the
// loss, copies). Off unless enabled, and then a clock read at each
// outermost scope: only the first part entered counts (a GEMM inside an
// attention kernel is attention time) and only outside parallel regions.
#pragma once

#include <array>

namespace multihead {

enum class StepPart { kGemm, kAttention, kOptimizer };
inline constexpr int kStepParts = 3;

void enable_step_profile(bool on);
void reset_step_profile();
// Seconds spent in each part since the last reset, indexed by StepPart.
std::array<double, kStepParts> step_profile_seconds();

class StepProfileScope {
 public:
  explicit StepProfileScope(StepPart part);
  ~StepProfileScope();
  StepProfileScope(const StepProfileScope&) = delete;
  StepProfileScope& operator=(const StepProfileScope&) = delete;

 private:
  bool counted_ = false;  // counted in the depth (profiling on, outside parallel regions)
  int part_ = -1;         // the part timed, when this is the outermost scope
  long long start_ns_ = 0;
};

}  // namespace multihead
