#include "multihead/serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "connection.h"
#include "multihead/io/atomic_file.h"
#include "multihead/kernels/machine.h"
#include "multihead/tasks/text_classification.h"
#include "multihead/version.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;
using serve_detail::connection_socket;
using serve_detail::peer_gone;

void reply(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  // Outputs are the model's text: bytes that are not UTF-8 are replaced, not refused.
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", "application/json");
}

// The error a response of cpp-httplib's own making (no body yet) carries.
std::string status_error(const httplib::Request& req, int status, std::int64_t max_body) {
  switch (status) {
    case 404: return fmt::format("no such endpoint: {} {}", req.method, req.path);
    case 413: return fmt::format("the body is larger than {} bytes", max_body);
    case 414: return "the request line is too long";
    case 400: return "the request is not valid HTTP";
    default: return fmt::format("the request cannot be served (HTTP status {})", status);
  }
}

}  // namespace

struct ModelServer::Impl {
  ServeConfig cfg;
  std::string run_dir;
  std::unique_ptr<TrainedRun> run;
  std::string task;
  nlohmann::json model;  // GET /v1/model
  std::unique_ptr<Batcher> batcher;
  httplib::Server http;
  int port = 0;
  std::atomic<bool> stopping{false}, serving{false};
  std::atomic<std::int64_t> bad_requests{0};

  void routes();
  void predict(const httplib::Request& req, httplib::Response& res);
};

ModelServer::ModelServer(const std::string& run_dir, ServeConfig config) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.cfg = std::move(config);
  s.run_dir = run_dir;
  check<ConfigError>(s.cfg.port >= 0 && s.cfg.port <= 65535, "--port must be in [0, 65535], got {}", s.cfg.port);
  check<ConfigError>(s.cfg.connections >= 1, "--connections must be at least 1, got {}", s.cfg.connections);
  s.run = TrainedRun::load(run_dir, s.cfg.threads, s.cfg.precision);
  s.task = s.run->task();
  check_answer_settings(*s.run, s.cfg.defaults);
  s.model = {{"task", s.task},
             {"run", fs::absolute(run_dir).string()},
             {"version", MULTIHEAD_VERSION},
             {"config", nlohmann::json::parse(read_file((fs::path(run_dir) / "config.json").string()))},
             {"machine", machine_summary(machine_info())},
             {"batching",
              {{"max_batch", s.cfg.batching.max_batch},
               {"max_wait_ms", static_cast<double>(s.cfg.batching.max_wait.count()) / 1000}}},
             {"limits",
              {{"max_inputs", s.cfg.limits.max_inputs},
               {"max_input_bytes", s.cfg.limits.max_input_bytes},
               {"max_tokens", s.cfg.limits.max_tokens},
               {"max_beam", s.cfg.limits.max_beam},
               {"max_body_bytes", s.cfg.max_body_bytes}}}};
  if (s.task == TextClassificationJob::kTask) s.model["labels"] = s.run->labels();
  s.batcher = std::make_unique<Batcher>(*s.run, s.cfg.batching);
  s.routes();
  const int connections = s.cfg.connections;
  s.http.new_task_queue = [connections] { return new httplib::ThreadPool(static_cast<std::size_t>(connections)); };
  s.http.set_payload_max_length(static_cast<std::size_t>(s.cfg.max_body_bytes));
  s.http.set_read_timeout(s.cfg.read_timeout_s, 0);
  s.http.set_write_timeout(s.cfg.read_timeout_s, 0);
  s.http.set_keep_alive_max_count(100000);  // a client's connection serves its requests until it closes it
  s.http.set_keep_alive_timeout(2);         // idle this long: closed (and a stop waits no longer)
  s.http.set_tcp_nodelay(true);              // an answer is one small write: send it now
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which a
  // second server on a port in use would bind and share it silently.
  int listener = -1;
  s.http.set_socket_options([&listener](int fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listener = fd;
  });
  s.port = s.cfg.port == 0 ? s.http.bind_to_any_port(s.cfg.host) : s.cfg.port;
  const bool bound = s.cfg.port == 0 ? s.port > 0 : s.http.bind_to_port(s.cfg.host, s.cfg.port);
  check<IoError>(bound, "cannot listen on {}:{} (address in use, or not this machine's)", s.cfg.host, s.cfg.port);
  // cpp-httplib listens with a backlog of 5 connections; under a burst of
  // new connections the kernel would drop the rest. Listening again widens it.
  if (listener >= 0) ::listen(listener, SOMAXCONN);
}

ModelServer::~ModelServer() {
  stop();
  impl_->batcher->stop();
}

int ModelServer::port() const { return impl_->port; }
std::string ModelServer::url() const { return fmt::format("http://{}:{}", impl_->cfg.host, impl_->port); }
const TrainedRun& ModelServer::run() const { return *impl_->run; }

BatcherStats ModelServer::stats() const { return impl_->batcher->stats(); }

void ModelServer::serve() {
  Impl& s = *impl_;
  s.serving = true;
  if (!s.stopping) s.http.listen_after_bind();  // returns once every connection thread has finished
  s.serving = false;
  s.batcher->stop();
}

void ModelServer::stop() {
  Impl& s = *impl_;
  s.stopping = true;
  // A stop that comes while serve() is starting waits for it to listen.
  while (s.serving && !s.http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.http.stop();
}

void ModelServer::Impl::routes() {
  http.Post("/v1/predict", [this](const httplib::Request& req, httplib::Response& res) { predict(req, res); });
  http.Get("/v1/health", [this](const httplib::Request&, httplib::Response& res) {
    const BatcherStats st = batcher->stats();
    reply(res, 200,
          {{"status", "ok"},
           {"task", task},
           {"requests", st.requests},
           {"answered", st.answered},
           {"refused", st.refused},
           {"dropped", st.dropped},
           {"bad_requests", bad_requests.load()},
           {"batches", st.batches},
           {"inputs", st.inputs},
           {"queued", st.queued}});
  });
  http.Get("/v1/model", [this](const httplib::Request&, httplib::Response& res) { reply(res, 200, model); });
  const auto wrong_method = [](const char* allowed) {
    return [allowed](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allowed);
      reply(res, 405, {{"error", fmt::format("{} takes {} requests, not {}", req.path, allowed, req.method)}});
    };
  };
  http.Get("/v1/predict", wrong_method("POST"));
  http.Post("/v1/health", wrong_method("GET"));
  http.Post("/v1/model", wrong_method("GET"));
  const std::int64_t max_body = cfg.max_body_bytes;
  http.set_error_handler(httplib::Server::HandlerWithResponse([this, max_body](const httplib::Request& req,
                                                                                 httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a handler's own JSON error
    ++bad_requests;
    reply(res, res.status, {{"error", status_error(req, res.status, max_body)}});
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string why = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    reply(res, 500, {{"error", fmt::format("the server failed: {}", why)}});
  });
}

void ModelServer::Impl::predict(const httplib::Request& req, httplib::Response& res) {
  PredictRequest pr;
  try {
    pr = parse_predict_request(req.body, task, cfg.defaults, cfg.limits);
  } catch (const RequestError& e) {
    ++bad_requests;
    reply(res, e.status, {{"error", e.what()}});
    return;
  }
  std::shared_ptr<Batcher::Ticket> ticket;
  try {
    ticket = batcher->submit(std::move(pr));
  } catch (const ConfigError& e) {  // stopping
    reply(res, 503, {{"error", e.what()}});
    return;
  }
  const int fd = connection_socket(req);
  for (;;) {
    if (std::optional<Outcome> o = ticket->wait_for(std::chrono::milliseconds(20))) {
      reply(res, o->status, o->body);
      return;
    }
    if (fd >= 0 && peer_gone(fd)) {
      ticket->abandon();  // nobody to answer: the batcher drops it unless its batch has begun
      reply(res, 499, {{"error", "the client closed the connection"}});
      return;
    }
  }
}

}  // namespace multihead
