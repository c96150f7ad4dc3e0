// SPDX-License-Identifier: Apache-2.0
// Where a training step's time goes, for `bench train`: wall time inside the
// GEMMs, the attention kernels and the optimizer (with clipping); the rest of
// a step is elementwise work (norms, activations, dropout, softmax of the
// loss, copies). Measured only for a thread whose context names a
// StepProfile (core/context.h), and then a clock read at each outermost
// scope: only the first part entered counts (a GEMM inside an attention
// kernel is attention time) and only outside parallel regions.
#pragma once

#include <array>

namespace multihead {

enum class StepPart { kGemm, kAttention, kOptimizer };
inline constexpr int kStepParts = 3;

// The time of each part, for the thread that runs the steps.
class StepProfile {
 public:
  void reset() noexcept { ns_.fill(0); }
  // Seconds spent in each part since construction or the last reset, indexed by StepPart.
  std::array<double, kStepParts> seconds() const noexcept;

 private:
  friend class StepProfileScope;
  std::array<long long, kStepParts> ns_{};
  int depth_ = 0;  // scopes open (outside parallel regions)
};

// Times its lifetime as `part` in the calling thread's context's profile.
class StepProfileScope {
 public:
  explicit StepProfileScope(StepPart part);
  ~StepProfileScope();
  StepProfileScope(const StepProfileScope&) = delete;
  StepProfileScope& operator=(const StepProfileScope&) = delete;

 private:
  StepProfile* profile_ = nullptr;  // counted in its depth (profiled, outside parallel regions)
  int part_ = -1;                   // the part timed, when this is the outermost scope
  long long start_ns_ = 0;
};

}  // namespace multihead
