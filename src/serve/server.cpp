// SPDX-License-Identifier: Apache-2.0
#include "multihead/serve/server.h"

#include <sys/resource.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <random>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "multihead/core/context.h"
#include "multihead/io/atomic_file.h"
#include "multihead/kernels/machine.h"
#include "multihead/version.h"
#include "metrics.h"
#include "session.h"

namespace multihead {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
using net::ip::tcp;
using serve_detail::json_response;
using serve_detail::Session;
using serve_detail::http::request;
using serve_detail::http::response;
using serve_detail::http::string_body;

// Threads that read and write every connection: the work on them is parsing
// and copying bytes, never waiting, so two keep up with the model's thread.
constexpr int kIoThreads = 2;
// Files the process keeps open besides its connections (the run, the
// listener, the standard streams, the libraries').
constexpr std::int64_t kOtherFiles = 64;

// A flag's value within [lo, hi], else a ConfigError naming the flag.
void check_range(const char* flag, std::int64_t v, std::int64_t lo, std::int64_t hi) {
  check<ConfigError>(v >= lo && v <= hi, "{} must be in [{}, {}], got {}", flag, lo, hi, v);
}

// Room for `connections` open sockets (0: as many as the process may open
// files for, up to kDefaultConnections): the soft limit on open files is
// raised toward the hard one as far as they need, else a ConfigError says
// what to do. Returns the connections there is room for.
std::int64_t make_room_for(std::int64_t connections) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return connections > 0 ? connections : 1024;
  const std::int64_t wanted = connections > 0 ? connections : ServeConfig::kDefaultConnections;
  const auto needed = static_cast<rlim_t>(wanted + kOtherFiles);
  if (lim.rlim_cur < needed) {
    lim.rlim_cur = lim.rlim_max == RLIM_INFINITY ? needed : std::min(needed, lim.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  const auto room = static_cast<std::int64_t>(lim.rlim_cur) - kOtherFiles;
  if (connections == 0) {
    check<ConfigError>(room >= 1, "the process may open only {} files (ulimit -n): too few to serve",
                       static_cast<std::int64_t>(lim.rlim_cur));
    return std::min(room, wanted);
  }
  check<ConfigError>(room >= connections,
                     "--connections {} needs {} open files, and this process may have {} (ulimit -n): ask for "
                     "fewer connections or raise the limit",
                     connections, static_cast<std::int64_t>(needed), static_cast<std::int64_t>(lim.rlim_cur));
  return connections;
}

}  // namespace

void check_serve_config(const ServeConfig& c) {
  check_range("--port", c.port, 0, 65535);
  check_range("--connections", c.connections, 0, ServeConfig::kMaxConnections);
  check_range("--connections-per-peer", c.connections_per_peer, 0, ServeConfig::kMaxConnections);
  check_range("--max-batch", c.batching.max_batch, 1, kMaxServeCount);
  check_range("--max-inputs", c.limits.max_inputs, 1, kMaxServeCount);
  check_range("--max-input-bytes", c.limits.max_input_bytes, 1, kMaxServeBytes);
  check_range("limits.max_tokens", c.limits.max_tokens, 0, kMaxGeneratedTokens);
  check_range("limits.max_beam", c.limits.max_beam, 1, kMaxServeCount);
  check_range("--max-body-bytes", c.max_body_bytes, 1, kMaxServeBytes);
  check_range("--max-bodies-bytes", c.max_bodies_bytes, c.max_body_bytes, kMaxServeBytes * 16);
  check_range("--request-timeout-ms", c.request_timeout_ms, 100, 3'600'000);
  check_range("--idle-timeout-ms", c.idle_timeout_ms, 100, 3'600'000);
}

struct ModelServer::Impl final : serve_detail::Endpoints {
  ServeConfig cfg;
  std::unique_ptr<TrainedRun> run;
  std::string task;
  std::vector<std::string> fields;  // the request fields the run takes beyond "inputs"
  nlohmann::json model;             // GET /v1/model
  std::unique_ptr<Batcher> batcher;
  net::io_context ioc{kIoThreads};
  tcp::acceptor acceptor{ioc};
  serve_detail::SessionLimits limits;
  int port = 0;
  std::int64_t connections = 0;  // open at once, at most
  std::int64_t per_peer = 0;     // open at once from one address, at most
  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> bad_requests{0}, turned_away{0}, evicted{0}, handler_failures{0};
  std::atomic<std::uint64_t> bodies_held{0};
  // The open connections by the order they came in, their count by the
  // address they came from, and those without a complete request header by
  // when they began to wait (the longest-waiting first).
  struct Open {
    std::weak_ptr<Session> session;
    std::string peer;
    std::int64_t since = -1;  // waiting since (steady_clock ticks), or -1: holds a request
  };
  using Waiting = std::set<std::pair<std::int64_t, std::uint64_t>>;  // (since, id)
  struct Peer {
    std::int64_t open = 0;
    Waiting waiting;
  };
  std::mutex sessions_mutex;
  std::map<std::uint64_t, Open> sessions;
  std::unordered_map<std::string, Peer> peers;
  Waiting waiting_since;
  std::uint64_t accepted = 0;

  ServeCounters counters() {
    ServeCounters c;
    c.batcher = batcher->stats();
    c.turned_away = turned_away.load();
    c.evicted = evicted.load();
    c.bad_requests = bad_requests.load();
    c.handler_failures = handler_failures.load();
    std::lock_guard lock(sessions_mutex);
    c.open_connections = static_cast<std::int64_t>(sessions.size());
    return c;
  }
  void listen();
  void accept();
  void admit(tcp::socket socket);
  bool evict_longest_waiting(const Waiting& among);
  void drop(std::map<std::uint64_t, Open>::iterator it);
  void forget(std::uint64_t id);
  void waiting(std::uint64_t id, std::int64_t since) override { waiting(id, since, false); }
  void waiting(std::uint64_t id, std::int64_t since, bool locked);
  void holding(std::uint64_t id) override;

  // Endpoints
  response<string_body> answer(const request<string_body>& req) override;
  std::shared_ptr<Batcher::Ticket> submit(const std::string& body, bool embed,
                                          std::optional<response<string_body>>& refused) override;
  bool stopping() const override { return stopping_; }
  void count_bad_request() override { ++bad_requests; }
  bool reserve_body(std::uint64_t bytes) override {
    std::uint64_t held = bodies_held.load();
    do {
      if (held + bytes > static_cast<std::uint64_t>(cfg.max_bodies_bytes)) return false;
    } while (!bodies_held.compare_exchange_weak(held, held + bytes));
    return true;
  }
  void release_body(std::uint64_t bytes) override { bodies_held -= bytes; }
  // "<this server's start, hex>-<sequence>": unique across restarts too.
  std::string new_request_id() override { return fmt::format("{:08x}-{}", id_prefix, ++requests_seen); }
  void count_response(std::string_view path, int status, std::chrono::steady_clock::duration took) override {
    metrics.record(path, status, took);
  }
  std::uint32_t id_prefix = std::random_device{}();
  std::atomic<std::uint64_t> requests_seen{0};
  serve_detail::ServerMetrics metrics;
};

ModelServer::ModelServer(const std::string& run_dir, ServeConfig config) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.cfg = std::move(config);
  check_serve_config(s.cfg);
  s.connections = make_room_for(s.cfg.connections);
  s.per_peer = s.cfg.connections_per_peer > 0 ? std::min(s.cfg.connections_per_peer, s.connections)
                                              : std::max<std::int64_t>(1, s.connections / 2);
  s.limits.max_body_bytes = static_cast<std::uint64_t>(s.cfg.max_body_bytes);
  s.limits.idle_timeout = std::chrono::milliseconds(s.cfg.idle_timeout_ms);
  s.limits.request_timeout = std::chrono::milliseconds(s.cfg.request_timeout_ms);
  {
    // The model runs on the batcher's thread, under this thread's context
    // and count (the Batcher carries them there). Loaded here on one thread,
    // so that this thread starts no OpenMP team of its own: with two teams'
    // threads on as many cores as one team needs, libgomp stops spinning
    // between parallel regions and sleeps in each (a decoding step has dozens).
    RuntimeContext alone = context();
    alone.threads = 1;
    const ContextScope loading(alone);
    s.run = TrainedRun::load(run_dir, s.cfg.precision);
  }
  s.task = s.run->task();
  s.fields = s.run->request_fields();
  check_answer_settings(*s.run, s.cfg.defaults);
  // The defaults answer every request that leaves a setting out: past the
  // request limits, each such request would be refused for what it never asked.
  check<ConfigError>(s.cfg.defaults.tokens <= s.cfg.limits.max_tokens,
                     "--tokens {} is more than a request may ask for ({}, limits.max_tokens)", s.cfg.defaults.tokens,
                     s.cfg.limits.max_tokens);
  check<ConfigError>(s.cfg.defaults.n_best <= s.cfg.limits.max_beam && s.cfg.defaults.beam <= s.cfg.limits.max_beam,
                     "--n-best and --beam must be at most {} (limits.max_beam)", s.cfg.limits.max_beam);
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
               {"max_body_bytes", s.cfg.max_body_bytes},
               {"max_bodies_bytes", s.cfg.max_bodies_bytes},
               {"connections", s.connections},
               {"connections_per_peer", s.per_peer},
               {"request_timeout_ms", s.cfg.request_timeout_ms},
               {"idle_timeout_ms", s.cfg.idle_timeout_ms}}}};
  s.run->describe(s.model);
  s.batcher = std::make_unique<Batcher>(*s.run, s.cfg.batching);
  s.listen();
}

void ModelServer::Impl::listen() {
  const std::string where = fmt::format("{}:{}", cfg.host, cfg.port);
  boost::system::error_code ec;
  tcp::resolver resolver(ioc);
  const auto found = resolver.resolve(cfg.host, std::to_string(cfg.port), tcp::resolver::passive, ec);
  check<IoError>(!ec && !found.empty(), "cannot listen on {} (address in use, or not this machine's)", where);
  const tcp::endpoint at = found.begin()->endpoint();
  acceptor.open(at.protocol(), ec);
  // SO_REUSEADDR only: with SO_REUSEPORT a second server on a port in use
  // would bind and share it silently.
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(at, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  check<IoError>(!ec, "cannot listen on {} (address in use, or not this machine's)", where);
  port = acceptor.local_endpoint().port();
}

void ModelServer::Impl::accept() {
  if (stopping_) return;
  acceptor.async_accept(net::make_strand(ioc), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;  // stopping
    if (!ec) admit(std::move(socket));
    accept();
  });
}

namespace {

// The address a connection came from; an IPv4 client of an IPv6 socket as its IPv4 address.
std::string peer_of(const tcp::socket& socket) {
  boost::system::error_code ec;
  net::ip::address a = socket.remote_endpoint(ec).address();
  if (ec) return "";
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6());
  return a.to_string();
}

}  // namespace

// A full server, or a full share of one address, makes room by closing the
// connection (of that address) that has waited longest without a complete
// request header, else closes the new one at once rather than queue it
// behind clients that may never finish. So a client that holds slots with
// connections that never send a whole header (or reconnects as each one
// times out) cannot keep others out: it holds at most its address's share,
// its own waiting connections make room for its next ones, and they are the
// first to go when others need the room.
void ModelServer::Impl::admit(tcp::socket socket) {
  const std::string peer = peer_of(socket);
  std::lock_guard lock(sessions_mutex);
  const auto mine = peers.find(peer);
  bool room = mine == peers.end() || mine->second.open < per_peer || evict_longest_waiting(mine->second.waiting);
  room = room && (static_cast<std::int64_t>(sessions.size()) < connections || evict_longest_waiting(waiting_since));
  if (!room) {
    ++turned_away;
    boost::system::error_code ec;
    socket.close(ec);
    return;
  }
  const std::uint64_t id = ++accepted;
  const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  auto session = std::make_shared<Session>(std::move(socket), *this, limits, id, now);
  sessions.emplace(id, Open{session, peer, -1});
  ++peers[peer].open;
  waiting(id, now, /*locked=*/true);
  session->on_close([this, id] { forget(id); });
  session->start();
}

// Under sessions_mutex: closes the connection of `among` (every waiting
// connection, or one address's) that has waited longest without a complete
// header; false when every one holds a request.
bool ModelServer::Impl::evict_longest_waiting(const Waiting& among) {
  for (const auto& [since, id] : among) {
    const auto it = sessions.find(id);
    const std::shared_ptr<Session> s = it == sessions.end() ? nullptr : it->second.session.lock();
    // One that read a whole header meanwhile (its holding() is on its way) stays.
    if (!s || !s->try_evict()) continue;
    ++evicted;
    drop(it);
    return true;
  }
  return false;
}

// Under sessions_mutex: a connection counted out.
void ModelServer::Impl::drop(std::map<std::uint64_t, Open>::iterator it) {
  const auto p = peers.find(it->second.peer);
  if (it->second.since >= 0) {
    waiting_since.erase({it->second.since, it->first});
    if (p != peers.end()) p->second.waiting.erase({it->second.since, it->first});
  }
  if (p != peers.end() && --p->second.open == 0) peers.erase(p);
  sessions.erase(it);
}

void ModelServer::Impl::waiting(std::uint64_t id, std::int64_t since, bool locked) {
  std::unique_lock lock(sessions_mutex, std::defer_lock);
  if (!locked) lock.lock();
  const auto it = sessions.find(id);
  if (it == sessions.end()) return;  // evicted
  Waiting& mine = peers[it->second.peer].waiting;
  if (it->second.since >= 0) waiting_since.erase({it->second.since, id}), mine.erase({it->second.since, id});
  it->second.since = since;
  waiting_since.emplace(since, id);
  mine.emplace(since, id);
}

void ModelServer::Impl::holding(std::uint64_t id) {
  std::lock_guard lock(sessions_mutex);
  const auto it = sessions.find(id);
  if (it == sessions.end() || it->second.since < 0) return;
  waiting_since.erase({it->second.since, id});
  peers[it->second.peer].waiting.erase({it->second.since, id});
  it->second.since = -1;
}

void ModelServer::Impl::forget(std::uint64_t id) {
  std::lock_guard lock(sessions_mutex);
  const auto it = sessions.find(id);
  if (it != sessions.end()) drop(it);  // else evicted: counted out then
}

ModelServer::~ModelServer() {
  stop();
  impl_->batcher->stop();
}

int ModelServer::port() const { return impl_->port; }
std::string ModelServer::url() const {
  // An IPv6 address is bracketed in a URL (RFC 3986): http://[::1]:8080
  const std::string& host = impl_->cfg.host;
  return host.find(':') != std::string::npos ? fmt::format("http://[{}]:{}", host, impl_->port)
                                             : fmt::format("http://{}:{}", host, impl_->port);
}
const TrainedRun& ModelServer::run() const { return *impl_->run; }

ServeCounters ModelServer::counters() const { return impl_->counters(); }

std::string ServeCounters::closing_line() const {
  std::string line = fmt::format("stopped after {} requests ({} answered, {} refused, {} dropped: client gone)",
                                 requests(), batcher.answered, refused(), batcher.dropped);
  if (turned_away > 0) line += fmt::format("; {} connections turned away", turned_away);
  return line;
}

void ModelServer::serve() {
  Impl& s = *impl_;
  net::post(s.ioc, [&s] { s.accept(); });
  // A handler that throws ends run() with its exception: the connection it
  // served is lost, never the thread or the process, and run() goes on.
  const auto run_io = [&s] {
    for (;;) {
      try {
        s.ioc.run();  // returns once the listener is closed and every connection has ended
        return;
      } catch (const std::exception&) {
        ++s.handler_failures;
      }
    }
  };
  std::vector<std::thread> more;
  for (int t = 1; t < kIoThreads; ++t) more.emplace_back(run_io);
  run_io();
  for (std::thread& t : more) t.join();
  s.batcher->stop();
}

void ModelServer::stop() {
  Impl& s = *impl_;
  if (s.stopping_.exchange(true)) return;
  net::post(s.ioc, [&s] {
    boost::system::error_code ec;
    s.acceptor.close(ec);
    std::vector<std::shared_ptr<Session>> open;
    {
      std::lock_guard lock(s.sessions_mutex);
      for (const auto& [id, o] : s.sessions)
        if (auto p = o.session.lock()) open.push_back(std::move(p));
    }
    for (const auto& p : open) p->stop();  // idle ones close; those answering close after their answer
  });
}

response<string_body> ModelServer::Impl::answer(const request<string_body>& req) {
  const std::string target(req.target().data(), req.target().size());
  const std::string path = target.substr(0, target.find('?'));
  const std::string method(req.method_string().data(), req.method_string().size());
  auto only = [&](const char* allowed) {
    response<string_body> res =
        json_response(405, {{"error", fmt::format("{} takes {} requests, not {}", path, allowed, clip_text(method))}});
    res.set(serve_detail::http::field::allow, allowed);
    return res;
  };
  const bool get = req.method() == serve_detail::http::verb::get;
  if (path == "/v1/health") {
    if (!get) return only("GET");
    const ServeCounters c = counters();
    return json_response(200, {{"status", "ok"},
                               {"task", task},
                               {"requests", c.requests()},
                               {"answered", c.batcher.answered},
                               {"refused", c.refused()},
                               {"dropped", c.batcher.dropped},
                               {"bad_requests", c.bad_requests},
                               {"turned_away", c.turned_away},
                               {"evicted", c.evicted},
                               {"handler_failures", c.handler_failures},
                               {"batches", c.batcher.batches},
                               {"inputs", c.batcher.inputs},
                               {"queued", c.batcher.queued},
                               {"model_threads", c.batcher.threads}});
  }
  if (path == "/v1/model") return get ? json_response(200, model) : only("GET");
  if (path == "/metrics") {
    if (!get) return only("GET");
    response<string_body> res{serve_detail::http::status::ok, req.version()};
    res.set(serve_detail::http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = metrics.exposition(counters());
    return res;
  }
  if (path == "/v1/predict" || path == "/v1/embed") return only("POST");
  ++bad_requests;
  return json_response(404, {{"error", fmt::format("no such endpoint: {} {}", clip_text(method), clip_text(path))}});
}

std::shared_ptr<Batcher::Ticket> ModelServer::Impl::submit(const std::string& body, bool embed,
                                                           std::optional<response<string_body>>& refused) {
  PredictRequest pr;
  try {
    // An embedding takes no settings: "inputs" alone.
    if (embed && task != "text_classification")
      throw RequestError(404, fmt::format("POST /v1/embed answers text encoders (a classifier's run or a "
                                          "checkpoint); this run's task is {}",
                                          task));
    pr = parse_predict_request(body, task, embed ? std::vector<std::string>{} : fields, cfg.defaults, cfg.limits);
    pr.settings.embed = embed;
  } catch (const RequestError& e) {
    ++bad_requests;
    refused = json_response(e.status, {{"error", e.what()}});
    return nullptr;
  }
  try {
    return batcher->submit(std::move(pr));
  } catch (const ConfigError& e) {  // stopping
    refused = json_response(503, {{"error", e.what()}});
    return nullptr;
  }
}

}  // namespace multihead
