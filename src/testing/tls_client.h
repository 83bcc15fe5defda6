// TlsClient: a test-only HTTPS/1.1 client for loopback tests of the gateway's TLS listener.
//
// One client is one TLS connection (kept alive across round trips), driven synchronously from
// the test thread with a deadline on every operation. It verifies the server against a CA file
// and a host name as a production client would, and reports the certificate the server
// presented (subject and serial), so that tests can tell which certificate a server used.
//
// Thread-safety: a client belongs to one thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "http/server.h"
#include "testing/http_client.h"

namespace prefix_router::testing {

class TlsClient {
 public:
  // Verifies the server's chain against `ca_file` and its name against `host` (also sent as SNI
  // when it is not an IP address).
  TlsClient(uint16_t port, std::string ca_file, std::string host = "localhost",
            std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000));
  ~TlsClient();
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;

  // TCP connect and TLS handshake (a no-op when connected).
  http::beast::error_code Connect();
  bool connected() const { return stream_ != nullptr; }
  int connects() const { return connects_; }
  // Sends the request and reads the whole response (a chunked or SSE body in full).
  ClientResponse RoundTrip(const ClientRequest& request);
  // The presented certificate's subject ("CN=...") and serial, after a handshake.
  const std::string& peer_subject() const { return peer_subject_; }
  long peer_serial() const { return peer_serial_; }
  void Close();

 private:
  template <typename Start>
  http::beast::error_code Run(Start&& start);

  uint16_t port_;
  std::string host_;
  std::chrono::milliseconds timeout_;
  http::net::io_context ioc_;
  std::shared_ptr<http::net::ssl::context> context_;
  std::unique_ptr<http::TlsStream> stream_;
  http::beast::flat_buffer buffer_;
  std::string peer_subject_;
  long peer_serial_ = -1;
  int connects_ = 0;
};

}  // namespace prefix_router::testing
