// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/step_profile.h"

#include <omp.h>

#include <chrono>

#include "multihead/core/context.h"

namespace multihead {
namespace {

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::array<double, kStepParts> StepProfile::seconds() const noexcept {
  std::array<double, kStepParts> s{};
  for (int i = 0; i < kStepParts; ++i) s[i] = static_cast<double>(ns_[i]) * 1e-9;
  return s;
}

StepProfileScope::StepProfileScope(StepPart part) {
  StepProfile* p = context().profile;
  if (p == nullptr || omp_in_parallel()) return;
  profile_ = p;
  if (p->depth_++ == 0) part_ = static_cast<int>(part), start_ns_ = now_ns();
}

StepProfileScope::~StepProfileScope() {
  if (profile_ == nullptr) return;
  if (part_ >= 0) profile_->ns_[static_cast<std::size_t>(part_)] += now_ns() - start_ns_;
  --profile_->depth_;
}

}  // namespace multihead
