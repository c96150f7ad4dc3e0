// SPDX-License-Identifier: Apache-2.0
#include "metrics.h"

#include <fmt/format.h>

namespace multihead::serve_detail {

namespace {

// A sample line's value: integers as integers, the rest with every digit a double needs.
std::string value(double v) { return fmt::format("{}", v); }

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string_view ServerMetrics::endpoint_of(std::string_view path) {
  for (std::string_view known : {"/v1/predict", "/v1/embed", "/v1/health", "/v1/model", "/metrics"})
    if (path == known) return known;
  return "other";
}

void ServerMetrics::record(std::string_view path, int status, std::chrono::steady_clock::duration took) {
  const std::string endpoint(endpoint_of(path));
  const double seconds = std::chrono::duration<double>(took).count();
  std::size_t bucket = 0;
  while (bucket < kLatencyBounds.size() && seconds > kLatencyBounds[bucket]) ++bucket;
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
  Histogram& h = latency_[endpoint];
  ++h.counts[bucket];
  h.sum += seconds;
  ++h.count;
}

std::string ServerMetrics::exposition(const ServeCounters& counters) const {
  const BatcherStats& b = counters.batcher;
  const ServeCounters& server = counters;
  std::string out;
  {
    std::lock_guard lock(mutex_);
    family(out, "multihead_http_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (const auto& [key, n] : requests_)
      out += fmt::format("multihead_http_requests_total{{endpoint=\"{}\",code=\"{}\"}} {}\n", key.first, key.second, n);
    family(out, "multihead_http_request_duration_seconds", "histogram",
           "Seconds from a request's header read to its answer, by endpoint.");
    for (const auto& [endpoint, h] : latency_) {
      std::int64_t cumulative = 0;
      for (std::size_t i = 0; i < kLatencyBounds.size(); ++i) {
        cumulative += h.counts[i];
        out += fmt::format("multihead_http_request_duration_seconds_bucket{{endpoint=\"{}\",le=\"{}\"}} {}\n", endpoint,
                           value(kLatencyBounds[i]), cumulative);
      }
      out += fmt::format("multihead_http_request_duration_seconds_bucket{{endpoint=\"{}\",le=\"+Inf\"}} {}\n", endpoint,
                         h.count);
      out += fmt::format("multihead_http_request_duration_seconds_sum{{endpoint=\"{}\"}} {}\n", endpoint, value(h.sum));
      out += fmt::format("multihead_http_request_duration_seconds_count{{endpoint=\"{}\"}} {}\n", endpoint, h.count);
    }
  }
  family(out, "multihead_batch_inputs", "histogram", "Inputs in each call of the model (requests batched together).");
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i < kBatchSizeBounds.size(); ++i) {
    cumulative += b.batch_sizes[i];
    out += fmt::format("multihead_batch_inputs_bucket{{le=\"{}\"}} {}\n", kBatchSizeBounds[i], cumulative);
  }
  out += fmt::format("multihead_batch_inputs_bucket{{le=\"+Inf\"}} {}\n", b.batches);
  out += fmt::format("multihead_batch_inputs_sum {}\nmultihead_batch_inputs_count {}\n", b.inputs, b.batches);
  const auto one = [&](std::string_view name, std::string_view type, std::string_view help, std::int64_t v) {
    family(out, name, type, help);
    out += fmt::format("{} {}\n", name, v);
  };
  one("multihead_queue_requests", "gauge", "Requests waiting for the model now.", b.queued);
  one("multihead_inputs_total", "counter", "Inputs answered.", b.inputs);
  one("multihead_inputs_truncated_total", "counter",
      "Inputs longer than the model reads, answered from their first tokens (as predict does).", b.truncated);
  one("multihead_requests_dropped_total", "counter", "Requests whose client left before the model began them.",
      b.dropped);
  one("multihead_connections_open", "gauge", "Client connections open now.", server.open_connections);
  one("multihead_connections_turned_away_total", "counter",
      "Connections closed at once: as many were open as allowed (or from their address), each holding a request.",
      server.turned_away);
  one("multihead_connections_evicted_total", "counter",
      "Connections closed to make room for a new one: the one that had waited longest without a complete request.",
      server.evicted);
  one("multihead_bad_requests_total", "counter", "Requests refused as malformed, too large or unknown.",
      server.bad_requests);
  one("multihead_handler_failures_total", "counter", "Connections lost to a failure of the server's own.",
      server.handler_failures);
  one("multihead_model_threads", "gauge", "Threads the model runs on.", b.threads);
  return out;
}

}  // namespace multihead::serve_detail
