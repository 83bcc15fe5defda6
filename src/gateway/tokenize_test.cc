// tokenizer: engine on loopback against fake instances (gateway/prompt_tokens.h,
// gateway/tokenize.cc): which instance is asked, what it is asked, and that a failing or silent
// /tokenize never costs the request more than timeouts.tokenize. The success path against real
// emulators is engine/kv_aware_gateway_test.cc's.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"
#include "testing/fake_upstream.h"
#include "testing/http_client.h"

namespace prefix_router::gateway::testing {
namespace {

GatewayConfig EngineTokenizerConfig(const Fakes& fakes) {
  GatewayConfig config = ConfigFor(fakes);
  config.routing.strategy = Strategy::kKvAware;
  config.routing.tokenizer = TokenizerSource::kEngine;
  return config;
}

std::vector<pt::RecordedRequest> TokenizeRequests(const pt::FakeUpstream& fake) {
  std::vector<pt::RecordedRequest> out;
  for (const pt::RecordedRequest& r : fake.received()) {
    if (r.target == "/tokenize") out.push_back(r);
  }
  return out;
}

// Each request asks one routable instance's /tokenize (in rotation) with the body's messages and
// model only; an answer that is not vLLM's (these fakes answer every path alike) fails, the
// request is routed anyway, the failure is counted per instance and logged once per instance.
TEST(TokenizeTest, AsksInRotationAndRoutesAnywayWhenTheAnswerIsUnusable) {
  LogCapture log(spdlog::level::warn);
  Fakes fakes = StartFakes({"a", "b"});
  auto gw = StartGateway(EngineTokenizerConfig(fakes));
  ASSERT_NE(gw, nullptr);
  for (int n = 0; n < 4; ++n) {
    const auto r = pt::Post(gw->port(), kChat, ChatBody("m", "question " + std::to_string(n)));
    ASSERT_EQ(r.status(), 200) << r.body();
  }
  const auto asked_a = TokenizeRequests(*fakes[0]);
  const auto asked_b = TokenizeRequests(*fakes[1]);
  EXPECT_EQ(asked_a.size(), 2u);
  EXPECT_EQ(asked_b.size(), 2u);
  ASSERT_FALSE(asked_a.empty());
  const pt::RecordedRequest& t = asked_a.front();
  EXPECT_EQ(t.method, "POST");
  EXPECT_EQ(t.Header("content-type"), "application/json");
  EXPECT_TRUE(t.body.starts_with(R"({"model":"m","messages":[{"role":"system","content":")")) << t.body;
  EXPECT_EQ(t.body.find("question"), t.body.rfind("question"));  // one request's messages
  EXPECT_EQ(CounterOrZero(gw->port(), R"(prefix_router_tokenize_requests_total{instance="a",outcome="failed"})"), 2);
  EXPECT_EQ(CounterOrZero(gw->port(), R"(prefix_router_tokenize_requests_total{instance="b",outcome="failed"})"), 2);
  EXPECT_EQ(CounterOrZero(gw->port(), R"(prefix_router_tokenize_requests_total{instance="a",outcome="ok"})"), 0);
  EXPECT_EQ(TotalRequests(fakes), 8);  // the four requests, once each, and their four /tokenize
  EXPECT_EQ(log.Count("tokenize failed"), 2u) << log.text();
}

// An instance that never answers /tokenize delays the request by timeouts.tokenize, not by its
// silence; the request then goes on (here to the same silent instance, whose first-byte timeout
// answers 504).
TEST(TokenizeTest, SilentInstanceCostsAtMostTheTimeout) {
  QuietLogs();
  Fakes fakes = StartFakes({"a"});
  pt::Behavior hang;
  hang.fault = pt::Behavior::Fault::kHang;
  hang.hang_for = std::chrono::milliseconds(8000);
  fakes[0]->SetBehavior(hang);
  GatewayConfig config = EngineTokenizerConfig(fakes);
  config.timeouts.tokenize = 0.2;
  config.timeouts.first_byte = 0.3;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const auto started = std::chrono::steady_clock::now();
  const auto r = pt::Post(gw->port(), kChat, ChatBody("m", "q"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(r.status(), 504) << r.body();
  EXPECT_LT(seconds, 5.0) << "waited for the silent /tokenize";
  EXPECT_EQ(CounterOrZero(gw->port(), R"(prefix_router_tokenize_requests_total{instance="a",outcome="failed"})"), 1);
}

// Nothing asks /tokenize when the tokens are known without it: local tokenizer, a prompt of
// token ids, or a strategy that does not route on tokens.
TEST(TokenizeTest, NotAskedWhenNotNeeded) {
  QuietLogs();
  Fakes fakes = StartFakes({"a"});
  GatewayConfig local = EngineTokenizerConfig(fakes);
  local.routing.tokenizer = TokenizerSource::kLocal;
  GatewayConfig cache_aware = EngineTokenizerConfig(fakes);
  cache_aware.routing.strategy = Strategy::kCacheAware;
  for (const GatewayConfig& config : {local, cache_aware}) {
    auto gw = StartGateway(config);
    ASSERT_NE(gw, nullptr);
    ASSERT_EQ(pt::Post(gw->port(), kChat, ChatBody("m", "q")).status(), 200);
  }
  auto gw = StartGateway(EngineTokenizerConfig(fakes));
  ASSERT_NE(gw, nullptr);
  ASSERT_EQ(pt::Post(gw->port(), "/v1/completions", R"({"model":"m","prompt":[1000,1001,1002]})").status(), 200);
  EXPECT_TRUE(TokenizeRequests(*fakes[0]).empty());
  EXPECT_EQ(fakes[0]->requests(), 3);
}

}  // namespace
}  // namespace prefix_router::gateway::testing
