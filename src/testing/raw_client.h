// RawClient: a test-only client that writes raw bytes on a loopback TCP connection and reads
// whatever comes back, for tests of malformed, hostile or pipelined HTTP that a well-behaved
// client library would refuse to send.
//
// Driven synchronously from the test thread; every operation has a deadline.
//
// Thread-safety: a client belongs to one thread at a time.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/server.h"

namespace prefix_router::testing {

class RawClient {
 public:
  // Connects at once (a failure is a test failure), from `source` (a loopback address such as
  // 127.0.0.2, to act as another client host) or from the system's choice when empty.
  explicit RawClient(uint16_t port, std::string_view source = {});
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // Writes all of `bytes`; an error when the server closed or reset the connection.
  http::beast::error_code Write(std::string_view bytes,
                                std::chrono::milliseconds limit = std::chrono::milliseconds(5000));
  // Reads until the server closes the connection or `limit` passes. `ended_by` is eof for an
  // orderly close, connection_reset for a reset, timed_out when the connection stayed open.
  std::string ReadToClose(http::beast::error_code& ended_by,
                          std::chrono::milliseconds limit = std::chrono::milliseconds(5000));
  // True when the server has closed the connection (EOF or reset) within `limit`; consumes
  // anything the server sent meanwhile.
  bool ClosedWithin(std::chrono::milliseconds limit);

 private:
  http::beast::error_code Run(std::optional<http::beast::error_code>& result, std::chrono::milliseconds limit);

  http::net::io_context ioc_;
  http::tcp::socket socket_;
};

// The complete responses in `bytes`, in order (an incomplete last one is left out).
std::vector<http::StringResponse> ParseResponses(std::string_view bytes);

struct RawExchange {
  std::vector<http::StringResponse> responses;
  http::beast::error_code ended_by;  // as RawClient::ReadToClose
};

// Sends `bytes` on a new connection (a failed write is ignored: the server may refuse before
// reading everything) and reads until the server closes the connection.
RawExchange SendRaw(uint16_t port, std::string_view bytes);

}  // namespace prefix_router::testing
