// Client API keys and per-tenant rate limits on loopback: a real Gateway in front of
// FakeUpstreams, its rate limits driven by a ManualClock.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gateway/gateway_test_util.h"

namespace prefix_router::gateway {
namespace {

using namespace testing;
namespace bhttp = http::bhttp;

constexpr std::string_view kKeyA = "sk-team-a-0123456789";
constexpr std::string_view kKeyB = "sk-team-b-9876543210";
constexpr std::string_view kKeyC = "sk-team-c-5555555555";

// A started gateway whose rate limits run on `clock`.
std::unique_ptr<Gateway> Start(GatewayConfig config, const ManualClock& clock) {
  if (Status s = ValidateConfig(config); !s.ok()) {
    ADD_FAILURE() << "config: " << s.ToString();
    return nullptr;
  }
  auto created = Gateway::Create(std::move(config), clock.AsNow());
  if (!created.ok()) {
    ADD_FAILURE() << "create: " << created.status().ToString();
    return nullptr;
  }
  if (Status s = (*created)->Start(); !s.ok()) {
    ADD_FAILURE() << "start: " << s.ToString();
    return nullptr;
  }
  return std::move(*created);
}

pt::Headers Bearer(std::string_view key) { return {{"Authorization", "Bearer " + std::string(key)}}; }

pt::ClientResponse Chat(uint16_t port, pt::Headers headers, std::string_view cache_key = {},
                        std::string_view user = "hello") {
  return pt::Fetch(port, JsonRequest(kChat, ChatBody("m", user, cache_key), std::move(headers)));
}

// A chat body of about `bytes` bytes (the prompt tokens are estimated as bytes / 4).
std::string ChatOfSize(size_t bytes) {
  std::string b = R"({"model":"m","messages":[{"role":"user","content":")";
  b += std::string(bytes > b.size() + 4 ? bytes - b.size() - 4 : 1, 'x');
  return b + "\"}]}";
}

// Two keys in a keys file: team-a and team-b.
struct KeyedFixture {
  TempFile keys{"keys"};
  Fakes fakes = StartFakes({"u1"});
  GatewayConfig config;
  KeyedFixture() {
    keys.Write("team-a " + std::string(kKeyA) + "\nteam-b " + std::string(kKeyB) + "\n");
    config = ConfigFor(fakes);
    config.clients.enabled = true;
    config.clients.keys_file = keys.path();
  }
};

// No key: 401 invalid_api_key with WWW-Authenticate, and nothing reaches an instance.
TEST(ClientKeysTest, MissingKeyIs401) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  pt::ClientResponse r = Chat(g->port(), {});
  EXPECT_EQ(r.status(), 401);
  EXPECT_EQ(ErrorCode(r.body()), "invalid_api_key");
  EXPECT_NE(r.body().find("authentication_error"), std::string::npos) << r.body();
  EXPECT_EQ(r.Header("www-authenticate"), R"(Bearer realm="prefix-router")");
  EXPECT_FALSE(r.Header("x-request-id").empty());
  EXPECT_EQ(TotalRequests(f.fakes), 0);
  EXPECT_EQ(pt::Metric(g->port(), R"(prefix_router_unauthorized_requests_total{reason="missing_key"})"), 1);
  // Every API route needs it, /v1/models included; a wrong method is refused for want of a key first.
  EXPECT_EQ(pt::Get(g->port(), "/v1/models").status(), 401);
  EXPECT_EQ(pt::Post(g->port(), "/v1/embeddings", R"({"model":"m","input":"x"})").status(), 401);
  EXPECT_EQ(pt::Post(g->port(), "/invocations", "{}").status(), 401);
  EXPECT_EQ(pt::Get(g->port(), "/v1/chat/completions").status(), 401);
}

// A wrong key, another scheme, or two keys: 401, and the answer does not echo what was sent.
TEST(ClientKeysTest, WrongKeyIs401AndNotEchoed) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  const std::string wrong = "sk-team-a-0123456788";
  pt::ClientResponse r = Chat(g->port(), Bearer(wrong));
  EXPECT_EQ(r.status(), 401);
  EXPECT_EQ(ErrorCode(r.body()), "invalid_api_key");
  EXPECT_EQ(r.Header("www-authenticate"), R"(Bearer realm="prefix-router", error="invalid_token")");
  EXPECT_EQ(r.body().find(wrong), std::string::npos);
  EXPECT_EQ(Chat(g->port(), {{"Authorization", "Basic " + std::string(kKeyA)}}).status(), 401);
  EXPECT_EQ(Chat(g->port(), {{"Authorization", "Bearer"}}).status(), 401);
  EXPECT_EQ(Chat(g->port(),
                 {{"Authorization", "Bearer " + std::string(kKeyA)}, {"Authorization", "Bearer " + std::string(kKeyA)}})
                .status(),
            400);  // two Authorization headers: refused by the HTTP layer, before any key check
  EXPECT_EQ(Chat(g->port(), {{"x-api-key", wrong}}).status(), 401);
  EXPECT_EQ(TotalRequests(f.fakes), 0);
  EXPECT_EQ(pt::Metric(g->port(), R"(prefix_router_unauthorized_requests_total{reason="invalid_key"})"), 4);
}

// The right key (Bearer, any case of the scheme, or x-api-key) passes, and the instance sees
// neither header.
TEST(ClientKeysTest, RightKeyPassesAndIsNotForwarded) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 200);
  EXPECT_EQ(Chat(g->port(), {{"authorization", "bearer  " + std::string(kKeyB)}}).status(), 200);
  EXPECT_EQ(Chat(g->port(), {{"x-api-key", std::string(kKeyA)}}).status(), 200);
  EXPECT_EQ(pt::Fetch(g->port(), pt::MakeRequest(bhttp::verb::get, "/v1/models", "", Bearer(kKeyA))).status(), 200);
  const auto received = f.fakes[0]->received();
  ASSERT_EQ(received.size(), 3u);
  for (const auto& req : received) {
    EXPECT_EQ(req.Header("authorization"), "");
    EXPECT_EQ(req.Header("x-api-key"), "");
    for (const auto& [name, value] : req.headers) {
      EXPECT_EQ(value.find("sk-team"), std::string::npos) << name << ": " << value;
    }
  }
}

// /health and /metrics need no key.
TEST(ClientKeysTest, HealthAndMetricsStayOpen) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(pt::Get(g->port(), "/health").status(), 200);
  EXPECT_EQ(pt::Get(g->port(), "/metrics").status(), 200);
}

// The access log names the tenant, never the key.
TEST(ClientKeysTest, AccessLogShowsTheTenantNotTheKey) {
  ManualClock clock;
  KeyedFixture f;
  f.config.log.access_log = true;
  std::ostringstream out;
  auto previous = spdlog::default_logger();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("limits-captured", sink));
  spdlog::set_level(spdlog::level::debug);
  {
    auto g = Start(f.config, clock);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 200);
    EXPECT_EQ(Chat(g->port(), Bearer("sk-wrong-key-000000")).status(), 401);
  }
  spdlog::set_default_logger(previous);
  spdlog::drop("limits-captured");
  QuietLogs();
  const std::string log = out.str();
  EXPECT_NE(log.find("tenant=team-a"), std::string::npos) << log;
  EXPECT_EQ(log.find(kKeyA), std::string::npos) << log;
  EXPECT_EQ(log.find("sk-wrong-key"), std::string::npos) << log;
}

// A reload re-reads the keys: a key added to the file works without a restart, a removed one
// stops working, and the report says so.
TEST(ClientKeysTest, ReloadReadsTheKeysAgain) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyC)).status(), 401);
  f.keys.Write("team-a " + std::string(kKeyA) + "\nteam-c " + std::string(kKeyC) + "\n");
  GatewayConfig next = f.config;
  ASSERT_TRUE(ValidateConfig(next).ok());
  ReloadReport report = g->Reload(next, "test");
  ASSERT_EQ(report.changes.size(), 1u);
  EXPECT_EQ(report.changes[0], "clients: 2 keys for 2 tenants (was 2 keys for 2 tenants)");
  EXPECT_TRUE(report.restart_required.empty());
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyC)).status(), 200);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyB)).status(), 401);
  // Turning keys off by reload opens the routes.
  next.clients = ClientsConfig{};
  ASSERT_TRUE(ValidateConfig(next).ok());
  g->Reload(next, "test");
  EXPECT_EQ(Chat(g->port(), {}).status(), 200);
}

// --------------------------------------------------------------------------------- rate limits

// After the burst, 429 with Retry-After from the bucket and OpenAI's headers; the fake clock
// moving by Retry-After lets the next one through.
TEST(TenantRateLimitTest, TooManyRequestsThen429WithRetryAfter) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  f.config.rate_limits.defaults.requests_per_minute = 3;
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  for (int i = 0; i < 3; ++i) {
    pt::ClientResponse ok = Chat(g->port(), Bearer(kKeyA));
    EXPECT_EQ(ok.status(), 200);
    EXPECT_EQ(ok.Header("x-ratelimit-limit-requests"), "3");
    EXPECT_EQ(ok.Header("x-ratelimit-remaining-requests"), std::to_string(2 - i));
    EXPECT_FALSE(ok.HasHeader("x-ratelimit-limit-tokens")) << "no token limit is set";
  }
  pt::ClientResponse r = Chat(g->port(), Bearer(kKeyA));
  EXPECT_EQ(r.status(), 429);
  EXPECT_EQ(ErrorCode(r.body()), "rate_limit_exceeded");
  EXPECT_NE(r.body().find("requests per minute"), std::string::npos) << r.body();
  EXPECT_NE(r.body().find("team-a"), std::string::npos) << r.body();
  EXPECT_EQ(r.Header("retry-after"), "20");  // one request every 60 / 3 s
  EXPECT_EQ(r.Header("x-ratelimit-remaining-requests"), "0");
  EXPECT_EQ(TotalRequests(f.fakes), 3);
  EXPECT_EQ(pt::Metric(g->port(), R"(prefix_router_rejected_requests_total{model="other",reason="tenant_requests"})"),
            1);
  clock.Advance(std::chrono::seconds(19));
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).Header("retry-after"), "1");
  clock.Advance(std::chrono::seconds(1));
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 200);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 429);
}

// One tenant's empty bucket does not touch another's; a per-tenant override applies to its
// tenant only.
TEST(TenantRateLimitTest, TenantsAreIsolated) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  f.config.rate_limits.defaults.requests_per_minute = 1;
  f.config.rate_limits.tenants["team-b"] = TenantLimits{1, 3, 0, 0};
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 200);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 429);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Chat(g->port(), Bearer(kKeyB)).status(), 200) << i;
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyB)).status(), 429);
  EXPECT_EQ(TotalRequests(f.fakes), 4);
}

// Without keys a tenant is the routing group (prompt_cache_key, or the native header), and
// requests with none share the tenant `anonymous`.
TEST(TenantRateLimitTest, RoutingGroupsAreTenantsWithoutKeys) {
  QuietLogs();
  ManualClock clock;
  Fakes fakes = StartFakes({"u1"});
  GatewayConfig config = ConfigFor(fakes);
  config.rate_limits.defaults.requests_per_minute = 1;
  auto g = Start(config, clock);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Chat(g->port(), {}, "group-1").status(), 200);
  EXPECT_EQ(Chat(g->port(), {}, "group-1").status(), 429);
  EXPECT_EQ(Chat(g->port(), {}, "group-2").status(), 200);
  EXPECT_EQ(Chat(g->port(), {}).status(), 200);
  pt::ClientResponse r = Chat(g->port(), {});
  EXPECT_EQ(r.status(), 429);
  EXPECT_NE(r.body().find("'anonymous'"), std::string::npos) << r.body();
  const std::string native = std::string(200, 'n');
  EXPECT_EQ(pt::Post(g->port(), kInvocations, native, {{std::string(kGroupHeader), "native-1"}}).status(), 200);
  EXPECT_EQ(pt::Post(g->port(), kInvocations, native, {{std::string(kGroupHeader), "native-1"}}).status(), 429);
  EXPECT_EQ(g->rate_limiter().tenant_count(), 4u);
}

// The token limit: long prompts empty the bucket while short ones still fit; a prompt over the
// burst can never pass (413, no Retry-After).
TEST(TenantRateLimitTest, TokenLimitTripsOnLongPrompts) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  f.config.rate_limits.defaults.tokens_per_minute = 1500;
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  auto send = [&](size_t bytes) { return pt::Fetch(g->port(), JsonRequest(kChat, ChatOfSize(bytes), Bearer(kKeyA))); };
  for (int i = 0; i < 5; ++i) EXPECT_EQ(send(100).status(), 200) << "short prompt " << i;  // 5 x 25
  pt::ClientResponse first = send(4000);  // ~1000 tokens: 1375 were left
  EXPECT_EQ(first.status(), 200);
  EXPECT_EQ(first.Header("x-ratelimit-limit-tokens"), "1500");
  EXPECT_EQ(first.Header("x-ratelimit-remaining-tokens"), "375");
  pt::ClientResponse r = send(4000);
  EXPECT_EQ(r.status(), 429);
  EXPECT_NE(r.body().find("prompt tokens per minute"), std::string::npos) << r.body();
  EXPECT_EQ(r.Header("retry-after"), "25");  // 625 tokens short at 25 a second
  EXPECT_EQ(send(100).status(), 200) << "a short prompt still fits";
  pt::ClientResponse huge = send(8000);  // ~2000 tokens > the 1500 burst
  EXPECT_EQ(huge.status(), 413);
  EXPECT_EQ(ErrorCode(huge.body()), "request_too_large");
  EXPECT_FALSE(huge.HasHeader("retry-after"));
  EXPECT_EQ(pt::Metric(g->port(), R"(prefix_router_rejected_requests_total{model="other",reason="tenant_tokens"})"), 1);
  EXPECT_EQ(pt::Metric(g->port(),
                       R"(prefix_router_rejected_requests_total{model="other",reason="tenant_request_too_large"})"),
            1);
  clock.Advance(std::chrono::seconds(27));  // 350 left after the last short one, + 675
  EXPECT_EQ(send(4000).status(), 200);
}

// Limits apply on reload, and the buckets carry over.
TEST(TenantRateLimitTest, ReloadChangesTheLimits) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  f.config.rate_limits.defaults.requests_per_minute = 1;
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 200);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 429);
  GatewayConfig next = f.config;
  next.rate_limits.tenants["team-a"] = TenantLimits{};  // no limit for team-a
  ASSERT_TRUE(ValidateConfig(next).ok());
  ReloadReport report = g->Reload(next, "test");
  ASSERT_EQ(report.changes.size(), 1u);
  EXPECT_TRUE(report.changes[0].starts_with("rate_limits: default 1 requests/min")) << report.changes[0];
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 200);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyB)).status(), 200);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyB)).status(), 429);
}

// An admin change of the fleet neither re-reads the keys nor resets the limits.
TEST(TenantRateLimitTest, FleetChangesKeepKeysAndBuckets) {
  QuietLogs();
  ManualClock clock;
  KeyedFixture f;
  f.config.rate_limits.defaults.requests_per_minute = 1;
  auto g = Start(f.config, clock);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 200);
  f.keys.Write("");  // would fail validation if read again
  Fakes more = StartFakes({"u2"});
  auto added = g->AddInstance(InstanceConfig{"u2", more[0]->url()});
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyA)).status(), 429);
  EXPECT_EQ(Chat(g->port(), Bearer(kKeyB)).status(), 200);
}

}  // namespace
}  // namespace prefix_router::gateway
