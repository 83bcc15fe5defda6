#include "gateway/upstream.h"

#include <cerrno>

#include "http/tls.h"

namespace prefix_router::gateway {

ConnectionPool& ConnectionPool::ForThisThread() {
  thread_local ConnectionPool pool;
  return pool;
}

net::awaitable<std::pair<beast::error_code, Lease>> ConnectionPool::Acquire(const UpstreamTarget& target,
                                                                            std::chrono::milliseconds connect_timeout,
                                                                            bool fresh) {
  Lease lease;
  auto executor = co_await net::this_coro::executor;
  if (!fresh) {
    auto it = idle_.find(target.key);
    if (it != idle_.end()) {
      while (!it->second.empty()) {
        auto stream = std::move(it->second.back());
        it->second.pop_back();
        // Only a connection on this thread's executor can be used here.
        if (stream->tcp().socket().is_open() && stream->tcp().get_executor() == executor) {
          lease.stream = std::move(stream);
          lease.reused = true;
          co_return std::make_pair(beast::error_code{}, std::move(lease));
        }
      }
    }
  }
  if (target.https && !target.tls) {
    lease.error = "no TLS context for this instance (see the error logged when it was configured)";
    co_return std::make_pair(
        beast::error_code(boost::system::errc::protocol_not_supported, boost::system::generic_category()),
        std::move(lease));
  }
  lease.stream = target.https ? std::make_unique<UpstreamStream>(executor, target.tls)
                              : std::make_unique<UpstreamStream>(executor);
  lease.stream->set_pool_key(target.key);
  beast::tcp_stream& base = lease.stream->tcp();
  beast::error_code ec;
  auto address = net::ip::make_address(target.host, ec);
  // One deadline for the TCP connect and the TLS handshake.
  base.expires_after(connect_timeout);
  if (!ec) {
    std::tie(ec) = co_await base.async_connect(tcp::endpoint(address, target.port), http::kTuple);
  } else {
    tcp::resolver resolver(executor);
    auto [rec, results] = co_await resolver.async_resolve(target.host, std::to_string(target.port), http::kTuple);
    if (rec) co_return std::make_pair(rec, std::move(lease));
    auto [cec, endpoint] = co_await base.async_connect(results, http::kTuple);
    ec = cec;
  }
  if (!ec) base.socket().set_option(tcp::no_delay(true), ec);
  if (!ec && target.https) {
    SSL* ssl = lease.stream->tls()->native_handle();
    if (!http::PrepareClientConnection(ssl, target.tls_name.empty() ? target.host : target.tls_name,
                                       target.tls_config.verify)) {
      lease.error = "TLS setup failed: " + http::TakeOpenSslError();
      co_return std::make_pair(
          beast::error_code(boost::system::errc::invalid_argument, boost::system::generic_category()),
          std::move(lease));
    }
    auto [hec] = co_await lease.stream->tls()->async_handshake(net::ssl::stream_base::client, http::kTuple);
    if (hec) {
      const std::string why = http::VerifyFailure(ssl);
      lease.error = "TLS handshake failed: " + hec.message() + (why.empty() ? "" : " (" + why + ")");
      ec = hec;
    }
  }
  co_return std::make_pair(ec, std::move(lease));
}

void ConnectionPool::Release(Lease lease) {
  if (!lease.stream || !lease.stream->tcp().socket().is_open()) return;
  auto& list = idle_[lease.stream->pool_key()];
  if (list.size() >= max_idle_) return;  // closes it
  lease.stream->tcp().expires_never();
  list.push_back(std::move(lease.stream));
}

size_t ConnectionPool::idle_count() const {
  size_t n = 0;
  for (const auto& [key, list] : idle_) n += list.size();
  return n;
}

bool IsLocalResourceError(const beast::error_code& ec) {
  if (!ec) return false;
  if (ec.category() != boost::system::system_category() && ec.category() != boost::system::generic_category()) {
    return false;
  }
  switch (ec.value()) {
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
    case EADDRNOTAVAIL: return true;
    default: return false;
  }
}

}  // namespace prefix_router::gateway
