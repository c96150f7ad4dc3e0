// SPDX-License-Identifier: Apache-2.0
#include "session.h"

#include <algorithm>
#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "connection.h"
#include "framing.h"

namespace multihead::serve_detail {

namespace {

// How often a request waiting for its answer looks whether its client is gone.
constexpr std::chrono::milliseconds kWatchEvery{20};
// A connection closed after an error is read and dropped this long first, so
// that the client, still sending, reads its answer instead of a reset.
constexpr std::chrono::milliseconds kLingerFor{2000};
constexpr std::size_t kReadChunk = 4096;

bool is_http_error(const beast::error_code& ec) {
  return ec.category() == beast::error_code(http::error::bad_method).category();
}

}  // namespace

http::response<http::string_body> json_response(int status, const nlohmann::json& body, unsigned version) {
  http::response<http::string_body> res{static_cast<http::status>(status), version};
  res.set(http::field::content_type, "application/json");
  // Outputs are the model's text: bytes that are not UTF-8 are replaced, not refused.
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return res;
}

Session::Session(net::ip::tcp::socket socket, Endpoints& server, const SessionLimits& limits, std::uint64_t id,
                 std::int64_t since)
    : stream_(std::move(socket)),
      server_(server),
      limits_(limits),
      watch_(stream_.get_executor()),
      id_(id),
      phase_(since) {
  beast::error_code ec;
  stream_.socket().set_option(net::ip::tcp::no_delay(true), ec);  // an answer is one small write: send it now
}

void Session::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_for_request(); });
}

void Session::stop() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (!self->busy_) self->close();
  });
}

void Session::start_waiting() {
  const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  std::int64_t was = phase_.load();
  do {
    if (was == kEvicted) return;  // once evicted, always evicted: its close is on its way
  } while (!phase_.compare_exchange_weak(was, now));
  server_.waiting(id_, now);
}

bool Session::try_evict() {
  std::int64_t was = phase_.load();
  do {
    if (was < 0) return false;  // it holds a request, or is evicted already
  } while (!phase_.compare_exchange_weak(was, kEvicted));
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
  return true;
}

void Session::wait_for_request() {
  if (closed_) return;
  if (server_.stopping()) return close();
  if (buffer_.size() > 0) return read_request();  // a pipelined request is here already
  stream_.expires_after(limits_.idle_timeout);
  stream_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                            if (ec) return self->close();  // idle too long, or the client closed between requests
                            self->buffer_.commit(n);
                            self->read_request();
                          });
}

void Session::read_request() {
  parser_.emplace();
  parser_->header_limit(limits_.max_header_bytes);
  parser_->body_limit(limits_.max_body_bytes);
  stream_.expires_after(limits_.request_timeout);  // the whole request, header and body, however it drips
  http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    if (ec) return self->on_read(ec);
    // A complete header: from here the connection holds a request, and is not evicted.
    std::int64_t waiting = self->phase_.load();
    do {
      if (waiting == kEvicted) return;  // its close is on its way
    } while (!self->phase_.compare_exchange_weak(waiting, kHoldsRequest));
    self->server_.holding(self->id_);
    const auto& header = self->parser_->get();
    self->note_request(header);
    // A framing that could be read two ways: refused, and the connection closed unread.
    if (const auto refusal = framing_refusal(*self->parser_)) return self->refuse(refusal->status, refusal->why);
    const bool has_body = self->parser_->chunked() || self->parser_->content_length().value_or(0) > 0;
    if (has_body) {
      const std::uint64_t share =
          self->parser_->chunked() ? self->limits_.max_body_bytes : *self->parser_->content_length();
      if (!self->server_.reserve_body(share))
        return self->refuse(503, "the server holds as many request bodies as it takes; try again shortly");
      self->reserved_ = share;
    }
    // A client that asks before sending its body (curl does past 1 KiB) is told to go on.
    const auto expect = header[http::field::expect];
    if (!beast::iequals(expect, "100-continue")) return self->read_body();
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(self->stream_, net::buffer(kContinue.data(), kContinue.size()),
                     [self](beast::error_code ec2, std::size_t) {
                       if (ec2) return self->close();
                       self->read_body();
                     });
  });
}

void Session::read_body() {
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
}

void Session::on_read(beast::error_code ec) {
  if (closed_) return;
  if (ec == http::error::body_limit)
    return refuse(413, fmt::format("the body is larger than {} bytes", limits_.max_body_bytes));
  if (ec == http::error::header_limit)
    return refuse(431, fmt::format("the request's header is larger than {} bytes", limits_.max_header_bytes));
  if (ec && is_http_error(ec) && ec != http::error::end_of_stream && ec != http::error::partial_message)
    return refuse(400, "the request is not valid HTTP");
  if (ec) return close();  // timed out, or the client went away mid-request
  http::request<http::string_body> req = parser_->release();
  version_ = req.version();
  keep_alive_ = req.keep_alive();
  busy_ = true;
  // Nothing thrown here may leave the handler: it would end the I/O thread.
  try {
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (req.method() == http::verb::post && (path == "/v1/predict" || path == "/v1/embed"))
      return predict(req.body(), path == "/v1/embed");
    reply(server_.answer(req));
  } catch (const std::exception& e) {
    keep_alive_ = false;
    reply(json_response(500, {{"error", fmt::format("the server failed: {}", e.what())}}));
  }
}

void Session::predict(const std::string& body, bool embed) {
  std::optional<http::response<http::string_body>> refused;
  ticket_ = server_.submit(body, embed, refused);
  if (!ticket_) return reply(std::move(*refused));
  // The worker's thread hands the outcome back to this connection's strand.
  ticket_->on_done(
      [self = shared_from_this()] { net::post(self->stream_.get_executor(), [self] { self->on_outcome(); }); });
  watch_client();
}

void Session::watch_client() {
  watch_.expires_after(kWatchEvery);
  watch_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || !self->ticket_) return;
    if (peer_gone(self->stream_.socket().native_handle())) {
      self->ticket_->abandon();  // nobody to answer: the batcher drops it unless its batch has begun
      self->ticket_.reset();
      return self->close();
    }
    self->watch_client();
  });
}

void Session::on_outcome() {
  if (!ticket_) return;  // the client went first
  watch_.cancel();
  const std::optional<Outcome> o = ticket_->take();
  ticket_.reset();
  reply(json_response(o->status, o->body));
}

void Session::refuse(int status, const std::string& why) {
  server_.count_bad_request();
  keep_alive_ = false;  // what follows on this connection cannot be told from the rest of this one
  busy_ = true;
  reply(json_response(status, {{"error", why}}));
}

namespace {

// A client's own request id is taken when it is short printable ASCII; any
// other is replaced, so that an id never breaks a header or a log line.
bool usable_request_id(std::string_view id) {
  return !id.empty() && id.size() <= 128 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

}  // namespace

void Session::note_request(const http::request_parser<http::string_body>::value_type& header) {
  const std::string_view target(header.target().data(), header.target().size());
  path_ = std::string(target.substr(0, target.find('?')));
  const auto id = header["X-Request-Id"];
  request_id_ = usable_request_id(std::string_view(id.data(), id.size())) ? std::string(id.data(), id.size())
                                                                          : server_.new_request_id();
  started_ = std::chrono::steady_clock::now();
}

void Session::reply(http::response<http::string_body> res) {
  // A request refused before its header was whole has neither id nor start of its own.
  if (request_id_.empty()) request_id_ = server_.new_request_id(), started_ = std::chrono::steady_clock::now();
  res.set("X-Request-Id", request_id_);
  server_.count_response(path_, res.result_int(), std::chrono::steady_clock::now() - started_);
  path_.clear(), request_id_.clear();
  res.version(version_);
  res.keep_alive(keep_alive_ && !server_.stopping());
  res.prepare_payload();
  res_ = std::move(res);
  stream_.expires_after(limits_.request_timeout);  // a client that does not read its answer
  http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    self->busy_ = false;
    self->release_body();
    self->start_waiting();
    if (ec) return self->close();
    if (!self->res_.keep_alive()) return self->linger_close();
    self->wait_for_request();
  });
}

void Session::linger_close() {
  if (closed_) return;
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
  stream_.expires_after(kLingerFor);  // one deadline for the whole drain
  drain();
}

void Session::drain() {
  buffer_.clear();
  stream_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](beast::error_code ec, std::size_t) {
    if (ec) return self->close();  // the client closed too, or the deadline passed
    self->drain();
  });
}

void Session::release_body() {
  if (reserved_ > 0) server_.release_body(std::exchange(reserved_, 0));
}

void Session::close() {
  if (closed_) return;
  closed_ = true;
  release_body();
  watch_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
  if (on_close_) std::exchange(on_close_, nullptr)();
}

}  // namespace multihead::serve_detail
