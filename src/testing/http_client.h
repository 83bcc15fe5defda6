// HttpClient: a test-only HTTP/1.1 client for loopback integration tests.
//
// One client is one TCP connection, driven synchronously from the test thread; every operation
// (connect, write, read) has a deadline, so a silent server fails a test instead of hanging it.
// Besides whole responses it can read a response incrementally, recording when each body piece
// arrived (for streaming order and timing tests), and it can drop its connection at any chosen
// moment (for tests of clients that go away).
//
// Thread-safety: a client belongs to one thread at a time; use one client per thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/server.h"

namespace prefix_router::testing {

using ClientRequest = http::bhttp::request<http::bhttp::string_body>;
using Headers = std::vector<std::pair<std::string, std::string>>;

// A request with Host set and the payload prepared (Content-Length when there is a body).
ClientRequest MakeRequest(http::bhttp::verb method, std::string_view target, std::string body = "",
                          const Headers& headers = {});

struct ClientResponse {
  http::beast::error_code error;  // transport failure; the message is then incomplete
  http::StringResponse message;

  int status() const { return message.result_int(); }
  const std::string& body() const { return message.body(); }
  // The header's value, or "" when absent.
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
};

struct BodyPiece {
  std::chrono::steady_clock::time_point at;  // when this piece was read
  std::string bytes;
};

struct StreamedResponse {
  http::beast::error_code error;  // why reading stopped before the end (none when complete)
  bool complete = false;          // the body ended as framed (last chunk, or Content-Length)
  int status = 0;
  http::bhttp::response_header<> head;
  std::string body;  // every piece, in order
  std::vector<BodyPiece> pieces;
  std::chrono::steady_clock::time_point sent_at;  // the request had been written
  std::chrono::steady_clock::time_point done_at;  // reading stopped

  std::string Header(std::string_view name) const;
};

class HttpClient {
 public:
  explicit HttpClient(uint16_t port, std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Opens the connection (a no-op when open). connection_refused when nothing listens.
  http::beast::error_code Connect();
  bool connected() const;
  // Connections opened over the client's life (1 when keep-alive held throughout).
  int connects() const { return connects_; }

  // Writes a request, connecting first if needed.
  http::beast::error_code Send(const ClientRequest& request);
  // Reads one whole response.
  ClientResponse Read();
  // Send + Read. A failed write still tries to read (a server may answer, then close, before
  // taking the whole body).
  ClientResponse RoundTrip(const ClientRequest& request);
  // Reads a response head, then its body piece by piece as it arrives, until the body ends,
  // the connection fails, the deadline passes, or `on_piece` (called after each piece) returns
  // false (the connection is then left open, mid-response, for the caller to Close).
  StreamedResponse ReadStreamed(const std::function<bool(const StreamedResponse&)>& on_piece = {});
  // Drops the connection at once, as a client that goes away.
  void Close();

 private:
  template <typename Start>
  http::beast::error_code Run(Start&& start);

  uint16_t port_;
  std::chrono::milliseconds timeout_;
  http::net::io_context ioc_;
  std::unique_ptr<http::beast::tcp_stream> stream_;
  http::beast::flat_buffer buffer_;
  std::chrono::steady_clock::time_point sent_at_;
  int connects_ = 0;
};

// One request on a new connection.
ClientResponse Fetch(uint16_t port, const ClientRequest& request);
ClientResponse Get(uint16_t port, std::string_view target);

// The value of one sample (metric name and labels exactly as rendered) in the server's
// GET /metrics, or -1 when the series is absent.
double Metric(uint16_t port, std::string_view series);
// The sum of every sample whose line starts with `prefix` (e.g. a metric name and its first
// labels: `name{model="m1",`), 0 when there is none.
double MetricSum(uint16_t port, std::string_view prefix);
ClientResponse Post(uint16_t port, std::string_view target, std::string body, const Headers& headers = {});

}  // namespace prefix_router::testing
