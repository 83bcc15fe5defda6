// The HTTP/1.1 server layer shared by the gateway (`serve`) and the engine emulator (`engine`).
//
// A Server owns N I/O threads, each running its own io_context, and one more thread for its
// listener (so that nothing a connection allocates lands between the per-socket state Asio
// keeps on the accepting thread; see Start); accepted connections are spread over the I/O
// threads round-robin and stay on their thread for life, so a connection's state needs no
// strand or lock (the Beast "one executor per connection" model, without cross-thread hops).
// Each connection is a coroutine that reads a request (head and body, with deadlines and size
// limits), hands it to the Handler as an Exchange, and loops while keep-alive holds.
//
// The Handler answers through the Exchange: either one complete response (Send), or a stream
// (SendHead, then SendBody pieces, then Finish) for SSE and other incremental bodies. Every
// write has a deadline; a failed write means the client is gone and the handler should abort
// its own upstream work.
//
// Errors the server answers itself, with an OpenAI-style JSON body: 400 for a malformed request,
// 413 for a body over the limit, 431 for headers over the limit, 503 while shutting down.
// Framing is checked strictly (RFC 9112 sections 3.2, 6.1 and 6.3; see CheckRequestHead): a
// Transfer-Encoding whose final coding is not `chunked`, `chunked` applied twice, or any
// Transfer-Encoding on an HTTP/1.0 request is 400; a coding before the final `chunked` (gzip,
// deflate, ...) is 501, since no request coding but chunked is implemented; an HTTP/1.1 request
// without Host, or with two, is 400; so are two Authorization headers (which credential would
// count is ambiguous, and a front proxy may check one while we read the other). A connection
// whose head or body stops arriving mid-request gets 408 when read_timeout passes; one that sent
// nothing of a request (a new or an idle keep-alive connection) is closed without an answer.
// After such an answer the connection closes politely: the server half-closes and discards what
// the client still sends (at most 1 MiB, for at most 1 s), so that the client reads the error
// instead of losing it to a reset. A client trickling its head or body is cut off when
// read_timeout (a deadline for the whole head, then for the whole body) passes.
//
// Overload: with max_connections set, a connection accepted while that many are open gets a
// 503 (Connection: close) written without waiting and is closed. With max_connections_per_client
// set, a connection from an address that already holds that many gets 429
// (too_many_connections_from_client) the same way, so that one client (100 connections that each
// trickle a byte, say) cannot take every slot. The rejection holds no more
// than a socket and a small buffer for a short linger (so that the client reads the 503 rather
// than a reset), and at most kMaxLingeringRejections of those at a time, beyond which the
// connection is closed at once.
//
// TLS: with ServerOptions::tls set, every connection is HTTPS (TLS 1.2 at least): the handshake
// has read_timeout to complete, and one that fails is counted (tls_handshake_failures), logged at
// debug and closed without touching other connections. Everything above works the same over
// TLS; a session ends with a close_notify (bounded by kTlsShutdown). SetTlsContext replaces the
// context for connections accepted after it (certificate reload); open ones keep theirs.
//
// Accept errors (out of descriptors, above all) back off exponentially from 10 ms to 1 s, with
// one warning when a streak starts and one line when it ends. After a flood, once the open
// connections fall to half of their peak (a peak of kReturnMemoryPeak or more), and at each
// further halving down to kReturnMemoryIdle, the server hands freed heap back to the system
// (malloc_trim), so that RSS returns near its level before.
//
// Shutdown (Stop): the listener closes at once; idle keep-alive connections close; exchanges in
// progress get up to the drain deadline to finish, then everything is cancelled.
//
// Thread-safety: Start/Stop/Wait from one controlling thread; handlers run on I/O threads.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/container/small_vector.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace prefix_router::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Request = bhttp::request<bhttp::string_body>;
using StringResponse = bhttp::response<bhttp::string_body>;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

inline constexpr auto kTuple = net::as_tuple(net::use_awaitable);

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0 = ephemeral (see Server::port())
  // false: no listener at all, only the I/O threads (the gateway's loops run on them while the
  // endpoint picker alone takes requests: docs/epp.md); host and port are then unused.
  bool listen = true;
  uint32_t io_threads = 1;
  uint64_t max_body_bytes = 32ull << 20;
  uint32_t max_header_bytes = 64u << 10;
  std::chrono::milliseconds read_timeout{30'000};   // request head and body
  std::chrono::milliseconds write_timeout{60'000};  // each write to the client
  std::chrono::milliseconds idle_timeout{60'000};   // keep-alive wait for the next request
  std::string server_name = "prefix-router";
  uint32_t max_connections = 0;             // open client connections; 0 = no limit
  uint32_t max_connections_per_client = 0;  // open connections per client address; 0 = no limit
  std::shared_ptr<net::ssl::context> tls;   // null = plain HTTP; see SetTlsContext
};

// One request and its response on one connection. Lives for one Handler::Handle call.
//
// Plain or TLS: the Exchange holds the TCP stream (deadlines, the socket) and, on a TLS
// connection, the TLS stream the bytes go through; each write picks one with a branch (OnStream).
// Templating Exchange on the stream type instead would template the Handler interface and so
// every handler (the gateway, the engine emulator, the test upstream) for one predictable branch
// per write; the connection loop itself is templated (Server::Serve), where the reads are.
// What a client connection's exchanges share, one after the other (shared with the handlers
// of its pending operations, which may outlive the exchange):
// - the watch for the client's closing while a response is prepared (Exchange::WatchClient).
//   Its wait on the socket stays armed from one exchange to the next, so that watching costs a
//   system call only when the client has sent something since;
// - where a response head is serialized (its capacity kept for the next).
struct Connection {
  bool armed = false;                  // a wait for readability is pending on the socket
  class Exchange* exchange = nullptr;  // the exchange watching, if any
  std::function<void()> on_gone;       // what it does when the client goes
  std::string head;                    // the head being written
  uint64_t watchdog = 0;               // the read deadlines' count (server.cc's Watchdog)
  uint64_t watchdog_fired = 0;         // the number of the last one that fired
};

class Exchange {
 public:
  // `tls` is null on a plain connection, else the TLS stream over `stream`. `connection` is
  // the connection's shared state (null: one of its own, made when needed).
  Exchange(beast::tcp_stream& stream, TlsStream* tls, Request request, const ServerOptions& options,
           std::shared_ptr<Connection> connection = nullptr);
  ~Exchange() { StopWatchingClient(); }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  Request& request() { return request_; }
  const Request& request() const { return request_; }
  std::chrono::steady_clock::time_point received_at() const { return received_at_; }
  net::any_io_executor executor() { return stream_.get_executor(); }

  // A complete response. Returns false when the client could not be written to.
  net::awaitable<bool> Send(StringResponse response);
  // An OpenAI-style JSON error response.
  net::awaitable<bool> SendError(int status, std::string_view message, std::string_view code = {});
  // Streaming: the head (status and headers). Without a Content-Length the body is sent
  // chunked. Then body pieces as they come, then Finish (the terminating chunk).
  // `first_piece` (optional) goes out with the head in the same write, and `last` says the body
  // ends with it (the terminating chunk goes in that write too, as Finish would send it): a
  // response that arrived whole leaves in one system call.
  net::awaitable<bool> SendHead(bhttp::response_header<> head, net::const_buffer first_piece = {}, bool last = false);
  // SendHead of `head` as a proxy relays it, written from `head`'s fields where they are, with
  // no copy of them: the fields for which `skip(head, name)` is true are left out (null: none),
  // then each of `extra` (name, value) is set as response_header::set would (replacing fields of
  // its name). The bytes are those SendHead would write for the head so edited.
  using SkipField = bool (*)(const bhttp::response_header<>& head, std::string_view name);
  net::awaitable<bool> SendHeadFrom(const bhttp::response_header<>& head, SkipField skip,
                                    std::span<const std::pair<std::string_view, std::string_view>> extra,
                                    net::const_buffer first_piece = {}, bool last = false);
  // One piece of the body; `last`: the body ends with it (then Finish has nothing left to send).
  net::awaitable<bool> SendBody(net::const_buffer data, bool last = false);
  net::awaitable<bool> Finish();

  // A header every response of this exchange carries, whichever call sends it (Send,
  // SendError, SendHead); it replaces a header of that name already in the response. For
  // correlation headers such as x-request-id.
  void SetResponseHeader(std::string_view name, std::string value) {
    response_headers_.emplace_back(std::string(name), std::move(value));
  }

  bool head_sent() const { return head_sent_; }
  // The status code of the response whose head was sent (0 before), and when its head went out:
  // the time to first byte of the client's response, for the access log.
  int status() const { return status_; }
  std::chrono::steady_clock::time_point head_sent_at() const { return head_sent_at_; }
  // The connection may carry another request after this one.
  bool keep_alive() const { return keep_alive_ && !client_failed_; }
  // Closes the connection after this exchange (for example after a truncated stream).
  void CloseAfter() { keep_alive_ = false; }
  bool client_failed() const { return client_failed_; }
  // Completes when the client has closed its connection (or reset it); otherwise waits until
  // cancelled. Meant to race an upstream operation (awaitable operator ||) so that a client
  // that goes away aborts the work done for it. A client that pipelines its next request
  // cannot be watched this way; the wait then lasts until cancelled.
  net::awaitable<void> WaitClientGone();
  // The same watch without a race: until StopWatchingClient (or the exchange's end), `on_gone`
  // runs on this exchange's thread if the client closes or resets its connection (the exchange
  // is then failed, as by a failed write), for example to cancel the upstream operation that
  // the request waits on. Cheaper than WaitClientGone in a race: nothing is spawned, and the
  // wait on the socket outlives the exchange (Connection). A client that pipelines its next
  // request is not watched further. One watch at a time.
  void WatchClient(std::function<void()> on_gone);
  void StopWatchingClient();
  // Closes the client connection at once, without a response (fault injection in tests and the
  // engine emulator).
  void Abort();

 private:
  // Starts an asynchronous operation `op(stream)` on the stream the bytes go through; both
  // branches give the same awaitable type (as_tuple(use_awaitable) erases the stream's).
  template <class Op>
  auto OnStream(Op&& op) {
    return tls_ ? op(*tls_) : op(stream_);
  }

  // Starts the connection's wait for readability, unless one is pending.
  static void ArmClientWatch(const std::shared_ptr<Connection>& watch, tcp::socket& socket);
  // The client closed or reset its connection (or the wait failed): fail and tell the watcher.
  void ClientGone();

  beast::tcp_stream& stream_;
  TlsStream* tls_;
  std::shared_ptr<Connection> connection_;
  Request request_;
  const ServerOptions& options_;
  std::chrono::steady_clock::time_point received_at_;
  // Room for a few inline (x-request-id, a tenant's rate-limit headers) before any allocation.
  boost::container::small_vector<std::pair<std::string, std::string>, 4> response_headers_;
  bool keep_alive_;
  bool head_sent_ = false;
  int status_ = 0;
  std::chrono::steady_clock::time_point head_sent_at_{};
  // Writes `data` (framed as a chunk when chunked_), and the terminating chunk when `last`,
  // after `prefix` (a serialized head, or empty), in one write.
  net::awaitable<bool> WritePiece(std::string_view prefix, net::const_buffer data, bool last);

  bool chunked_ = false;
  bool finished_ = false;
  bool client_failed_ = false;
};

class Handler {
 public:
  virtual ~Handler() = default;
  // Must answer through the exchange (or leave the client failed); never throws.
  virtual net::awaitable<void> Handle(Exchange& exchange) = 0;
};

class Server {
 public:
  Server(ServerOptions options, Handler& handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens, then starts the I/O threads. Errors name the address.
  Status Start();
  // The bound port (useful with port 0).
  uint16_t port() const { return port_; }
  // Stops accepting, lets exchanges in progress finish for up to `drain`, then cancels the
  // rest and joins the threads. Safe to call from any thread, once.
  void Stop(std::chrono::milliseconds drain);
  // Blocks until Stop has completed.
  void Wait();

  uint32_t thread_count() const { return static_cast<uint32_t>(contexts_.size()); }
  net::io_context& context(uint32_t i) { return *contexts_[i]; }
  // Connections currently open and exchanges currently being handled, over all threads.
  int64_t open_connections() const { return open_connections_.load(); }
  int64_t active_exchanges() const { return active_exchanges_.load(); }
  // Connections accepted (and not refused), since Start.
  int64_t accepted_connections() const { return accepted_connections_.load(); }
  // Connections refused because max_connections were open, since Start.
  int64_t rejected_connections() const { return rejected_connections_.load(); }
  // Connections refused because their address held max_connections_per_client, since Start.
  int64_t rejected_client_connections() const { return rejected_client_connections_.load(); }
  // Requests answered 408 because their head or body stopped arriving, since Start.
  int64_t request_timeouts() const { return request_timeouts_.load(); }
  // accept() failures (EMFILE and the like), since Start.
  int64_t accept_errors() const { return accept_errors_.load(); }
  // Times freed heap was handed back to the system after a flood, since Start.
  int64_t memory_returns() const { return memory_returns_.load(); }

  // TLS handshakes that failed or timed out, since Start.
  int64_t tls_handshake_failures() const { return tls_handshake_failures_.load(); }
  bool tls() const { return tls_context_.load() != nullptr; }
  // The context for connections accepted from now on (certificate reload).
  // REQUIRES: the server was made with ServerOptions::tls (a plain server stays plain).
  void SetTlsContext(std::shared_ptr<net::ssl::context> context);

  // Rejected connections lingering (to let their 503 reach the client) at one time.
  static constexpr int64_t kMaxLingeringRejections = 64;
  // How long a TLS session's close_notify exchange may take when the connection ends.
  static constexpr std::chrono::milliseconds kTlsShutdown{500};
  // Accept-error backoff: the first wait, and the longest.
  static constexpr std::chrono::milliseconds kAcceptBackoffMin{10};
  static constexpr std::chrono::milliseconds kAcceptBackoffMax{1000};
  // Below this many open connections at the peak, nothing is handed back (not worth a trim).
  static constexpr int64_t kReturnMemoryPeak = 1024;
  // After a flood, the last trim comes once at most this many connections remain open.
  static constexpr int64_t kReturnMemoryIdle = 64;
  bool stopping() const { return stopping_.load(); }

 private:
  struct ThreadState;
  net::awaitable<void> AcceptLoop();
  // On `ts`'s thread: starts a session for each connection handed over by AcceptLoop.
  void StartSessions(net::io_context& ctx, ThreadState& ts);
  // `peer` is the client's address when max_connections_per_client is set (else unspecified).
  net::awaitable<void> Session(tcp::socket socket, ThreadState& thread, net::ip::address peer);
  // The request loop of one connection; Stream is beast::tcp_stream or TlsStream.
  template <class Stream>
  net::awaitable<void> Serve(Stream& stream, ThreadState& thread);
  // Answers `status` (503 too_many_connections or 429 too_many_connections_from_client).
  net::awaitable<void> Reject(tcp::socket socket, int status);
  // Per-client accounting: true (and counted) when `address` may open one more connection.
  bool AdmitClient(const net::ip::address& address);
  void ReleaseClient(const net::ip::address& address);
  // Called when a connection ends with `open` still open: trims the heap after a flood.
  void MaybeReturnMemory(int64_t open);

  ServerOptions options_;
  Handler& handler_;
  std::vector<std::unique_ptr<net::io_context>> contexts_;
  std::vector<std::unique_ptr<ThreadState>> thread_states_;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  std::unique_ptr<net::io_context> accept_context_;  // the listener's (see Start)
  std::unique_ptr<tcp::acceptor> acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<int64_t> open_connections_{0};
  std::atomic<int64_t> active_exchanges_{0};
  std::atomic<int64_t> rejected_connections_{0};
  std::atomic<int64_t> lingering_rejections_{0};
  std::atomic<int64_t> tls_handshake_failures_{0};
  std::atomic<int64_t> accepted_connections_{0};
  std::atomic<int64_t> rejected_client_connections_{0};
  std::atomic<int64_t> request_timeouts_{0};
  std::atomic<int64_t> accept_errors_{0};
  std::atomic<int64_t> memory_returns_{0};
  std::atomic<int64_t> peak_open_{0};   // open connections' peak since the last flood ended
  std::atomic<int64_t> trim_level_{0};  // open connections at the last trim of this flood; 0 = none
  std::mutex clients_mu_;
  std::unordered_map<net::ip::address, uint32_t> clients_;  // guarded by clients_mu_; only with
                                                            // max_connections_per_client
  std::atomic<std::shared_ptr<net::ssl::context>> tls_context_;
};

// Headers that belong to one connection and are never forwarded (RFC 9110 section 7.6.1).
bool IsHopByHopHeader(std::string_view name);
// True when the sender's Connection header lists `name` as a connection option: that header
// is hop-by-hop as well and is not forwarded (RFC 9110 section 7.6.1).
template <bool isRequest>
bool NamedByConnection(const bhttp::header<isRequest>& message, std::string_view name) {
  auto [begin, end] = message.equal_range(bhttp::field::connection);
  for (auto it = begin; it != end; ++it) {
    for (auto token : bhttp::token_list(it->value())) {
      if (beast::iequals(token, name)) return true;
    }
  }
  return false;
}

// A request head's framing and singleton fields, checked before the body is read: 0 when the
// head is acceptable, else the status to refuse it with (400 or 501, see the top of this file)
// and, in `message`, why.
int CheckRequestHead(const bhttp::request_header<>& head, std::string& message);

// Writes as much of `buffers` as the socket's send buffer takes at once, without waiting: one
// non-blocking system call (the socket is made non-blocking for synchronous calls the first
// time). Returns the bytes written; `ec` is set on an error other than would_block. For a
// plain TCP write that usually fits: then it has no deadline to arm and no completion to go
// through the event loop; the caller sends what is left with an async write, under its
// deadline, as before.
size_t WriteNow(tcp::socket& socket, std::span<const net::const_buffer> buffers, beast::error_code& ec);

// The wire form of a response head as Exchange::SendHead writes it, appended to `out`: the start
// line of `head` in HTTP/1.0 or 1.1 (`version`, the request's); `head`'s fields but those for
// which `skip(head, name)` is true (null: none); each of `extra`, then Server: `server_name`
// unless a field names it, then each of `always`, set as response_header::set would (replacing
// fields of its name, case-insensitively); Transfer-Encoding: chunked (version 1.1) when no
// Content-Length is left; Connection only as `keep_alive` needs it (close on 1.1, keep-alive on
// 1.0). Returns whether the body goes chunked; clears `keep_alive` for an HTTP/1.0 response
// without a length (its body ends with the connection). No allocation once warm: the fields are
// viewed where they are.
bool AppendResponseHead(std::string& out, const bhttp::response_header<>& head, Exchange::SkipField skip,
                        std::span<const std::pair<std::string_view, std::string_view>> extra,
                        std::string_view server_name, std::span<const std::pair<std::string, std::string>> always,
                        unsigned version, bool& keep_alive);

}  // namespace prefix_router::http
