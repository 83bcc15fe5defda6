// Abuse tests through the gateway, with raw bytes: attempts to inject headers through the
// routing headers (X-Amzn-SageMaker-Prefix-Aware-Id, X-Amzn-SageMaker-Inference-Component) must
// be refused with 400 or reach the instance as one harmless value, never as a header of their
// own; pipelined requests are routed and answered in order. (The server-level abuse cases, on a
// bare Server, are in src/http/abuse_test.cc.)
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "gateway/admin.h"
#include "gateway/gateway_test_util.h"
#include "testing/raw_client.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

using namespace std::chrono_literals;
using namespace prefix_router::gateway::testing;
using pt::RecordedRequest;
using pt::SendRaw;

const bool kQuiet = [] {
  QuietLogs();
  return true;
}();

// Raw bytes of a POST with `extra` header lines (each ending in CRLF) and a JSON body.
std::string RawPost(std::string_view target, const std::string& body, const std::string& extra, bool close = true) {
  return "POST " + std::string(target) + " HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" + extra +
         (close ? "Connection: close\r\n" : "") + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// No header the instance received carries a control character, and none is named X-Injected.
void ExpectNoInjectedHeader(const std::vector<RecordedRequest>& received) {
  for (const auto& r : received) {
    for (const auto& [name, value] : r.headers) {
      EXPECT_FALSE(http::beast::iequals(name, "x-injected")) << name << ": " << value;
      for (char c : name + value) {
        EXPECT_FALSE((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
            << "control character in " << name << ": " << value;
      }
    }
  }
}

// CR, LF, NUL and other controls in either routing header, on either API, are a 400 from the
// gateway and reach no instance; a folded line becomes one value with a space, forwarded as
// that one header (the native route then validates it as a routing group like any other).
TEST(GatewayAbuseTest, RoutingHeaderInjectionIsRefusedOrHarmless) {
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  const std::string chat = ChatBody("m1", "hi");
  for (const std::string& header : {std::string(kGroupHeader), std::string(kComponentHeader)}) {
    for (const auto& [target, body] : {std::pair<std::string_view, std::string>{kInvocations, "{}"},
                                       std::pair<std::string_view, std::string>{kChat, chat}}) {
      for (const std::string& value : {std::string("g\nX-Injected: 1"), std::string("g\rX-Injected: 1"),
                                       std::string("g\r\nX-Injected: 1\r\nX-Other:"), std::string("g\0x", 3),
                                       std::string("g\x01x"), std::string("g\x7fx")}) {
        SCOPED_TRACE(header + " on " + std::string(target) + ": " + ::testing::PrintToString(value));
        const auto e = SendRaw(port, RawPost(target, body, header + ": " + value + "\r\n"));
        if (value.starts_with("g\r\nX-Injected")) {
          // Two well-formed header lines: nothing was injected, the client simply sent them.
          continue;
        }
        ASSERT_EQ(e.responses.size(), 1u);
        EXPECT_EQ(e.responses[0].result_int(), 400) << e.responses[0].body();
      }
    }
  }
  // Only the deliberately well-formed requests above reached the instance; none carried a
  // control character, and X-Injected arrived only where the client sent it as a real header.
  const int well_formed = fakes[0]->requests();
  EXPECT_EQ(well_formed, 4);

  // A folded line: one value "g X-Injected: 1" on the routing header, no header of its own.
  const int before = fakes[0]->requests();
  for (const std::string& header : {std::string(kGroupHeader), std::string(kComponentHeader)}) {
    const auto e = SendRaw(port, RawPost(kInvocations, "{}", header + ": g\r\n X-Injected: 1\r\n"));
    ASSERT_EQ(e.responses.size(), 1u);
    EXPECT_EQ(e.responses[0].result_int(), 200) << e.responses[0].body();
  }
  const auto received = fakes[0]->received();
  ASSERT_EQ(static_cast<int>(received.size()), before + 2);
  const std::vector<RecordedRequest> folded(received.end() - 2, received.end());
  ExpectNoInjectedHeader(folded);
  EXPECT_EQ(folded[0].Header(kGroupHeader), "g X-Injected: 1");
  EXPECT_EQ(folded[1].Header(kComponentHeader), "g X-Injected: 1");
}

// Two requests pipelined in one write are routed and answered in order, each by the instance
// (the gateway's watch for a departing client must not mistake the second for a close).
TEST(GatewayAbuseTest, PipelinedRequestsThroughTheGateway) {
  Fakes fakes = StartFakes({"a", "b"});
  pt::Behavior slow;
  slow.head_delay = 200ms;  // the first is still waiting when the second arrives
  for (auto& f : fakes) f->SetBehavior(slow);
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  const auto e = SendRaw(gw->port(), RawPost(kInvocations, R"({"n":1})", "", /*close=*/false) +
                                         RawPost("/invocations?second", R"({"n":22})", ""));
  ASSERT_EQ(e.responses.size(), 2u);
  EXPECT_EQ(e.responses[0].result_int(), 200);
  EXPECT_EQ(e.responses[1].result_int(), 200);
  EXPECT_NE(e.responses[0].body().find("\"target\":\"/invocations\",\"body_bytes\":7"), std::string::npos)
      << e.responses[0].body();
  EXPECT_NE(e.responses[1].body().find("\"target\":\"/invocations?second\",\"body_bytes\":8"), std::string::npos)
      << e.responses[1].body();
  EXPECT_EQ(TotalRequests(fakes), 2);
  EXPECT_EQ(TotalAborted(fakes), 0);
  EXPECT_TRUE(pt::Eventually([&] { return TotalInFlight(*gw) == 0; }));
}

// Series lines (not comments) in a /metrics answer.
size_t SeriesCount(uint16_t port) {
  const pt::ClientResponse r = pt::Get(port, "/metrics");
  EXPECT_EQ(r.status(), 200);
  size_t n = 0;
  for (size_t at = 0; at < r.body().size();) {
    const size_t end = r.body().find('\n', at);
    if (r.body()[at] != '#') ++n;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return n;
}

// The instances serve any model name (one declares "known"); a client that sends 10,000 others
// (and one with a NUL byte) adds no series: unknown names count under model="other".
TEST(GatewayAbuseTest, ClientModelNamesDoNotGrowMetricSeries) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig c = ConfigFor(fakes);
  c.instances[0].models = {"known"};  // b serves every name
  auto gw = StartGateway(c);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  const auto send = [port](pt::HttpClient& client, const std::string& model) {
    const pt::ClientResponse r = client.RoundTrip(JsonRequest(kChat, ChatBody(model, "hi")));
    EXPECT_EQ(r.status(), 200) << model << ": " << r.body();
  };
  {
    pt::HttpClient client(port);
    send(client, "known");
    send(client, "warm-up");
  }
  const size_t before = SeriesCount(port);
  constexpr int kThreads = 4;
  constexpr int kNames = 10'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      pt::HttpClient client(port);
      for (int i = t; i < kNames; i += kThreads) send(client, "client-model-" + std::to_string(i));
    });
  }
  for (auto& th : threads) th.join();
  {
    pt::HttpClient client(port);
    send(client, std::string("nul\\u0000name"));  // a JSON escape: the name holds a NUL
  }
  EXPECT_EQ(SeriesCount(port), before);
  const std::string text = pt::Get(port, "/metrics").body();
  EXPECT_EQ(text.find("client-model-"), std::string::npos);
  EXPECT_EQ(text.find('\0'), std::string::npos);
  EXPECT_NE(text.find("model=\"known\""), std::string::npos);
  EXPECT_EQ(pt::MetricSum(port, "prefix_router_requests_total{instance=\"b\",model=\"other\""), kNames + 2);
}

// metrics.listener: admin takes /metrics off the client listener (the admin one serves it);
// metrics.require_key asks the client listener's scrapers for a client key.
TEST(GatewayAbuseTest, MetricsListenerAndKey) {
  Fakes fakes = StartFakes({"a"});
  {
    GatewayConfig c = ConfigFor(fakes);
    c.admin.enabled = true;
    c.admin.listen = "127.0.0.1:0";
    c.metrics.listener = MetricsListener::kAdmin;
    auto gw = StartGateway(c);
    ASSERT_NE(gw, nullptr);
    EXPECT_EQ(pt::Get(gw->port(), "/metrics").status(), 404);
    EXPECT_EQ(pt::Get(gw->port(), "/health").status(), 200);
    AdminServer admin(gw->config().admin, gw->config().timeouts, *gw, nullptr);
    ASSERT_TRUE(admin.Start().ok());
    const pt::ClientResponse m = pt::Get(admin.port(), "/metrics");
    EXPECT_EQ(m.status(), 200);
    EXPECT_NE(m.body().find("prefix_router_requests_total"), std::string::npos);
    // Two Authorization headers: 400 on both listeners (which credential counts is ambiguous).
    for (const uint16_t port : {gw->port(), admin.port()}) {
      const auto e = SendRaw(port,
                             "GET /health HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer a\r\n"
                             "Authorization: Bearer b\r\n\r\n");
      ASSERT_EQ(e.responses.size(), 1u);
      EXPECT_EQ(e.responses[0].result_int(), 400) << e.responses[0].body();
    }
  }
  {
    GatewayConfig c = ConfigFor(fakes);
    c.clients.enabled = true;
    c.clients.keys.push_back({"scraper", "PR_TEST_METRICS_KEY", ""});
    c.metrics.require_key = true;
    ::setenv("PR_TEST_METRICS_KEY", "key-for-the-scraper", 1);
    auto gw = StartGateway(c);
    ASSERT_NE(gw, nullptr);
    EXPECT_EQ(pt::Get(gw->port(), "/metrics").status(), 401);
    EXPECT_EQ(pt::Get(gw->port(), "/health").status(), 200);
    const pt::ClientResponse m = pt::Fetch(
        gw->port(),
        pt::MakeRequest(http::bhttp::verb::get, "/metrics", "", {{"Authorization", "Bearer key-for-the-scraper"}}));
    EXPECT_EQ(m.status(), 200);
  }
}

}  // namespace
}  // namespace prefix_router::gateway
