// SPDX-License-Identifier: Apache-2.0
// Timing helpers of the benchmarks behind `multihead bench`. Internal header.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace multihead::bench {

using Clock = std::chrono::steady_clock;

// Warm-up runs `warmup` iterations and, unless that is 0, for at least this long: a fresh
// process's first calls run slow (first touches of buffers, thread start-up);
// measured here, oneDNN's sgemm (4096 x 512 by 512 x 1536) gave 300 GFLOP/s
// over 10 iterations after 2 warm-up calls and 371 over 100.
constexpr double kMinWarmupSeconds = 1.0;

template <typename F>
std::vector<double> time_ms(int warmup, int iters, F&& f) {
  const auto start = Clock::now();
  for (int i = 0;
       i < warmup || (warmup > 0 && std::chrono::duration<double>(Clock::now() - start).count() < kMinWarmupSeconds);
       ++i)
    f();
  std::vector<double> out;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    f();
    out.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return out;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace multihead::bench
