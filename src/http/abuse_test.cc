// Abuse tests of the HTTP server: what hostile or broken clients send, written as raw bytes on a
// loopback socket, and what they must get back. Oversized heads (431) and bodies (413, read by
// the client rather than lost to a reset), clients trickling their head or body (cut off by the
// read deadline, their connection released), pipelined requests (answered in order), invalid
// chunked framing and control characters in header values (400, never reaching the handler).
// Whatever arrives, the server answers or closes and keeps serving others.
//
// Bounded: every socket operation has a deadline; waits are Eventually polls.
#include "http/server.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "testing/raw_client.h"
#include "testing/wait.h"

namespace prefix_router::http {
namespace {

using namespace std::chrono_literals;
using prefix_router::testing::Eventually;
using prefix_router::testing::ParseResponses;
using prefix_router::testing::RawClient;

const bool kQuiet = [] {
  spdlog::set_level(spdlog::level::warn);
  return true;
}();

// 16 MiB and 3 bytes of a pattern that shows a misplaced or repeated byte.
const std::string& BigBody() {
  static const std::string body = [] {
    std::string b((size_t{16} << 20) + 3, '\0');
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>('a' + (i * 7 + i / 4093) % 26);
    return b;
  }();
  return body;
}

// Answers "<target> <body bytes>"; /slow/... waits 100 ms first (to show pipelined answers keep
// their order).
class EchoHandler final : public Handler {
 public:
  net::awaitable<void> Handle(Exchange& ex) override {
    ++handled;
    const std::string target(ex.request().target());
    if (target.starts_with("/slow")) {
      net::steady_timer timer(co_await net::this_coro::executor, 100ms);
      co_await timer.async_wait(kTuple);
    }
    StringResponse res{bhttp::status::ok, 11};
    res.set(bhttp::field::content_type, "text/plain");
    if (target.starts_with("/big")) {  // kBigBody, in pieces of uneven sizes
      bhttp::response_header<> head;
      head.result(bhttp::status::ok);
      head.set(bhttp::field::content_type, "text/plain");
      const std::string& big = BigBody();
      size_t at = 0;
      bool ok = true;
      for (size_t piece : {size_t{1} << 20, (size_t{5} << 20) + 7, (size_t{3} << 20) + 1}) {
        const net::const_buffer data(big.data() + at, piece);
        ok = at == 0 ? co_await ex.SendHead(head, data) : co_await ex.SendBody(data);
        if (!ok) co_return;
        at += piece;
      }
      co_await ex.SendBody(net::const_buffer(big.data() + at, big.size() - at), true);
      co_return;
    }
    if (target.starts_with("/body")) {  // the body itself
      res.body() = ex.request().body();
      co_await ex.Send(std::move(res));
      co_return;
    }
    std::string echoed = target + " " + std::to_string(ex.request().body().size());
    for (const auto& f : ex.request()) {
      if (beast::iequals(f.name_string(), "x-echo")) echoed += " x-echo=" + std::string(f.value());
    }
    res.body() = std::move(echoed);
    co_await ex.Send(std::move(res));
  }
  std::atomic<int> handled{0};
};

struct TestServer {
  EchoHandler handler;
  std::unique_ptr<Server> server;
};

// Small limits and a short read deadline, so that abuse is quick to provoke.
std::unique_ptr<TestServer> StartServer() {
  auto t = std::make_unique<TestServer>();
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.io_threads = 1;
  o.max_header_bytes = 1024;
  o.max_body_bytes = 1024;
  o.read_timeout = 300ms;
  o.idle_timeout = 2000ms;
  o.write_timeout = 2000ms;
  t->server = std::make_unique<Server>(o, t->handler);
  const Status s = t->server->Start();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return t;
}

using Exchanged = prefix_router::testing::RawExchange;
using prefix_router::testing::SendRaw;

// Checks one JSON error response with this status, Connection: close, then an orderly close.
void ExpectRefused(const Exchanged& e, int status) {
  ASSERT_EQ(e.responses.size(), 1u);
  const StringResponse& r = e.responses[0];
  EXPECT_EQ(r.result_int(), status) << r.body();
  EXPECT_EQ(r[bhttp::field::content_type], "application/json");
  EXPECT_NE(r.body().find("\"error\""), std::string::npos) << r.body();
  EXPECT_FALSE(r.keep_alive());
  EXPECT_EQ(e.ended_by, net::error::eof) << "the connection should end with a close, not " << e.ended_by.message();
}

// The server still answers a plain request on a new connection.
void ExpectStillServing(uint16_t port) {
  const Exchanged e = SendRaw(port, "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(e.responses.size(), 1u);
  EXPECT_EQ(e.responses[0].result_int(), 200);
  EXPECT_EQ(e.responses[0].body(), "/ok 0");
}

// ------------------------------------------------------------------------------------- limits

// A head over max_header_bytes (one long header, or many small ones) gets 431 and a close.
TEST(HttpAbuseTest, OversizedHeadersGet431) {
  auto t = StartServer();
  const uint16_t port = t->server->port();
  ExpectRefused(SendRaw(port, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n"), 431);
  std::string many = "GET / HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 300; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  ExpectRefused(SendRaw(port, many + "\r\n"), 431);
  EXPECT_EQ(t->handler.handled.load(), 0);
  ExpectStillServing(port);
}

// A body over max_body_bytes gets 413, whether its Content-Length says so up front or chunks
// run over; the server discards the rest of the body before closing, so the client reads the
// 413 and an orderly close instead of a reset.
TEST(HttpAbuseTest, OversizedBodyGets413NotReset) {
  auto t = StartServer();
  const uint16_t port = t->server->port();
  const std::string big(64 * 1024, 'b');
  ExpectRefused(
      SendRaw(port, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(big.size()) + "\r\n\r\n" + big),
      413);
  std::string chunked = "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 16; ++i) chunked += "400\r\n" + std::string(1024, 'c') + "\r\n";
  ExpectRefused(SendRaw(port, chunked + "0\r\n\r\n"), 413);
  EXPECT_EQ(t->handler.handled.load(), 0);
  // Exactly at the limit is fine.
  const Exchanged ok =
      SendRaw(port, "POST /up HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1024\r\n\r\n" +
                        std::string(1024, 'b'));
  ASSERT_EQ(ok.responses.size(), 1u);
  EXPECT_EQ(ok.responses[0].body(), "/up 1024");
}

// ---------------------------------------------------------------------------------- slowloris

// Clients trickling their head (or body) a few bytes at a time are cut off by the read
// deadline, which bounds the whole head (body), not each read; their connections are released.
TEST(HttpAbuseTest, SlowlorisIsCutOffByTheReadDeadline) {
  auto t = StartServer();
  const uint16_t port = t->server->port();
  for (const bool in_body : {false, true}) {
    SCOPED_TRACE(in_body ? "trickling the body" : "trickling the head");
    std::vector<std::unique_ptr<RawClient>> clients;
    for (int i = 0; i < 8; ++i) {
      clients.push_back(std::make_unique<RawClient>(port));
      EXPECT_FALSE(clients.back()->Write(in_body ? "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n"
                                                 : "GET / HTTP/1.1\r\nHost: x\r\n"));
    }
    EXPECT_TRUE(Eventually([&] { return t->server->open_connections() == 8; }));
    // Each keeps trickling (one byte each 50 ms, for up to 5 s: far past the 300 ms deadline)
    // until the server closes it.
    std::vector<bool> closed(clients.size(), false);
    int cut_off = 0;
    for (int step = 0; step < 100 && cut_off < 8; ++step) {
      for (size_t i = 0; i < clients.size(); ++i) {
        if (closed[i]) continue;
        closed[i] = clients[i]->Write(in_body ? "b" : "X", 1000ms) || clients[i]->ClosedWithin(5ms);
        cut_off += closed[i];
      }
    }
    EXPECT_EQ(cut_off, 8);
    EXPECT_TRUE(Eventually([&] { return t->server->open_connections() == 0; }));
  }
  EXPECT_EQ(t->handler.handled.load(), 0);
  ExpectStillServing(port);
}

// ---------------------------------------------------------------------------------- pipelining

// Requests pipelined in one write get their responses in order, even when the first is slower.
TEST(HttpAbuseTest, PipelinedRequestsAnsweredInOrder) {
  auto t = StartServer();
  const Exchanged e = SendRaw(t->server->port(),
                              "GET /slow/1 HTTP/1.1\r\nHost: x\r\n\r\n"
                              "POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                              "POST /3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
                              "GET /4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(e.responses.size(), 4u);
  EXPECT_EQ(e.responses[0].body(), "/slow/1 0");
  EXPECT_EQ(e.responses[1].body(), "/2 5");
  EXPECT_EQ(e.responses[2].body(), "/3 3");
  EXPECT_EQ(e.responses[3].body(), "/4 0");
  for (const auto& r : e.responses) EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(e.ended_by, net::error::eof);
}

// Each request's body is read into a string a finished request left behind on the thread (the
// server keeps a few, emptied): nothing of a longer body before shows in a shorter one after,
// nor in a chunked or an empty one.
TEST(HttpAbuseTest, ReusedBodyStringsCarryNothingOver) {
  auto t = StartServer();
  const std::string long_body(900, 'a');
  const Exchanged e =
      SendRaw(t->server->port(), "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n" + long_body +
                                     "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nbb"
                                     "POST /body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                     "3\r\nxyz\r\n0\r\n\r\n"
                                     "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                                     "GET /body HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(e.responses.size(), 5u);
  EXPECT_EQ(e.responses[0].body(), long_body);
  EXPECT_EQ(e.responses[1].body(), "bb");
  EXPECT_EQ(e.responses[2].body(), "xyz");
  EXPECT_EQ(e.responses[3].body(), "");
  EXPECT_EQ(e.responses[4].body(), "");
  for (const auto& r : e.responses) EXPECT_EQ(r.result_int(), 200);
}

// A response larger than the socket's buffers, to a client that does not read for a while: each
// write takes what the socket takes at once and sends the rest as the client reads; every byte
// arrives once, in order.
TEST(HttpAbuseTest, LargeResponseToASlowReaderArrivesWhole) {
  auto t = StartServer();
  RawClient client(t->server->port());
  ASSERT_FALSE(client.Write("GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::this_thread::sleep_for(300ms);  // the server fills the socket's buffers meanwhile
  beast::error_code ended_by;
  const std::string bytes = client.ReadToClose(ended_by, 10s);
  EXPECT_EQ(ended_by, net::error::eof);
  const auto responses = ParseResponses(bytes);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].result_int(), 200);
  EXPECT_EQ(responses[0].body().size(), BigBody().size());
  EXPECT_TRUE(responses[0].body() == BigBody()) << "the body differs from what was sent";
}

// ------------------------------------------------------------------------------ invalid framing

// Invalid chunked framing gets 400 and never reaches the handler.
TEST(HttpAbuseTest, InvalidChunkedEncodingIs400) {
  auto t = StartServer();
  const uint16_t port = t->server->port();
  const std::string head = "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const char* body : {"zz\r\nhello\r\n0\r\n\r\n",                 // not a hex size
                           "5\r\nhelloXX0\r\n\r\n",                    // no CRLF after the data
                           "fffffffffffffffffffff\r\nx\r\n0\r\n\r\n",  // size overflows
                           "5;\x01=x\r\nhello\r\n0\r\n\r\n"}) {        // control byte in an extension
    SCOPED_TRACE(body);
    ExpectRefused(SendRaw(port, head + body), 400);
  }
  // Ambiguous lengths (request smuggling): both framings, or two different Content-Lengths.
  ExpectRefused(SendRaw(port,
                        "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "5\r\nhello\r\n0\r\n\r\n"),
                400);
  ExpectRefused(SendRaw(port, "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
                400);
  EXPECT_EQ(t->handler.handled.load(), 0);
  ExpectStillServing(port);
}

// Control characters in header values (a bare CR or LF that would split the header when
// forwarded, NUL, other C0 controls, DEL) and malformed header names get 400 and never reach
// the handler. Folded lines (obs-fold) are joined with a space, as RFC 9112 allows: one value,
// no new header.
TEST(HttpAbuseTest, ControlCharactersInHeadersAre400) {
  auto t = StartServer();
  const uint16_t port = t->server->port();
  for (const std::string& value :
       {std::string("a\nX-Injected: 1"), std::string("a\rX-Injected: 1"), std::string("a\0b", 3),
        std::string("a\x01"
                    "b"),
        std::string("a\x7f"
                    "b")}) {
    SCOPED_TRACE(::testing::PrintToString(value));
    ExpectRefused(SendRaw(port, "GET / HTTP/1.1\r\nHost: x\r\nX-Echo: " + value + "\r\n\r\n"), 400);
  }
  ExpectRefused(SendRaw(port, "GET / HTTP/1.1\r\nHost: x\r\nX-Echo : v\r\n\r\n"), 400);  // space before the colon
  ExpectRefused(SendRaw(port, "GET / HTTP/1.1\r\nHost: x\r\nX(Echo): v\r\n\r\n"), 400);
  EXPECT_EQ(t->handler.handled.load(), 0);

  const Exchanged folded =
      SendRaw(port, "GET /f HTTP/1.1\r\nHost: x\r\nX-Echo: a\r\n X-Injected: 1\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(folded.responses.size(), 1u);
  EXPECT_EQ(folded.responses[0].body(), "/f 0 x-echo=a X-Injected: 1");
  ExpectStillServing(port);
}

// ---------------------------------------------------------------------------- transfer codings

// RFC 9112 sections 6.1 and 6.3: a request whose final transfer coding is not chunked has no
// knowable length (400 and close); chunked twice is 400; a coding before chunked is one we do not
// implement (501); Transfer-Encoding on HTTP/1.0 is 400. None reaches the handler, and the bytes
// after the head (which a lax server would read as a second request) are never answered.
TEST(HttpAbuseTest, TransferCodingsOtherThanFinalChunkedAreRefused) {
  auto t = StartServer();
  const uint16_t port = t->server->port();
  // After each head: a chunked body, then a request that must never be answered.
  const std::string tail = "5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::pair<std::string, int> cases[] = {
      {"Transfer-Encoding: identity\r\n", 400},
      {"Transfer-Encoding: gzip\r\n", 400},
      {"Transfer-Encoding: xchunked\r\n", 400},
      {"Transfer-Encoding: chunked, gzip\r\n", 400},
      {"Transfer-Encoding: chunked, chunked\r\n", 400},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400},
      {"Transfer-Encoding: ,\r\n", 400},
      {"Transfer-Encoding: gzip, chunked\r\n", 501},
      {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 501},
      {"Transfer-Encoding: x-custom, chunked\r\n", 501},
  };
  for (const auto& [field, status] : cases) {
    SCOPED_TRACE(field);
    ExpectRefused(SendRaw(port, "POST /c HTTP/1.1\r\nHost: x\r\n" + field + "\r\n" + tail), status);
  }
  {
    SCOPED_TRACE("HTTP/1.0 with chunked");
    ExpectRefused(SendRaw(port, "POST /c HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + tail), 400);
  }
  EXPECT_EQ(t->handler.handled.load(), 0);
  // chunked alone, in any case and with list whitespace, is fine.
  for (const char* field :
       {"Transfer-Encoding: chunked\r\n", "Transfer-Encoding: CHUNKED \r\n", "Transfer-Encoding: , chunked\r\n"}) {
    SCOPED_TRACE(field);
    const Exchanged ok = SendRaw(port, std::string("POST /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n") + field +
                                           "\r\n5\r\nhello\r\n0\r\n\r\n");
    ASSERT_EQ(ok.responses.size(), 1u);
    EXPECT_EQ(ok.responses[0].body(), "/c 5");
  }
  ExpectStillServing(port);
}

// ------------------------------------------------------------------------------- singleton fields

// RFC 9112 section 3.2: an HTTP/1.1 request without Host, or with two, is 400 (HTTP/1.0 needs
// none). Two Authorization headers are 400 too: which credential counts would be ambiguous.
TEST(HttpAbuseTest, HostAndAuthorizationMustBeSingle) {
  auto t = StartServer();
  const uint16_t port = t->server->port();
  ExpectRefused(SendRaw(port, "GET / HTTP/1.1\r\n\r\n"), 400);
  ExpectRefused(SendRaw(port, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
  ExpectRefused(SendRaw(port,
                        "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer one\r\n"
                        "Authorization: Bearer two\r\n\r\n"),
                400);
  EXPECT_EQ(t->handler.handled.load(), 0);
  const Exchanged old = SendRaw(port, "GET /old HTTP/1.0\r\n\r\n");
  ASSERT_EQ(old.responses.size(), 1u);
  EXPECT_EQ(old.responses[0].body(), "/old 0");
  ExpectStillServing(port);
}

// ------------------------------------------------------------------------------------- timeouts

// A request whose head or body stops arriving gets 408 when read_timeout passes, then a close;
// a connection that sent nothing (new, or idle between requests) is closed without an answer.
TEST(HttpAbuseTest, RequestTimeoutGets408) {
  auto t = StartServer();
  const uint16_t port = t->server->port();
  for (const char* partial :
       {"GET /slow HTTP/1.1\r\nHost: x\r\n", "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"}) {
    SCOPED_TRACE(partial);
    RawClient client(port);
    EXPECT_FALSE(client.Write(partial));
    beast::error_code ended_by;
    const auto responses = ParseResponses(client.ReadToClose(ended_by));
    ASSERT_EQ(responses.size(), 1u);
    EXPECT_EQ(responses[0].result_int(), 408) << responses[0].body();
    EXPECT_NE(responses[0].body().find("request_timeout"), std::string::npos);
    EXPECT_FALSE(responses[0].keep_alive());
    EXPECT_EQ(ended_by, net::error::eof);
  }
  EXPECT_EQ(t->server->request_timeouts(), 2);
  {
    SCOPED_TRACE("silent connection");
    RawClient client(port);
    beast::error_code ended_by;
    EXPECT_EQ(client.ReadToClose(ended_by), "");
    EXPECT_EQ(ended_by, net::error::eof);
  }
  {
    SCOPED_TRACE("idle after a request");
    RawClient client(port);
    EXPECT_FALSE(client.Write("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"));
    beast::error_code ended_by;
    const auto responses = ParseResponses(client.ReadToClose(ended_by));
    ASSERT_EQ(responses.size(), 1u);  // the answer, then a silent close at idle_timeout
    EXPECT_EQ(responses[0].result_int(), 200);
    EXPECT_EQ(ended_by, net::error::eof);
  }
  EXPECT_EQ(t->server->request_timeouts(), 2);
  EXPECT_EQ(t->handler.handled.load(), 1);
}

// ------------------------------------------------------------------------- per-client connections

// With max_connections_per_client, one address holding that many connections (each trickling a
// byte, say) gets 429 for the next; other addresses are still served, and the slot comes back
// when a connection closes. Without it, one client could take every slot of max_connections.
TEST(HttpAbuseTest, PerClientConnectionLimit) {
  EchoHandler handler;
  ServerOptions o;
  o.max_connections = 10;
  o.max_connections_per_client = 3;
  o.read_timeout = 5000ms;
  Server server(o, handler);
  ASSERT_TRUE(server.Start().ok());
  const uint16_t port = server.port();
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawClient>(port));
    EXPECT_FALSE(held.back()->Write("G"));
  }
  EXPECT_TRUE(Eventually([&] { return server.open_connections() == 3; }));
  const Exchanged refused = SendRaw(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  ExpectRefused(refused, 429);
  EXPECT_NE(refused.responses[0].body().find("too_many_connections_from_client"), std::string::npos);
  EXPECT_EQ(server.rejected_client_connections(), 1);
  EXPECT_EQ(server.rejected_connections(), 0);
  {
    RawClient other(port, "127.0.0.2");  // another host
    EXPECT_FALSE(other.Write("GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    beast::error_code ended_by;
    const auto responses = ParseResponses(other.ReadToClose(ended_by));
    ASSERT_EQ(responses.size(), 1u);
    EXPECT_EQ(responses[0].body(), "/other 0");
  }
  held.pop_back();  // one closes: its slot comes back
  EXPECT_TRUE(Eventually([&] { return server.open_connections() == 2; }));
  const Exchanged again = SendRaw(port, "GET /again HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(again.responses.size(), 1u);
  EXPECT_EQ(again.responses[0].body(), "/again 0");
  server.Stop(0ms);
}

// ------------------------------------------------------------------------------- head checks

TEST(CheckRequestHeadTest, NamesTheProblem) {
  bhttp::request_header<> head;
  head.version(11);
  head.set(bhttp::field::host, "x");
  std::string why;
  EXPECT_EQ(CheckRequestHead(head, why), 0);
  head.set(bhttp::field::transfer_encoding, "deflate, chunked");
  EXPECT_EQ(CheckRequestHead(head, why), 501);
  EXPECT_NE(why.find("'deflate' is not implemented"), std::string::npos) << why;
  head.set(bhttp::field::transfer_encoding, "chunked");
  head.set(bhttp::field::content_length, "5");
  EXPECT_EQ(CheckRequestHead(head, why), 400);
  EXPECT_NE(why.find("both"), std::string::npos) << why;
}

}  // namespace
}  // namespace prefix_router::http
