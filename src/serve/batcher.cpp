// SPDX-License-Identifier: Apache-2.0
#include "multihead/serve/batcher.h"

#include <algorithm>
#include <utility>

#include "multihead/core/context.h"
#include "multihead/core/threading.h"
#include "multihead/tasks/answers.h"

namespace multihead {

std::optional<Outcome> Batcher::Ticket::take() {
  std::lock_guard lock(mutex_);
  return std::exchange(outcome_, std::nullopt);
}

void Batcher::Ticket::on_done(std::function<void()> done) {
  {
    std::lock_guard lock(mutex_);
    if (!outcome_) {
      on_done_ = std::move(done);
      return;
    }
  }
  done();
}

Batcher::Batcher(TrainedRun& run, BatchLimits limits) : run_(run), limits_(limits) {
  check<ConfigError>(limits_.max_batch >= 1, "--max-batch must be at least 1, got {}", limits_.max_batch);
  check<ConfigError>(limits_.max_wait.count() >= 0, "--max-wait-ms must be >= 0");
  // The worker runs under this thread's context, and its thread count
  // (OpenMP's count is each thread's own).
  RuntimeContext ctx = context();
  ctx.threads = num_threads();
  check_threads(ctx.threads);  // here: the worker's scope must not throw
  worker_ = std::thread([this, ctx] {
    const ContextScope scope(ctx);
    {
      std::lock_guard lock(mutex_);
      stats_.threads = num_threads();
    }
    work();
  });
}

Batcher::~Batcher() { stop(); }

std::shared_ptr<Batcher::Ticket> Batcher::submit(PredictRequest request) {
  auto t = std::make_shared<Ticket>();
  t->request_ = std::move(request);
  t->arrived_ = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    check<ConfigError>(!stopping_, "the server is stopping");
    queue_.push_back(t);
    queued_inputs_ += static_cast<std::int64_t>(t->request_.inputs.size());
    ++stats_.requests;
  }
  arrived_.notify_one();
  return t;
}

void Batcher::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  arrived_.notify_one();
  if (worker_.joinable()) worker_.join();
}

BatcherStats Batcher::stats() const {
  std::lock_guard lock(mutex_);
  BatcherStats s = stats_;
  s.queued = static_cast<std::int64_t>(queue_.size());
  return s;
}

void Batcher::finish(Ticket& t, Outcome o) {
  std::function<void()> done;
  {
    std::lock_guard lock(t.mutex_);
    t.outcome_ = std::move(o);
    done = std::move(t.on_done_);
  }
  if (done) done();
}

void Batcher::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    arrived_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to answer
    // Wait for the batch to fill, or for the oldest request's time to run out.
    const auto deadline = queue_.front()->arrived_ + limits_.max_wait;
    arrived_.wait_until(lock, deadline, [&] { return stopping_ || queued_inputs_ >= limits_.max_batch; });
    std::vector<std::shared_ptr<Ticket>> batch = take_batch();
    if (batch.empty()) continue;
    lock.unlock();
    run_batch(std::move(batch));
    lock.lock();
  }
}

std::vector<std::shared_ptr<Batcher::Ticket>> Batcher::take_batch() {
  std::vector<std::shared_ptr<Ticket>> batch;
  std::int64_t inputs = 0;
  const AnswerSettings* settings = nullptr;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Ticket& t = **it;
    const auto n = static_cast<std::int64_t>(t.request_.inputs.size());
    if (t.abandoned_) {
      ++stats_.dropped;
    } else if (!settings) {
      settings = &t.request_.settings;  // the oldest live request goes, however many inputs it has
    } else if (!(t.request_.settings == *settings) || inputs + n > limits_.max_batch) {
      ++it;
      continue;
    }
    if (!t.abandoned_) {
      inputs += n;
      batch.push_back(*it);
    }
    queued_inputs_ -= n;
    it = queue_.erase(it);
    if (inputs >= limits_.max_batch) break;
  }
  return batch;
}

void Batcher::count_refused(std::size_t requests) {
  std::lock_guard lock(mutex_);
  stats_.refused += static_cast<std::int64_t>(requests);
}

void Batcher::run_batch(std::vector<std::shared_ptr<Ticket>> batch) {
  // A bad input fails its own request only: the rest are answered again without it.
  while (!batch.empty()) {
    std::vector<std::string> inputs;
    for (const auto& t : batch) inputs.insert(inputs.end(), t->request_.inputs.begin(), t->request_.inputs.end());
    try {
      std::vector<nlohmann::json> answers = answer(run_, inputs, batch.front()->request_.settings);
      // Counted before any client hears back, so that a health request sent
      // after an answer arrived already sees it.
      {
        std::lock_guard lock(mutex_);
        stats_.answered += static_cast<std::int64_t>(batch.size());
        stats_.batches += 1;
        stats_.inputs += static_cast<std::int64_t>(inputs.size());
        std::size_t bucket = 0;
        while (bucket < kBatchSizeBounds.size() && static_cast<std::int64_t>(inputs.size()) > kBatchSizeBounds[bucket])
          ++bucket;
        ++stats_.batch_sizes[bucket];
        for (const nlohmann::json& a : answers) stats_.truncated += a.contains("truncated");
      }
      std::size_t at = 0;
      for (const auto& t : batch) {
        nlohmann::json outputs = nlohmann::json::array();
        for (std::size_t i = 0; i < t->request_.inputs.size(); ++i) outputs.push_back(std::move(answers[at++]));
        finish(*t, {200, {{"outputs", std::move(outputs)}}});
      }
      return;
    } catch (const InputError& e) {
      std::size_t first = 0, k = 0;
      while (first + batch[k]->request_.inputs.size() <= e.index) first += batch[k++]->request_.inputs.size();
      count_refused(1);
      finish(*batch[k], {400, {{"error", fmt::format("inputs[{}]: {}", e.index - first, e.what())}}});
      batch.erase(batch.begin() + static_cast<std::ptrdiff_t>(k));
    } catch (const Error& e) {  // the settings, shared by the whole batch
      count_refused(batch.size());
      for (const auto& t : batch) finish(*t, {400, {{"error", e.what()}}});
      return;
    } catch (const std::exception& e) {
      count_refused(batch.size());
      for (const auto& t : batch) finish(*t, {500, {{"error", fmt::format("the model failed: {}", e.what())}}});
      return;
    }
  }
}

}  // namespace multihead
