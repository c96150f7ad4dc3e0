// SPDX-License-Identifier: Apache-2.0
// The one thread that runs a served model. Requests from any number of
// connection threads queue here; the worker answers them in batches of up to
// max_batch inputs, waiting at most max_wait after the oldest request for
// more to arrive, and batches only requests with equal settings. A request
// whose client has gone (abandon()) before its batch starts is dropped
// unanswered; the batch in flight always finishes.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "multihead/serve/request.h"
#include "multihead/tasks/trained_run.h"

namespace multihead {

struct BatchLimits {
  std::int64_t max_batch = 32;  // inputs in one model call (1: no batching)
  // After the oldest queued request. None by default: a batch is then what
  // queued while the model answered the one before, so an idle server adds
  // no latency and a busy one still batches; waiting for a batch to fill
  // only lowered throughput for the spam classifier (docs/BENCHMARKS.md,
  // "multihead serve under load").
  std::chrono::microseconds max_wait{0};
};

// What an HTTP response carries: 200 with {"outputs": [answer, ...]}, 4xx
// with {"error": why} for a request its run cannot answer, 500 for a failure
// of the server's own.
struct Outcome {
  int status = 200;
  nlohmann::json body;
};

// Upper bounds of the batch-size histogram's buckets, in inputs (then +Inf).
inline constexpr std::array<std::int64_t, 11> kBatchSizeBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

struct BatcherStats {
  std::int64_t requests = 0;   // submitted
  std::int64_t answered = 0;   // with 200
  std::int64_t refused = 0;    // with an error status
  std::int64_t dropped = 0;    // client gone before the work began: never run
  std::int64_t batches = 0;    // model calls
  std::int64_t inputs = 0;     // inputs answered in them
  std::int64_t queued = 0;     // requests waiting now
  std::int64_t truncated = 0;  // inputs answered from their first tokens: longer than the model reads
  // Model calls by their inputs: [i] those of at most kBatchSizeBounds[i]
  // (and more than the bound before), the last those past every bound.
  std::array<std::int64_t, kBatchSizeBounds.size() + 1> batch_sizes{};
  int threads = 0;  // the model thread's OpenMP count (0 until it has started)
};

class Batcher {
 public:
  // A submitted request, shared by its connection and the worker.
  class Ticket {
   public:
    // The outcome, moved out, once the worker has made it; else nothing.
    std::optional<Outcome> take();
    // Calls `done` once the outcome is there: at once if it is, else from the
    // worker's thread. A request dropped unanswered (abandoned) never calls it.
    void on_done(std::function<void()> done);
    // The client is gone: the worker skips the request if it has not begun it.
    void abandon() { abandoned_ = true; }

   private:
    friend class Batcher;
    PredictRequest request_;
    std::chrono::steady_clock::time_point arrived_;
    std::atomic<bool> abandoned_{false};
    std::mutex mutex_;
    std::optional<Outcome> outcome_;
    std::function<void()> on_done_;
  };

  Batcher(TrainedRun& run, BatchLimits limits);
  ~Batcher();  // stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  std::shared_ptr<Ticket> submit(PredictRequest request);
  // Answers every request queued so far, then ends the worker.
  void stop();
  BatcherStats stats() const;

 private:
  void work();
  // The next batch: the oldest live request and, after it, those with equal
  // settings that fit in max_batch inputs. Called with mutex_ held.
  std::vector<std::shared_ptr<Ticket>> take_batch();
  void run_batch(std::vector<std::shared_ptr<Ticket>> batch);
  void count_refused(std::size_t requests);
  static void finish(Ticket& t, Outcome o);

  TrainedRun& run_;
  BatchLimits limits_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<std::shared_ptr<Ticket>> queue_;
  std::int64_t queued_inputs_ = 0;
  bool stopping_ = false;
  BatcherStats stats_;
  std::thread worker_;
};

}  // namespace multihead
