// Upstream connections: keep-alive TCP connections to model-server instances, pooled per I/O
// thread so that a connection is only ever touched by the thread that owns it (no locks).
//
// A pooled connection may have been closed by the instance while idle; the caller detects that
// on its first write or read (Lease::reused tells it the connection was not fresh) and retries
// on a new connection without counting a retry.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

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
  std::string key;          // identity in the pool: "host:port"
};

struct Lease {
  std::unique_ptr<beast::tcp_stream> stream;
  bool reused = false;
  std::string key;
};

class ConnectionPool {
 public:
  explicit ConnectionPool(size_t max_idle_per_target = 128) : max_idle_(max_idle_per_target) {}
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // An idle connection to `target`, or a new one (always new when `fresh`).
  net::awaitable<std::pair<beast::error_code, Lease>> Acquire(const UpstreamTarget& target,
                                                              std::chrono::milliseconds connect_timeout,
                                                              bool fresh);
  // Returns a connection whose last exchange completed and allows reuse.
  void Release(Lease lease);
  size_t idle_count() const;

  // The pool of the calling I/O thread.
  static ConnectionPool& ForThisThread();

 private:
  size_t max_idle_;
  std::unordered_map<std::string, std::vector<std::unique_ptr<beast::tcp_stream>>> idle_;
};

}  // namespace prefix_router::gateway
