// SPDX-License-Identifier: Apache-2.0
#include "multihead/core/step_profile.h"

#include <omp.h>

#include <atomic>
#include <chrono>

namespace multihead {
namespace {

std::atomic<bool> g_enabled{false};
// Written only by the thread that runs the step, outside parallel regions.
std::array<long long, kStepParts> g_ns{};
thread_local int t_depth = 0;

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void enable_step_profile(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void reset_step_profile() { g_ns.fill(0); }

std::array<double, kStepParts> step_profile_seconds() {
  std::array<double, kStepParts> s{};
  for (int i = 0; i < kStepParts; ++i) s[i] = static_cast<double>(g_ns[i]) * 1e-9;
  return s;
}

StepProfileScope::StepProfileScope(StepPart part) {
  if (!g_enabled.load(std::memory_order_relaxed) || omp_in_parallel()) return;
  counted_ = true;
  if (t_depth++ == 0) part_ = static_cast<int>(part), start_ns_ = now_ns();
}

StepProfileScope::~StepProfileScope() {
  if (!counted_) return;
  if (part_ >= 0) g_ns[static_cast<std::size_t>(part_)] += now_ns() - start_ns_;
  --t_depth;
}

}  // namespace multihead
