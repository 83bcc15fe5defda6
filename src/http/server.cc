#include "http/server.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstdio>
#include <span>
#include <type_traits>
#include <unordered_set>

#include "api/error.h"

namespace prefix_router::http {
namespace {

void LogCoroutineFailure(std::exception_ptr e, std::string_view what) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::error("{}: unexpected exception: {}", what, ex.what());
  }
}

StringResponse ErrorResponse(int status, std::string_view message, std::string_view code, unsigned version,
                             bool keep_alive, const std::string& server_name) {
  StringResponse res{static_cast<bhttp::status>(status), version};
  res.set(bhttp::field::server, server_name);
  res.set(bhttp::field::content_type, "application/json");
  res.body() = api::ErrorBody(api::MakeError(status, std::string(message), std::string(code)));
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

// How long a refused connection may linger after its error response, and how much of the
// client's unread request it may discard meanwhile.
constexpr std::chrono::milliseconds kLinger{1000};
constexpr size_t kLingerBytes = 1u << 20;
// Spare request-body strings per I/O thread (Server::ThreadState::spare_bodies): enough for the
// requests that start between two that end, bounded in count and size; smaller strings than
// kMinSpareBodyBytes have no allocation worth keeping.
constexpr size_t kSpareBodies = 16;
constexpr size_t kSpareBodyBytes = 64 * 1024;
constexpr size_t kMinSpareBodyBytes = 64;

// Writes an error response to a request the server refuses, then closes politely: closing with
// unread request bytes (the rest of an oversized body, say) would send a reset, which can
// destroy the response before the client reads it. So: half-close, then read and discard until
// the client closes, for at most kLinger and `drain_budget` bytes.
template <class Stream>
net::awaitable<void> RefuseAndClose(Stream& stream, StringResponse res, std::chrono::milliseconds write_timeout,
                                    size_t drain_budget) {
  beast::tcp_stream& base = beast::get_lowest_layer(stream);
  base.expires_after(write_timeout);
  auto [wec, wn] = co_await bhttp::async_write(stream, res, kTuple);
  if (wec) co_return;
  beast::error_code ignored;
  // Over TLS too: the response is complete (Content-Length, Connection: close), so the TCP
  // half-close is enough for the client; the discarding reads below still decrypt.
  base.socket().shutdown(tcp::socket::shutdown_send, ignored);
  std::array<char, 4096> sink;
  size_t drained = 0;
  base.expires_after(kLinger);
  while (drained < drain_budget) {
    auto [rec, rn] = co_await stream.async_read_some(net::buffer(sink), kTuple);
    if (rec) break;
    drained += rn;
  }
}

// A deadline for a read that must leave the connection open when it passes, so that the server
// can still answer 408: beast::tcp_stream's own expiry closes the socket. When `timeout` passes,
// the socket's pending operations are cancelled and fired() becomes true. All on the
// connection's thread. Each Watchdog takes the next number of the connection's count
// (Connection::watchdog) and gives it up when destroyed, so that a completion already queued
// then sees that it is too late; the connection's shared state outlives both (no allocation per
// read).
class Watchdog {
 public:
  Watchdog(beast::tcp_stream& base, std::chrono::milliseconds timeout, const std::shared_ptr<Connection>& connection)
      : timer_(base.get_executor()), connection_(*connection), number_(++connection->watchdog) {
    timer_.expires_after(timeout);
    timer_.async_wait([connection, number = number_, &base](beast::error_code ec) {
      if (ec || connection->watchdog != number) return;
      connection->watchdog_fired = number;
      beast::error_code ignored;
      base.socket().cancel(ignored);
    });
  }
  ~Watchdog() {
    ++connection_.watchdog;
    timer_.cancel();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  bool fired() const { return connection_.watchdog_fired == number_; }

 private:
  net::steady_timer timer_;
  Connection& connection_;  // kept alive by the session that owns the Watchdog
  const uint64_t number_;
};

// The elements of a comma-separated field value (RFC 9110 section 5.6.1), trimmed of spaces and
// tabs; empty elements are skipped. A coding's parameters (";q=...") stay on its element.
void AppendListElements(std::string_view value, std::vector<std::string_view>& out) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    std::string_view item = value.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
}

// Codings registered for Transfer-Encoding besides chunked (IANA HTTP Transfer Coding
// Registry): understood as names, never decoded here.
bool IsKnownCoding(std::string_view coding) {
  static constexpr std::string_view kKnown[] = {"compress", "deflate", "gzip", "trailers", "x-compress", "x-gzip"};
  for (std::string_view k : kKnown) {
    if (beast::iequals(coding, k)) return true;
  }
  return false;
}

}  // namespace

int CheckRequestHead(const bhttp::request_header<>& head, std::string& message) {
  const size_t te_fields = head.count(bhttp::field::transfer_encoding);
  if (te_fields > 0) {
    if (head.version() < 11) {
      message = "Transfer-Encoding is not allowed on an HTTP/1.0 request";
      return 400;
    }
    std::vector<std::string_view> codings;
    for (auto [it, end] = head.equal_range(bhttp::field::transfer_encoding); it != end; ++it) {
      AppendListElements(std::string_view(it->value().data(), it->value().size()), codings);
    }
    // RFC 9112 section 6.3: without chunked as the final coding the body's length cannot be
    // known, and the server MUST answer 400 and close.
    if (codings.empty() || !beast::iequals(codings.back(), "chunked")) {
      message = "Transfer-Encoding must end with chunked";
      return 400;
    }
    for (size_t i = 0; i + 1 < codings.size(); ++i) {
      if (beast::iequals(codings[i], "chunked")) {
        message = "chunked is applied more than once in Transfer-Encoding";
        return 400;
      }
    }
    if (codings.size() > 1) {
      // RFC 9112 section 6.1: a coding the server does not implement is 501.
      const std::string_view first = codings.front();
      message = "transfer coding '" + std::string(first.substr(0, 64)) + "' is not implemented" +
                (IsKnownCoding(first) ? "" : " (unknown coding)") + "; send the body with chunked alone";
      return 501;
    }
    if (head.count(bhttp::field::content_length) > 0) {
      // Both framings: a request smuggling pattern (RFC 9112 section 6.1).
      message = "a request must not carry both Transfer-Encoding and Content-Length";
      return 400;
    }
  }
  const size_t hosts = head.count(bhttp::field::host);
  if (hosts > 1) {
    message = "more than one Host header";
    return 400;
  }
  if (hosts == 0 && head.version() >= 11) {
    message = "an HTTP/1.1 request needs a Host header";
    return 400;
  }
  if (head.count(bhttp::field::authorization) > 1) {
    message = "more than one Authorization header";
    return 400;
  }
  return 0;
}

bool IsHopByHopHeader(std::string_view name) {
  static constexpr std::string_view kHop[] = {"connection",
                                              "keep-alive",
                                              "proxy-authenticate",
                                              "proxy-authorization",
                                              "proxy-connection",
                                              "te",
                                              "trailer",
                                              "transfer-encoding",
                                              "upgrade"};
  for (std::string_view h : kHop) {
    if (beast::iequals(name, h)) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------- Exchange

Exchange::Exchange(beast::tcp_stream& stream, TlsStream* tls, Request request, const ServerOptions& options,
                   std::shared_ptr<Connection> connection)
    : stream_(stream),
      tls_(tls),
      connection_(connection ? std::move(connection) : std::make_shared<Connection>()),
      request_(std::move(request)),
      options_(options),
      received_at_(std::chrono::steady_clock::now()),
      keep_alive_(request_.keep_alive()) {}

net::awaitable<bool> Exchange::Send(StringResponse response) {
  if (head_sent_ || client_failed_) co_return false;
  head_sent_ = true;
  finished_ = true;
  status_ = response.result_int();
  head_sent_at_ = std::chrono::steady_clock::now();
  response.version(request_.version());
  if (!response.count(bhttp::field::server)) response.set(bhttp::field::server, options_.server_name);
  for (const auto& [name, value] : response_headers_) response.set(name, value);
  response.keep_alive(keep_alive_);
  response.prepare_payload();
  stream_.expires_after(options_.write_timeout);
  auto [ec, n] = co_await OnStream([&](auto& s) { return bhttp::async_write(s, response, kTuple); });
  if (ec) client_failed_ = true;
  co_return !ec;
}

net::awaitable<bool> Exchange::SendError(int status, std::string_view message, std::string_view code) {
  co_return co_await Send(ErrorResponse(status, message, code, request_.version(), keep_alive_, options_.server_name));
}

namespace {

}  // namespace

net::awaitable<bool> Exchange::SendHead(bhttp::response_header<> head, net::const_buffer first_piece, bool last) {
  co_return co_await SendHeadFrom(head, nullptr, {}, first_piece, last);
}

net::awaitable<bool> Exchange::SendHeadFrom(const bhttp::response_header<>& head, SkipField skip,
                                            std::span<const std::pair<std::string_view, std::string_view>> extra,
                                            net::const_buffer first_piece, bool last) {
  if (head_sent_ || client_failed_) co_return false;
  head_sent_ = true;
  status_ = head.result_int();
  head_sent_at_ = std::chrono::steady_clock::now();
  std::string& text = connection_->head;
  text.clear();
  chunked_ = AppendResponseHead(text, head, skip, extra, options_.server_name, response_headers_, request_.version(),
                                keep_alive_);
  co_return co_await WritePiece(text, first_piece, last);
}

bool AppendResponseHead(std::string& out, const bhttp::response_header<>& head, Exchange::SkipField skip,
                        std::span<const std::pair<std::string_view, std::string_view>> extra,
                        std::string_view server_name, std::span<const std::pair<std::string, std::string>> always,
                        unsigned version, bool& keep_alive) {
  // The head's fields as views, edited as response_header's set and erase would edit a copy.
  thread_local std::vector<std::pair<std::string_view, std::string_view>> fields;
  fields.clear();
  auto has = [](std::string_view name) {
    return std::any_of(fields.begin(), fields.end(), [name](const auto& f) { return beast::iequals(f.first, name); });
  };
  auto erase = [](std::string_view name) {
    std::erase_if(fields, [name](const auto& f) { return beast::iequals(f.first, name); });
  };
  auto set = [&](std::string_view name, std::string_view value) {
    erase(name);
    fields.emplace_back(name, value);
  };
  for (const auto& f : head) {
    if (skip == nullptr || !skip(head, f.name_string())) fields.emplace_back(f.name_string(), f.value());
  }
  for (const auto& [name, value] : extra) set(name, value);
  if (!has("Server")) fields.emplace_back("Server", server_name);
  for (const auto& [name, value] : always) set(name, value);
  bool chunked = false;
  if (!has("Content-Length")) {
    if (version >= 11) {
      set("Transfer-Encoding", "chunked");
      chunked = true;
    } else {
      keep_alive = false;  // HTTP/1.0: the body ends when the connection closes
    }
  }
  // What message::keep_alive() writes: HTTP/1.1 says only "close", HTTP/1.0 only "keep-alive".
  erase("Connection");
  if (version >= 11 && !keep_alive) fields.emplace_back("Connection", "close");
  if (version < 11 && keep_alive) fields.emplace_back("Connection", "keep-alive");

  out.append(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
  char code[4];
  const unsigned status = head.result_int() % 1000;
  code[0] = static_cast<char>('0' + status / 100);
  code[1] = static_cast<char>('0' + status / 10 % 10);
  code[2] = static_cast<char>('0' + status % 10);
  code[3] = ' ';
  out.append(code, 4);
  const auto reason = head.reason();
  if (reason.empty()) {
    out.append(bhttp::obsolete_reason(head.result()));
  } else {
    out.append(reason.data(), reason.size());
  }
  out.append("\r\n");
  for (const auto& [name, value] : fields) {
    out.append(name);
    out.append(": ");
    out.append(value);
    out.append("\r\n");
  }
  out.append("\r\n");
  return chunked;
}

net::awaitable<bool> Exchange::SendBody(net::const_buffer data, bool last) {
  if (!head_sent_ || finished_ || client_failed_) co_return false;
  if (data.size() == 0 && !last) co_return true;
  co_return co_await WritePiece({}, data, last);
}

net::awaitable<bool> Exchange::WritePiece(std::string_view prefix, net::const_buffer data, bool last) {
  static constexpr std::string_view kCrlf = "\r\n";
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";
  // prefix, [chunk size line], data, [CRLF], [last chunk]
  std::array<net::const_buffer, 5> pieces;
  size_t n = 0;
  char size_line[20];
  if (!prefix.empty()) pieces[n++] = net::buffer(prefix);
  if (data.size() > 0) {
    if (chunked_) {
      const int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
      pieces[n++] = net::buffer(size_line, static_cast<size_t>(len));
      pieces[n++] = data;
      pieces[n++] = net::buffer(kCrlf);
    } else {
      pieces[n++] = data;
    }
  }
  if (last) {
    finished_ = true;
    if (chunked_) pieces[n++] = net::buffer(kLastChunk);
  }
  if (n == 0) co_return true;
  const std::span<const net::const_buffer> sequence(pieces.data(), n);
  if (!tls_) {  // plain TCP: what the socket takes now, then the rest under the deadline
    beast::error_code ec;
    const size_t sent = WriteNow(stream_.socket(), sequence, ec);
    if (ec) {
      client_failed_ = true;
      co_return false;
    }
    if (sent == net::buffer_size(sequence)) co_return true;
    beast::buffers_suffix<std::span<const net::const_buffer>> rest(sequence);
    rest.consume(sent);
    stream_.expires_after(options_.write_timeout);
    std::tie(ec, std::ignore) = co_await net::async_write(stream_, rest, kTuple);
    if (ec) client_failed_ = true;
    co_return !ec;
  }
  stream_.expires_after(options_.write_timeout);
  auto [ec, written] = co_await OnStream([&](auto& s) { return net::async_write(s, sequence, kTuple); });
  if (ec) client_failed_ = true;
  co_return !ec;
}

size_t WriteNow(tcp::socket& socket, std::span<const net::const_buffer> buffers, beast::error_code& ec) {
  ec = {};
  if (!socket.non_blocking()) {
    socket.non_blocking(true, ec);
    if (ec) return 0;
  }
  const size_t n = socket.write_some(buffers, ec);
  if (ec == net::error::would_block || ec == net::error::try_again) ec = {};
  return ec ? 0 : n;
}

net::awaitable<bool> Exchange::Finish() {
  if (!head_sent_ || client_failed_) co_return false;
  if (finished_) co_return true;
  co_return co_await WritePiece({}, {}, true);
}

// Over TLS the socket is watched the same way: a reset or a bare FIN is seen; a close_notify
// alert is data on the socket (and under TLS 1.3 indistinguishable from application data without
// decrypting it), so a client that sends one before closing is seen only when the next write to
// it fails.
net::awaitable<void> Exchange::WaitClientGone() {
  auto& socket = stream_.socket();
  for (;;) {
    auto [ec] = co_await socket.async_wait(tcp::socket::wait_read, kTuple);
    if (ec == net::error::operation_aborted) co_return;  // cancelled: the other side won
    if (!ec) {
      char byte;
      beast::error_code pec;
      socket.non_blocking(true, pec);
      const size_t n = socket.receive(net::buffer(&byte, 1), tcp::socket::message_peek, pec);
      if (pec == net::error::would_block || pec == net::error::try_again) continue;
      if (!pec && n > 0) break;  // pipelined data, not a close: stop watching
    }
    client_failed_ = true;  // EOF, reset or another socket error
    keep_alive_ = false;
    co_return;
  }
  net::steady_timer forever(stream_.get_executor(), net::steady_timer::time_point::max());
  co_await forever.async_wait(kTuple);
}

void Exchange::WatchClient(std::function<void()> on_gone) {
  if (client_failed_) return;
  connection_->exchange = this;
  connection_->on_gone = std::move(on_gone);
  ArmClientWatch(connection_, stream_.socket());
}

void Exchange::StopWatchingClient() {
  if (connection_->exchange != this) return;
  connection_->exchange = nullptr;
  connection_->on_gone = nullptr;
}

void Exchange::ClientGone() {
  client_failed_ = true;
  keep_alive_ = false;
  auto on_gone = std::move(connection_->on_gone);
  connection_->exchange = nullptr;
  connection_->on_gone = nullptr;
  if (on_gone) on_gone();
}

void Exchange::ArmClientWatch(const std::shared_ptr<Connection>& watch, tcp::socket& socket) {
  if (watch->armed) return;
  watch->armed = true;
  // The handler touches the socket only while an exchange watches: the socket then lives (its
  // session awaits that exchange). Between exchanges the wait is left to complete by itself
  // (the next request's bytes, or the close at the session's end) and does nothing.
  socket.async_wait(tcp::socket::wait_read, [watch, &socket](beast::error_code ec) {
    watch->armed = false;
    Exchange* ex = watch->exchange;
    if (!ex) return;
    if (ec) {  // cancelled from outside (a timeout, Stop) or a socket error: the client is lost
      ex->ClientGone();
      return;
    }
    char byte;
    beast::error_code pec;
    socket.non_blocking(true, pec);
    const size_t n = socket.receive(net::buffer(&byte, 1), tcp::socket::message_peek, pec);
    if (pec == net::error::would_block || pec == net::error::try_again) {
      ArmClientWatch(watch, socket);  // a spurious wake-up
      return;
    }
    if (!pec && n > 0) return;  // pipelined data, not a close: stop watching
    ex->ClientGone();           // EOF, reset or another socket error
  });
}

void Exchange::Abort() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
  client_failed_ = true;
  keep_alive_ = false;
}

// ------------------------------------------------------------------------------------ Server

struct Server::ThreadState {
  struct Session {
    beast::tcp_stream* stream;
    bool idle;
  };
  std::unordered_set<Session*> sessions;  // touched only on this thread
  // Accepted connections handed from the listener's thread to this one (see AcceptLoop). Both
  // vectors keep their capacity, so that a flood of connections allocates nothing per
  // connection on the listener's thread.
  std::mutex handoff_mu;
  std::vector<std::pair<tcp::socket, net::ip::address>> handoff;  // guarded by handoff_mu
  bool wake_pending = false;                                      // guarded by handoff_mu
  std::vector<std::pair<tcp::socket, net::ip::address>> batch;    // this thread's
  // Request bodies' strings kept for the next requests on this thread (see Serve): a body is
  // read into one, empty but with its capacity, instead of a new allocation per request. At most
  // kSpareBodies of them, none larger than kSpareBodyBytes, so that a thread keeps at most
  // kSpareBodies * kSpareBodyBytes however many connections it serves.
  std::vector<std::string> spare_bodies;

  std::string TakeSpareBody() {
    if (spare_bodies.empty()) return {};
    std::string body = std::move(spare_bodies.back());
    spare_bodies.pop_back();
    return body;
  }
  void KeepSpareBody(std::string&& body) {
    if (body.capacity() < kMinSpareBodyBytes || body.capacity() > kSpareBodyBytes) return;
    if (spare_bodies.size() >= kSpareBodies) return;
    body.clear();
    spare_bodies.push_back(std::move(body));
  }
};

Server::Server(ServerOptions options, Handler& handler) : options_(std::move(options)), handler_(handler) {
  tls_context_.store(options_.tls);
  if (options_.io_threads == 0) options_.io_threads = std::max(1u, std::thread::hardware_concurrency());
}

Server::~Server() {
  if (!threads_.empty() && !stopped_.load()) Stop(std::chrono::milliseconds(0));
}

Status Server::Start() {
  for (uint32_t i = 0; i < options_.io_threads; ++i) {
    contexts_.push_back(std::make_unique<net::io_context>(1));
    thread_states_.push_back(std::make_unique<ThreadState>());
    work_.push_back(net::make_work_guard(*contexts_.back()));
  }
  if (!options_.listen) {
    for (auto& ctx : contexts_) threads_.emplace_back([c = ctx.get()] { c->run(); });
    return Status::Ok();
  }
  beast::error_code ec;
  auto address = net::ip::make_address(options_.host, ec);
  tcp::endpoint endpoint;
  if (ec) {
    tcp::resolver resolver(*contexts_[0]);
    auto results = resolver.resolve(options_.host, std::to_string(options_.port), ec);
    if (ec || results.empty()) {
      return Status::InvalidArgument("listen: cannot resolve '" + options_.host + "': " + ec.message());
    }
    endpoint = results.begin()->endpoint();
  } else {
    endpoint = tcp::endpoint(address, options_.port);
  }
  // The listener has a thread and io_context of its own. Asio allocates each accepted socket's
  // reactor state on the accepting thread and pools it for reuse, never freeing it; on an I/O
  // thread those small objects would end up between connection buffers and pin their pages
  // after a flood, where malloc_trim could not give them back (see MaybeReturnMemory).
  accept_context_ = std::make_unique<net::io_context>(1);
  work_.push_back(net::make_work_guard(*accept_context_));
  acceptor_ = std::make_unique<tcp::acceptor>(*accept_context_);
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  if (acceptor_->open(endpoint.protocol(), ec); ec) {
    return Status::Unavailable("listen " + where + ": " + ec.message());
  }
  acceptor_->set_option(net::socket_base::reuse_address(true), ec);
  if (acceptor_->bind(endpoint, ec); ec) return Status::Unavailable("listen " + where + ": " + ec.message());
  if (acceptor_->listen(net::socket_base::max_listen_connections, ec); ec) {
    return Status::Unavailable("listen " + where + ": " + ec.message());
  }
  port_ = acceptor_->local_endpoint().port();
  net::co_spawn(*accept_context_, AcceptLoop(), [](std::exception_ptr e) { LogCoroutineFailure(e, "accept loop"); });
  threads_.emplace_back([c = accept_context_.get()] { c->run(); });
  for (auto& ctx : contexts_) {
    threads_.emplace_back([c = ctx.get()] { c->run(); });
  }
  return Status::Ok();
}

net::awaitable<void> Server::AcceptLoop() {
  uint32_t next = 0;
  auto backoff = kAcceptBackoffMin;
  int64_t streak = 0;  // consecutive accept failures
  while (!stopping_.load()) {
    auto& ctx = *contexts_[next];
    ThreadState& ts = *thread_states_[next];
    auto [ec, socket] = co_await acceptor_->async_accept(ctx, kTuple);
    if (ec) {
      if (ec == net::error::operation_aborted || stopping_.load()) break;
      ++accept_errors_;
      // Out of descriptors and similar: back off instead of spinning, doubling the wait up to
      // kAcceptBackoffMax; one warning a streak, not one per failure.
      if (streak++ == 0) {
        spdlog::warn(
            "accept failed: {}; retrying with backoff from {} ms up to {} ms (limits.max_connections "
            "should keep this from happening; see docs/faults.md)",
            ec.message(), kAcceptBackoffMin.count(), kAcceptBackoffMax.count());
      }
      net::steady_timer timer(co_await net::this_coro::executor, backoff);
      co_await timer.async_wait(kTuple);
      backoff = std::min(backoff * 2, kAcceptBackoffMax);
      continue;
    }
    if (streak > 0) {
      spdlog::info("accept recovered after {} failed attempts", streak);
      streak = 0;
      backoff = kAcceptBackoffMin;
    }
    next = (next + 1) % contexts_.size();
    socket.set_option(tcp::no_delay(true), ec);
    // Counted here, before the session starts on its thread, so that the limit is exact.
    int status = 0;
    net::ip::address peer;
    if (options_.max_connections > 0 && open_connections_.load() >= options_.max_connections) {
      status = 503;
    } else if (options_.max_connections_per_client > 0) {
      const auto endpoint = socket.remote_endpoint(ec);
      if (ec) continue;  // gone already; the socket closes here
      peer = endpoint.address();
      if (!AdmitClient(peer)) status = 429;
    }
    if (status != 0) {
      ++(status == 503 ? rejected_connections_ : rejected_client_connections_);
      if (lingering_rejections_.load() >= kMaxLingeringRejections) {
        socket.close(ec);  // a flood of them: no resources for a polite answer
        continue;
      }
      ++lingering_rejections_;
      net::post(ctx, [this, &ctx, socket = std::move(socket), status]() mutable {
        net::co_spawn(ctx, Reject(std::move(socket), status),
                      [](std::exception_ptr e) { LogCoroutineFailure(e, "rejected connection"); });
      });
      continue;
    }
    const int64_t open = ++open_connections_;
    for (int64_t peak = peak_open_.load(); open > peak && !peak_open_.compare_exchange_weak(peak, open);) {}
    accepted_connections_.fetch_add(1, std::memory_order_relaxed);
    // Handed to the connection's thread, where its coroutine frame is made: allocated here, on
    // the listener's thread, the frame (and a posted handler per connection) would come from
    // the listener's heap arena and fragment it (see Start). A wake-up is posted only when the
    // handoff was empty.
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(ts.handoff_mu);
      ts.handoff.emplace_back(std::move(socket), peer);
      wake = !std::exchange(ts.wake_pending, true);
    }
    if (wake) net::post(ctx, [this, &ctx, &ts] { StartSessions(ctx, ts); });
  }
}

void Server::StartSessions(net::io_context& ctx, ThreadState& ts) {
  {
    std::lock_guard<std::mutex> lock(ts.handoff_mu);
    std::swap(ts.handoff, ts.batch);
    ts.wake_pending = false;
  }
  for (auto& [socket, peer] : ts.batch) {
    net::co_spawn(ctx, Session(std::move(socket), ts, peer),
                  [](std::exception_ptr e) { LogCoroutineFailure(e, "connection"); });
  }
  ts.batch.clear();
  if (ts.batch.capacity() > 1024) decltype(ts.batch)().swap(ts.batch);  // a flood's backlog: not kept for the next one
}

bool Server::AdmitClient(const net::ip::address& address) {
  std::lock_guard<std::mutex> lock(clients_mu_);
  uint32_t& n = clients_[address];  // REQUIRES max_connections_per_client > 0: never left at 0
  if (n >= options_.max_connections_per_client) return false;
  ++n;
  return true;
}

void Server::ReleaseClient(const net::ip::address& address) {
  std::lock_guard<std::mutex> lock(clients_mu_);
  auto it = clients_.find(address);
  if (it == clients_.end()) return;
  if (--it->second == 0) clients_.erase(it);
}

// glibc keeps freed memory in its arenas (one per I/O thread, and fragmented by thousands of
// connection buffers); malloc_trim gives back what it can, including free pages in the middle of
// a heap. It walks every arena, a few milliseconds at worst, hence only after a flood: at each
// halving of the open connections from the peak, and a last time once at most
// kReturnMemoryIdle remain (then the flood is over and the peak starts again from there).
void Server::MaybeReturnMemory(int64_t open) {
  const int64_t peak = peak_open_.load();
  if (peak < kReturnMemoryPeak) return;
  int64_t level = trim_level_.load();  // open connections at the last trim; 0 = none since the peak
  const int64_t from = level > 0 ? level : peak;
  const bool idle = open <= kReturnMemoryIdle;
  if (open > from / 2 && !idle) return;
  if (!trim_level_.compare_exchange_strong(level, std::max<int64_t>(open, 1))) return;  // another thread is at it
  if (idle) {
    trim_level_.store(0);
    peak_open_.store(open);
  }
  malloc_trim(0);
  ++memory_returns_;
}

void Server::SetTlsContext(std::shared_ptr<net::ssl::context> context) { tls_context_.store(std::move(context)); }

net::awaitable<void> Server::Reject(tcp::socket socket, int status) {
  StringResponse res =
      status == 503
          ? ErrorResponse(503, "the server has too many open connections; retry later", "too_many_connections", 11,
                          false, options_.server_name)
          : ErrorResponse(429,
                          "this client address has too many open connections (" +
                              std::to_string(options_.max_connections_per_client) + "); close some or retry later",
                          "too_many_connections_from_client", 11, false, options_.server_name);
  res.set(bhttp::field::retry_after, "1");
  if (auto tls = tls_context_.load()) {
    // An HTTPS client can only read the 503 after a handshake; it gets kLinger for it.
    TlsStream stream(std::move(socket), *tls);
    beast::get_lowest_layer(stream).expires_after(kLinger);
    auto [hec] = co_await stream.async_handshake(net::ssl::stream_base::server, kTuple);
    if (!hec) co_await RefuseAndClose(stream, std::move(res), kLinger, 64u << 10);
    beast::get_lowest_layer(stream).close();
  } else {
    beast::tcp_stream stream(std::move(socket));
    // The send buffer of a new connection is empty: the write completes without waiting.
    co_await RefuseAndClose(stream, std::move(res), kLinger, 64u << 10);
    stream.close();
  }
  --lingering_rejections_;
}

net::awaitable<void> Server::Session(tcp::socket socket, ThreadState& ts, net::ip::address peer) {
  // The context is taken at accept: a certificate reload applies to the next connection.
  if (auto tls = tls_context_.load()) {
    TlsStream stream(std::move(socket), *tls);
    co_await Serve(stream, ts);
  } else {
    beast::tcp_stream stream(std::move(socket));
    co_await Serve(stream, ts);
  }
  if (options_.max_connections_per_client > 0) ReleaseClient(peer);
  MaybeReturnMemory(--open_connections_);
}

template <class Stream>
net::awaitable<void> Server::Serve(Stream& stream, ThreadState& ts) {
  constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
  beast::tcp_stream& base = beast::get_lowest_layer(stream);
  TlsStream* tls_stream = nullptr;
  if constexpr (kTls) tls_stream = &stream;
  ThreadState::Session entry{&base, true};
  ts.sessions.insert(&entry);
  bool serving = true;
  if constexpr (kTls) {
    // The handshake is part of reading the first request: the same deadline, and idle for Stop.
    base.expires_after(options_.read_timeout);
    auto [hec] = co_await stream.async_handshake(net::ssl::stream_base::server, kTuple);
    if (hec) {
      ++tls_handshake_failures_;
      beast::error_code ignored;
      const auto peer = base.socket().remote_endpoint(ignored);
      spdlog::debug("TLS handshake with {}:{} failed: {}", peer.address().to_string(), peer.port(), hec.message());
      serving = false;
    }
  }
  // Beast reads at most the buffer's free capacity and at least 512 bytes, and the parser
  // consumes what it parses, so a buffer left to grow by itself stays at 512 bytes and a 4 KB
  // request takes 9 reads. kHeadReadBytes covers a usual head (and a small body with it); a
  // body is then read in reads as large as its Content-Length, up to kBodyReadBytes; a buffer
  // grown past that is handed back between requests, so that idle connections hold little.
  constexpr size_t kHeadReadBytes = 2048;
  constexpr size_t kBodyReadBytes = 64 * 1024;
  beast::flat_buffer buffer;
  buffer.reserve(kHeadReadBytes);
  const auto connection = std::make_shared<Connection>();
  bool first = true;
  while (serving && !stopping_.load()) {
    if (buffer.capacity() > kBodyReadBytes && buffer.size() == 0) {
      buffer.shrink_to_fit();
      buffer.reserve(kHeadReadBytes);
    }
    bhttp::request_parser<bhttp::string_body> parser;
    parser.get().body() = ts.TakeSpareBody();  // empty; the body reader appends to it
    parser.body_limit(options_.max_body_bytes);
    parser.header_limit(options_.max_header_bytes);
    entry.idle = true;
    base.expires_never();
    beast::error_code ec;
    {
      Watchdog watchdog(base, first ? options_.read_timeout : options_.idle_timeout, connection);
      std::tie(ec, std::ignore) = co_await bhttp::async_read_header(stream, buffer, parser, kTuple);
      if (ec && watchdog.fired()) ec = beast::error::timeout;
    }
    first = false;
    entry.idle = false;
    if (ec) {
      if (ec == bhttp::error::header_limit) {
        co_await RefuseAndClose(
            stream,
            ErrorResponse(431, "request headers are larger than the limit", "", 11, false, options_.server_name),
            options_.write_timeout, kLingerBytes);
      } else if (ec == bhttp::error::body_limit) {
        // A Content-Length over the limit is refused as soon as the head is parsed.
        co_await RefuseAndClose(
            stream,
            ErrorResponse(
                413, "request body is larger than the limit of " + std::to_string(options_.max_body_bytes) + " bytes",
                "", 11, false, options_.server_name),
            options_.write_timeout, kLingerBytes);
      } else if (ec == beast::error::timeout && (buffer.size() > 0 || parser.got_some())) {
        // Part of a head arrived, the rest did not within read_timeout (RFC 9110 section 15.5.9).
        ++request_timeouts_;
        co_await RefuseAndClose(stream,
                                ErrorResponse(408, "the request head did not arrive in time", "request_timeout", 11,
                                              false, options_.server_name),
                                options_.write_timeout, kLingerBytes);
      } else if (ec != bhttp::error::end_of_stream && ec != net::error::operation_aborted &&
                 ec != beast::error::timeout && ec != net::error::eof && ec != net::error::connection_reset &&
                 ec != net::ssl::error::stream_truncated && ec.category() != net::error::get_ssl_category() &&
                 buffer.size() > 0) {
        co_await RefuseAndClose(
            stream, ErrorResponse(400, "malformed HTTP request: " + ec.message(), "", 11, false, options_.server_name),
            options_.write_timeout, kLingerBytes);
      }
      break;
    }
    const auto& head = parser.get();
    if (std::string why; const int refusal = CheckRequestHead(head, why)) {
      co_await RefuseAndClose(stream, ErrorResponse(refusal, why, "", head.version(), false, options_.server_name),
                              options_.write_timeout, kLingerBytes);
      break;
    }
    if (beast::iequals(head[bhttp::field::expect], "100-continue")) {
      bhttp::response<bhttp::empty_body> cont{bhttp::status::continue_, head.version()};
      base.expires_after(options_.write_timeout);
      auto [wec, wn] = co_await bhttp::async_write(stream, cont, kTuple);
      if (wec) break;
    }
    if (!parser.is_done()) {
      if (const auto length = parser.content_length()) {
        buffer.reserve(std::min<uint64_t>(buffer.size() + *length, kBodyReadBytes));
      } else {
        buffer.reserve(kBodyReadBytes);  // chunked: the length is not known
      }
      // What came with the head (usually the whole body) is parsed without a read, a deadline
      // or a round through the event loop; the rest is read under the read deadline.
      beast::error_code bec;
      while (!parser.is_done() && buffer.size() > 0) {
        const size_t used = parser.put(buffer.data(), bec);
        buffer.consume(used);
        if (bec == bhttp::error::need_more) bec = {};
        if (bec || used == 0) break;
      }
      if (!bec && !parser.is_done()) {
        base.expires_never();
        Watchdog watchdog(base, options_.read_timeout, connection);
        std::tie(bec, std::ignore) = co_await bhttp::async_read(stream, buffer, parser, kTuple);
        if (bec && watchdog.fired()) bec = beast::error::timeout;
      }
      if (bec) {
        if (bec == bhttp::error::body_limit) {
          co_await RefuseAndClose(
              stream,
              ErrorResponse(
                  413, "request body is larger than the limit of " + std::to_string(options_.max_body_bytes) + " bytes",
                  "", head.version(), false, options_.server_name),
              options_.write_timeout, kLingerBytes);
        } else if (bec == beast::error::timeout) {
          ++request_timeouts_;
          co_await RefuseAndClose(stream,
                                  ErrorResponse(408, "the request body did not arrive in time", "request_timeout",
                                                head.version(), false, options_.server_name),
                                  options_.write_timeout, kLingerBytes);
        } else if (bec != net::error::eof && bec != bhttp::error::partial_message &&
                   bec != net::error::connection_reset && bec != net::error::operation_aborted &&
                   bec != net::ssl::error::stream_truncated && bec.category() != net::error::get_ssl_category()) {
          co_await RefuseAndClose(stream,
                                  ErrorResponse(400, "malformed HTTP request body: " + bec.message(), "",
                                                head.version(), false, options_.server_name),
                                  options_.write_timeout, kLingerBytes);
        }
        break;
      }
    }
    ++active_exchanges_;
    Exchange exchange(base, tls_stream, parser.release(), options_, connection);
    if (stopping_.load()) exchange.CloseAfter();
    co_await handler_.Handle(exchange);
    --active_exchanges_;
    ts.KeepSpareBody(std::move(exchange.request().body()));
    if (!exchange.keep_alive()) break;
  }
  if constexpr (kTls) {
    // close_notify, so that the client can tell the end from a truncation; bounded, since the
    // client need not answer. Still registered: Stop cancels it.
    if (serving && base.socket().is_open()) {
      base.expires_after(kTlsShutdown);
      co_await stream.async_shutdown(kTuple);
    }
  }
  ts.sessions.erase(&entry);
  beast::error_code ignored;
  base.socket().shutdown(tcp::socket::shutdown_send, ignored);
  base.close();
}

void Server::Stop(std::chrono::milliseconds drain) {
  if (stopped_.exchange(true)) return;
  stopping_.store(true);
  if (acceptor_) {
    net::post(*accept_context_, [this] {
      beast::error_code ignored;
      acceptor_->close(ignored);
    });
  }
  // Idle keep-alive connections close now; busy ones close after their exchange.
  auto cancel_sessions = [this](bool idle_only) {
    for (size_t i = 0; i < contexts_.size(); ++i) {
      net::post(*contexts_[i], [ts = thread_states_[i].get(), idle_only] {
        for (auto* s : ts->sessions) {
          if (!idle_only || s->idle) s->stream->cancel();
        }
      });
    }
  };
  cancel_sessions(true);
  const auto deadline = std::chrono::steady_clock::now() + drain;
  while (active_exchanges_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    cancel_sessions(true);  // sessions that finished an exchange and went idle
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (active_exchanges_.load() > 0) {
    spdlog::warn("drain deadline reached with {} requests in flight; cancelling them", active_exchanges_.load());
  }
  cancel_sessions(false);
  for (auto& w : work_) w.reset();
  // Give cancelled coroutines a moment to unwind, then stop the loops.
  const auto hard_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (open_connections_.load() > 0 && std::chrono::steady_clock::now() < hard_deadline) {
    cancel_sessions(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (accept_context_) accept_context_->stop();
  for (auto& ctx : contexts_) ctx->stop();
  for (auto& t : threads_) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
}

void Server::Wait() {
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace prefix_router::http
