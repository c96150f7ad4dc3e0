// SPDX-License-Identifier: Apache-2.0
// One client connection of `multihead serve` (Boost.Beast over Asio): it
// reads a request, answers it, and reads the next, so pipelined requests are
// answered in order from what the buffer already holds. Every wait has a
// deadline: an idle connection is closed after the idle timeout, and a
// request's header and body must arrive within the request timeout, however
// slowly they drip; the parser bounds the header and the body, chunked or not.
// No thread waits for a client: a slow or idle one costs a socket and a
// buffer, never a thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "multihead/serve/batcher.h"

namespace multihead::serve_detail {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;

// What a session needs of its server.
class Endpoints {
 public:
  virtual ~Endpoints() = default;
  // The answer to a request that is not POST /v1/predict (a GET, or an error).
  virtual http::response<http::string_body> answer(const http::request<http::string_body>& req) = 0;
  // POST /v1/predict (or, embed, POST /v1/embed): its ticket, or an error
  // response (a malformed body, a run that does not embed, a stopping server).
  virtual std::shared_ptr<Batcher::Ticket> submit(const std::string& body, bool embed,
                                                  std::optional<http::response<http::string_body>>& refused) = 0;
  virtual bool stopping() const = 0;
  virtual void count_bad_request() = 0;
  // Request bodies held across all connections are bounded: a request takes
  // its share (its Content-Length, or the body limit when chunked) before its
  // body is read, and gives it back once answered. False: no room now.
  virtual bool reserve_body(std::uint64_t bytes) = 0;
  virtual void release_body(std::uint64_t bytes) = 0;
  // A request id for a request that brought none of its own (X-Request-Id).
  virtual std::string new_request_id() = 0;
  // Every answer sent: its request's path ("" before one was read), status and time taken.
  virtual void count_response(std::string_view path, int status, std::chrono::steady_clock::duration took) = 0;
  // Connection `id` waits without a complete request header since `since`
  // (steady_clock ticks), or holds a request: which one has waited longest.
  virtual void waiting(std::uint64_t id, std::int64_t since) = 0;
  virtual void holding(std::uint64_t id) = 0;
};

struct SessionLimits {
  std::uint64_t max_body_bytes = 1 << 20;
  std::uint32_t max_header_bytes = 16 * 1024;
  std::chrono::milliseconds idle_timeout{5000};      // between requests on a connection
  std::chrono::milliseconds request_timeout{10000};  // a request's header and body; an answer's write
};

http::response<http::string_body> json_response(int status, const nlohmann::json& body, unsigned version = 11);

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `id` names it to the server; it has waited without a header since `since` (steady_clock ticks).
  Session(net::ip::tcp::socket socket, Endpoints& server, const SessionLimits& limits, std::uint64_t id,
          std::int64_t since);
  void start();
  // Called once, when the connection closes.
  void on_close(std::function<void()> f) { on_close_ = std::move(f); }
  // The server is stopping: an idle connection closes now; one whose request
  // is being answered closes after its answer.
  void stop();
  // Eviction, when the server is full (server.cpp): a connection without a
  // complete request header (waiting for a request, dripping one in, or
  // closing) may give its slot to a new one, the one that has waited longest
  // first; it tells its server each time it begins to wait and to hold a
  // request (Endpoints::waiting, holding). try_evict closes it unless it has
  // a complete header by then (any thread; true: its slot is free).
  bool try_evict();

 private:
  void wait_for_request();
  void read_request();
  void read_body();
  void on_read(beast::error_code ec);
  void predict(const std::string& body, bool embed);
  void watch_client();
  void on_outcome();
  void reply(http::response<http::string_body> res);
  void refuse(int status, const std::string& why);
  void close();
  void linger_close();
  void drain();
  void release_body();
  // The request's path, id and start, from its header.
  void note_request(const http::request_parser<http::string_body>::value_type& header);

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  Endpoints& server_;
  SessionLimits limits_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  std::shared_ptr<Batcher::Ticket> ticket_;
  net::steady_timer watch_;
  unsigned version_ = 11;  // the request's HTTP version, which the answer takes
  bool keep_alive_ = true;
  bool busy_ = false;  // a request read and not yet answered
  bool closed_ = false;
  // When it began to wait (steady_clock ticks), or kHoldsRequest, or
  // kEvicted: set by this connection's strand and by try_evict from the
  // accepting thread, one winning.
  static constexpr std::int64_t kHoldsRequest = -1, kEvicted = -2;
  std::uint64_t id_;
  std::atomic<std::int64_t> phase_;
  void start_waiting();
  std::uint64_t reserved_ = 0;  // body bytes held against the server's budget
  // The request being answered: its path, its id (the client's X-Request-Id,
  // else the server's), and when its header was read.
  std::string path_, request_id_;
  std::chrono::steady_clock::time_point started_{};
  std::function<void()> on_close_;
};

}  // namespace multihead::serve_detail
