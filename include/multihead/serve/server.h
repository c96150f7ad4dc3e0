// `multihead serve`: a trained run behind HTTP/1.1 (cpp-httplib), for other
// programs to use.
//   POST /v1/predict  {"inputs": [...], settings...} -> {"outputs": [answer, ...]}
//                     (answers as `predict --json` gives them; see serve/request.h)
//   GET  /v1/health   {"status": "ok", and the batcher's counts}
//   GET  /v1/model    the run's task, config, labels, and the machine it runs on
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

struct ServeConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: any free port (port() says which)
  int threads = 0;                        // the model's (0: all cores)
  std::optional<Precision> precision;     // of the activations (default: the run's)
  BatchLimits batching;
  RequestLimits limits;
  AnswerSettings defaults;                // for settings a request leaves out
  int connections = 128;                  // connection threads: a slow client holds one, never the model
  std::int64_t max_body_bytes = 1 << 20;  // larger bodies: 413
  int read_timeout_s = 5;                 // a client silent this long mid-request is dropped
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
  BatcherStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace multihead
