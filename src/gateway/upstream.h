// Upstream connections: keep-alive TCP connections to model-server instances, with TLS over them
// for https instances, pooled per I/O thread so that a connection is only ever touched by the
// thread that owns it (no locks).
//
// A pooled connection may have been closed by the instance while idle; the caller detects that
// on its first write or read (Lease::reused tells it the connection was not fresh) and retries
// on a new connection without counting a retry.
//
// https: the TLS handshake is part of connecting (same deadline), so a certificate that fails
// verification is a connect failure like a refused connection, and Lease::error says why in
// OpenSSL's words ("certificate verify failed: hostname mismatch"). The pool key carries the
// scheme and the TLS context, so a connection verified under one set of settings is never lent
// under another.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gateway/config.h"
#include "http/server.h"

namespace prefix_router::gateway {

namespace net = http::net;
namespace beast = http::beast;
using http::tcp;

struct UpstreamTarget {
  std::string host;
  uint16_t port = 80;
  std::string base_path;    // prepended to proxied request targets
  std::string host_header;  // "host:port" as sent in Host
  std::string key;          // identity in the pool: scheme, host:port and TLS context
  bool https = false;
  std::string tls_name;                    // https: name verified and sent as SNI; "" = host
  UpstreamTlsConfig tls_config;            // https: the settings tls was made with
  std::shared_ptr<net::ssl::context> tls;  // https: null when it could not be made
  Secret authorization;                    // sent as Authorization when not empty
};

// One connection to an instance: a TCP stream, and for https the TLS stream over it.
class UpstreamStream {
 public:
  explicit UpstreamStream(net::any_io_executor executor) : tcp_(std::make_unique<beast::tcp_stream>(executor)) {}
  UpstreamStream(net::any_io_executor executor, std::shared_ptr<net::ssl::context> context)
      : context_(std::move(context)), tls_(std::make_unique<http::TlsStream>(executor, *context_)) {}
  UpstreamStream(const UpstreamStream&) = delete;
  UpstreamStream& operator=(const UpstreamStream&) = delete;

  // Deadlines, the socket and the executor are the TCP stream's.
  beast::tcp_stream& tcp() { return tls_ ? tls_->next_layer() : *tcp_; }
  http::TlsStream* tls() { return tls_.get(); }
  // Starts `op(stream)` on the stream the bytes go through; both branches give the same
  // awaitable type (as_tuple(use_awaitable) erases the stream's).
  template <class Op>
  auto On(Op&& op) {
    return tls_ ? op(*tls_) : op(*tcp_);
  }

  // The bytes read from the instance and not yet parsed. Reserved to kReadBytes on first use
  // (Beast reads at most the buffer's free capacity, and at least 512 bytes: without the
  // reserve a response arrives 512 bytes per system call), kept for the connection's life.
  beast::flat_buffer& read_buffer() {
    if (read_buffer_.capacity() < kReadBytes) read_buffer_.reserve(kReadBytes);
    return read_buffer_;
  }
  // Where a response body is relayed from, kRelayBytes, allocated on first use and kept for
  // the connection's life (so that a request's coroutine frame does not carry it).
  std::span<char> relay_buffer() {
    if (!relay_) relay_ = std::make_unique<char[]>(kRelayBytes);
    return {relay_.get(), kRelayBytes};
  }
  // Where a request head is serialized before it is written (its capacity kept for the next).
  std::string& head_buffer() { return head_; }
  // A new parser for the next response (kept here rather than in the request's coroutine frame,
  // which asio recycles only up to 1,020 bytes). Valid until the next call or the connection's end.
  beast::http::response_parser<beast::http::buffer_body>& NewResponseParser() {
    parser_.emplace();
    return *parser_;
  }
  // The target's key in the pool (UpstreamTarget::key), set when the connection is made: where
  // ConnectionPool::Release puts it back.
  const std::string& pool_key() const { return pool_key_; }
  void set_pool_key(std::string key) { pool_key_ = std::move(key); }
  static constexpr size_t kReadBytes = 16 * 1024;
  static constexpr size_t kRelayBytes = 16 * 1024;

 private:
  std::shared_ptr<net::ssl::context> context_;  // outlives tls_
  std::unique_ptr<beast::tcp_stream> tcp_;      // plain
  std::unique_ptr<http::TlsStream> tls_;        // https
  beast::flat_buffer read_buffer_;
  std::string head_;
  std::string pool_key_;
  std::unique_ptr<char[]> relay_;
  std::optional<beast::http::response_parser<beast::http::buffer_body>> parser_;
};

struct Lease {
  std::unique_ptr<UpstreamStream> stream;  // its pool_key() says where it goes back
  bool reused = false;
  std::string error;  // with a failed Acquire: what failed, for the log and the 502's message
};

class ConnectionPool {
 public:
  explicit ConnectionPool(size_t max_idle_per_target = 128) : max_idle_(max_idle_per_target) {}
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // An idle connection to `target`, or a new one (always new when `fresh`).
  net::awaitable<std::pair<beast::error_code, Lease>> Acquire(const UpstreamTarget& target,
                                                              std::chrono::milliseconds connect_timeout, bool fresh);
  // Returns a connection whose last exchange completed and allows reuse.
  void Release(Lease lease);
  size_t idle_count() const;

  // The pool of the calling I/O thread.
  static ConnectionPool& ForThisThread();

 private:
  size_t max_idle_;
  std::unordered_map<std::string, std::vector<std::unique_ptr<UpstreamStream>>> idle_;
};

// True for errors that say this process ran out of something (descriptors: EMFILE, ENFILE;
// socket buffers or memory: ENOBUFS, ENOMEM; local ports: EADDRNOTAVAIL), not that the instance
// failed. Such a failure never counts against an instance's health.
bool IsLocalResourceError(const beast::error_code& ec);

}  // namespace prefix_router::gateway
