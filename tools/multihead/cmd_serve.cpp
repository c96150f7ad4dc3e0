// SPDX-License-Identifier: Apache-2.0
// multihead serve: a trained run behind HTTP, until SIGINT or SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "commands.h"
#include "multihead/core/precision.h"
#include "multihead/serve/server.h"

namespace multihead::cli {
namespace {

struct ServeOpts {
  std::string run, precision;
  ServeConfig cfg;
  int threads = 0;  // the model's (0: all cores)
  double max_wait_ms = std::chrono::duration<double, std::milli>(BatchLimits{}.max_wait).count();
};

void serve(ServeOpts& o) {
  check<ConfigError>(o.max_wait_ms >= 0 && o.max_wait_ms <= 10000, "--max-wait-ms must be in [0, 10000], got {}",
                     o.max_wait_ms);
  o.cfg.batching.max_wait = std::chrono::microseconds(static_cast<std::int64_t>(o.max_wait_ms * 1000));
  if (!o.precision.empty()) o.cfg.precision = parse_precision(o.precision);
  // SIGINT and SIGTERM go to one watcher thread (blocked in every other
  // thread, which inherit the mask): it stops the server, which answers the
  // requests in flight before serve() returns.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  const ContextScope context(command_context(o.threads));
  ModelServer server(o.run, o.cfg);
  for (const std::string& w : server.run().warnings()) fmt::print(stderr, "multihead: warning: {}\n", w);
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    server.stop();
  });
  fmt::print("multihead serve: {} run on {} (max batch {}, max wait {} ms)\n", server.run().task(), server.url(),
             o.cfg.batching.max_batch, o.max_wait_ms);
  std::fflush(stdout);
  server.serve();
  // Wakes the watcher when serve() ended without a signal: it waits in
  // sigwait for this signal, which ends no thread.
  pthread_kill(watcher.native_handle(), SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
  watcher.join();
  fmt::print("multihead serve: {}\n", server.counters().closing_line());
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOpts>();
  CLI::App* sub = app.add_subcommand(
      "serve",
      "Serve a trained run over HTTP: POST /v1/predict {\"inputs\": [...]} answers as predict --json does, batching "
      "requests that arrive together; POST /v1/embed, as embed --json does (text encoders); GET /v1/health, GET "
      "/v1/model, GET /metrics (Prometheus); every answer has an "
      "X-Request-Id header");
  add_trained_run_options(*sub, o->run, o->cfg.defaults);
  sub->add_option("--host", o->cfg.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", o->cfg.port, "Port to listen on (0: any free port, printed at start)")
      ->capture_default_str();
  sub->add_option("--threads", o->threads, "Threads of the model (0: all cores)")->capture_default_str();
  sub->add_option("--max-batch", o->cfg.batching.max_batch, "Inputs answered together in one model call (1: none)")
      ->capture_default_str();
  sub->add_option("--max-wait-ms", o->max_wait_ms,
                  "Longest wait for a batch to fill after its first request (0: a batch is what queued while "
                  "the model answered the one before)")
      ->capture_default_str();
  sub->add_option("--max-inputs", o->cfg.limits.max_inputs, "Inputs one request may carry")->capture_default_str();
  sub->add_option(
         "--max-input-bytes", o->cfg.limits.max_input_bytes,
         "Bytes one input may have: a safety bound (a text longer than the model reads is answered from its first "
         "tokens, as predict answers it, and marked \"truncated\")")
      ->capture_default_str();
  sub->add_option("--max-body-bytes", o->cfg.max_body_bytes, "Bytes one request body may have (more: 413)")
      ->capture_default_str();
  sub->add_option("--max-bodies-bytes", o->cfg.max_bodies_bytes,
                  "Bytes of request bodies held at once across connections until answered (a chunked body counts "
                  "as --max-body-bytes; more: 503)")
      ->capture_default_str();
  sub->add_option("--connections", o->cfg.connections,
                  fmt::format("Connections open at once (0: {}, or as many as the open-file limit allows); past "
                              "them a new one takes the slot of the one that has waited longest without a whole "
                              "request header, else it is closed at once",
                              ServeConfig::kDefaultConnections))
      ->capture_default_str();
  sub->add_option("--connections-per-peer", o->cfg.connections_per_peer,
                  "Connections open at once from one address (0: half of --connections), so that no client holds "
                  "every slot; past them its own longest-waiting one makes room, as above")
      ->capture_default_str();
  sub->add_option("--request-timeout-ms", o->cfg.request_timeout_ms,
                  "A request's header and body must arrive within this, however slowly they drip")
      ->capture_default_str();
  sub->add_option("--idle-timeout-ms", o->cfg.idle_timeout_ms, "A connection idle this long between requests is closed")
      ->capture_default_str();
  sub->add_option("--precision", o->precision,
                  fmt::format("fp32, bf16, fp16 or int8 (default: the run's own); {}", kInferencePrecisionCompute));
  return {sub, [o] { serve(*o); }};
}

}  // namespace multihead::cli
