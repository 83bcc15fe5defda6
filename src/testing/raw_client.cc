#include "testing/raw_client.h"

#include <gtest/gtest.h>

namespace prefix_router::testing {
namespace net = http::net;
namespace beast = http::beast;
namespace bhttp = http::bhttp;
using tcp = http::tcp;

RawClient::RawClient(uint16_t port, std::string_view source) : socket_(ioc_) {
  beast::error_code ec;
  if (!source.empty()) {
    socket_.open(tcp::v4(), ec);
    socket_.bind(tcp::endpoint(net::ip::make_address(std::string(source)), 0), ec);
    EXPECT_FALSE(ec) << "bind " << source << ": " << ec.message();
  }
  socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
  EXPECT_FALSE(ec) << "connect: " << ec.message();
}

beast::error_code RawClient::Run(std::optional<beast::error_code>& result, std::chrono::milliseconds limit) {
  ioc_.restart();
  ioc_.run_for(limit);
  if (!result) {
    beast::error_code ignored;
    socket_.cancel(ignored);
    ioc_.restart();
    ioc_.run();
    return net::error::timed_out;
  }
  return *result;
}

beast::error_code RawClient::Write(std::string_view bytes, std::chrono::milliseconds limit) {
  std::optional<beast::error_code> result;
  net::async_write(socket_, net::buffer(bytes.data(), bytes.size()),
                   [&](beast::error_code ec, size_t) { result = ec; });
  return Run(result, limit);
}

std::string RawClient::ReadToClose(beast::error_code& ended_by, std::chrono::milliseconds limit) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left <= std::chrono::milliseconds(0)) {
      ended_by = net::error::timed_out;
      return out;
    }
    char buf[4096];
    std::optional<beast::error_code> result;
    size_t got = 0;
    socket_.async_read_some(net::buffer(buf), [&](beast::error_code ec, size_t n) {
      result = ec;
      got = n;
    });
    const beast::error_code ec = Run(result, left);
    out.append(buf, got);
    if (ec) {
      ended_by = ec;
      return out;
    }
  }
}

bool RawClient::ClosedWithin(std::chrono::milliseconds limit) {
  beast::error_code ended_by;
  ReadToClose(ended_by, limit);
  return ended_by != net::error::timed_out;
}

std::vector<http::StringResponse> ParseResponses(std::string_view bytes) {
  std::vector<http::StringResponse> out;
  while (!bytes.empty()) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.eager(true);
    parser.body_limit(boost::none);  // whatever a test's server sent (Beast's default stops at 8 MB)
    beast::error_code ec;
    while (!parser.is_done()) {
      const size_t n = parser.put(net::buffer(bytes.data(), bytes.size()), ec);
      bytes.remove_prefix(n);
      if (ec == bhttp::error::need_more && n > 0 && !bytes.empty()) {
        ec = {};
        continue;
      }
      if (ec) return out;
    }
    out.push_back(parser.release());
  }
  return out;
}

RawExchange SendRaw(uint16_t port, std::string_view bytes) {
  RawClient client(port);
  RawExchange e;
  (void)client.Write(bytes);
  beast::error_code ended_by;
  e.responses = ParseResponses(client.ReadToClose(ended_by));
  e.ended_by = ended_by;
  return e;
}

}  // namespace prefix_router::testing
