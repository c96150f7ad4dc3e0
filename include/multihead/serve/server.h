// SPDX-License-Identifier: Apache-2.0
// `multihead serve`: a trained run behind HTTP/1.1 (Boost.Beast), for other
// programs to use.
//   POST /v1/predict  {"inputs": [...], settings...} -> {"outputs": [answer, ...]}
//                     (answers as `predict --json` gives them; see serve/request.h)
//   POST /v1/embed    {"inputs": [...]} -> {"outputs": [{"embedding": [...]}, ...]}
//                     (text encoders: as `embed --json` gives them)
//   GET  /v1/health   {"status": "ok", and the batcher's counts}
//   GET  /v1/model    the run's task, config, labels, and the machine it runs on
//   GET  /metrics     Prometheus's text format: requests by endpoint and code,
//                     latency and batch-size histograms, queue depth, inputs truncated
// Every response carries an X-Request-Id header: the client's own when it
// sent a usable one (1 to 128 printable ASCII characters), else the server's.
// Every error is a JSON object {"error": why} with a 4xx status (5xx: the
// server's own failure); the server keeps serving after any of them.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "multihead/core/precision.h"
#include "multihead/serve/batcher.h"
#include "multihead/serve/request.h"
#include "multihead/tasks/answers.h"

namespace multihead {

// Bounds of the numeric settings: far past any use, small enough that no
// setting can exhaust the machine by itself.
inline constexpr std::int64_t kMaxServeCount = 1 << 20;  // inputs, batch size, tokens, beam
inline constexpr std::int64_t kMaxServeBytes = 1 << 30;  // an input, a body

struct ServeConfig {
  static constexpr std::int64_t kDefaultConnections = 4096;
  static constexpr std::int64_t kMaxConnections = 1 << 16;
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port (port() says which)
  std::optional<Precision> precision;  // of the activations (default: the run's)
  BatchLimits batching;
  RequestLimits limits;
  AnswerSettings defaults;  // for settings a request leaves out
  // Connections open at once (0: kDefaultConnections, or fewer where the
  // process may not open that many files). An idle or slow connection costs
  // a socket and a buffer, no thread. Past them a new connection takes the
  // slot of the one that has waited longest without a complete request
  // header (that one is closed), else it is closed at once.
  std::int64_t connections = 0;
  // Connections open at once from one address (0: half of `connections`),
  // so that one client cannot hold every slot: past them a new one from that
  // address takes the slot of that address's connection that has waited
  // longest without a complete header, else it is closed at once.
  std::int64_t connections_per_peer = 0;
  std::int64_t max_body_bytes = 1 << 20;  // larger bodies, chunked or not: 413
  // Request bodies held at once across all connections, until answered (a
  // chunked one counts as max_body_bytes); a request past it: 503. With the
  // defaults, 256 bodies of the largest size.
  std::int64_t max_bodies_bytes = std::int64_t{256} << 20;
  std::int64_t request_timeout_ms = 10000;  // a request's header and body arrive within this, or it is dropped
  std::int64_t idle_timeout_ms = 5000;      // a connection idle this long between requests is closed
};

// ConfigError naming the first flag out of its range (--port [0, 65535],
// --connections [0, 2^16], --max-body-bytes [1, 2^30], ...).
void check_serve_config(const ServeConfig& config);

// Every count the server keeps, read at one moment: what /v1/health,
// /metrics and the closing line of `multihead serve` all say. A request
// refused before it reached the model (malformed, too large, unknown) is
// counted as a request and as refused, as /metrics counts it.
struct ServeCounters {
  BatcherStats batcher;
  std::int64_t open_connections = 0, turned_away = 0, evicted = 0, bad_requests = 0, handler_failures = 0;

  std::int64_t requests() const { return batcher.requests + bad_requests; }
  std::int64_t refused() const { return batcher.refused + bad_requests; }
  // "stopped after 10 requests (2 answered, 8 refused, 0 dropped: client gone)".
  std::string closing_line() const;
};

class ModelServer {
 public:
  // Loads the run and binds the address (ConfigError or IoError when either fails).
  ModelServer(const std::string& run_dir, ServeConfig config);
  ~ModelServer();
  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;

  int port() const;
  std::string url() const;  // "http://127.0.0.1:8080"
  const TrainedRun& run() const;
  // Serves until stop(); before returning, answers the requests in flight.
  void serve();
  // From any thread (a signal watcher's, say): stops taking connections.
  void stop();
  ServeCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace multihead
