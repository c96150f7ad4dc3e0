// SPDX-License-Identifier: Apache-2.0
// What `GET /metrics` says, in Prometheus's text exposition format (0.0.4):
// requests answered by endpoint and status code, a latency histogram by
// endpoint, the batcher's batch sizes, queue depth and inputs cut to the
// model's length, and the connections' counts. Endpoint labels are the
// server's own endpoints or "other", so that no client can mint labels.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "multihead/serve/batcher.h"
#include "multihead/serve/server.h"

namespace multihead::serve_detail {

// Upper bounds of the latency histogram's buckets, seconds (then +Inf).
inline constexpr std::array<double, 14> kLatencyBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                          0.1,    0.25,  0.5,    1,     2.5,  5,     10};

class ServerMetrics {
 public:
  // "/v1/predict", "/v1/health", "/v1/model", "/metrics", or "other".
  static std::string_view endpoint_of(std::string_view path);
  // An answer sent: its request's path, HTTP status and time taken.
  void record(std::string_view path, int status, std::chrono::steady_clock::duration took);
  std::string exposition(const ServeCounters& counters) const;

 private:
  struct Histogram {
    std::array<std::int64_t, kLatencyBounds.size() + 1> counts{};  // per bucket, the last past every bound
    double sum = 0;
    std::int64_t count = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::int64_t> requests_;
  std::map<std::string, Histogram> latency_;
};

}  // namespace multihead::serve_detail
