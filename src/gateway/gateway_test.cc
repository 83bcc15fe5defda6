// Loopback integration tests of the gateway: a real Gateway on 127.0.0.1:0 in front of
// in-process FakeUpstreams, driven by a synchronous test client. They check what clients and
// operators rely on: each route, prefix-aware routing and pools end to end, streaming order and
// timing, every error and retry path, the accounting of clients that go away, health ejection
// and return, keep-alive, and shutdown.
//
// Waits are bounded polls ("eventually, within 5 s"); the only timing assertions are orderings
// with wide margins (the first streamed piece arrived well before the stream ended).
#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"

#include <gtest/gtest.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/fake_upstream.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

using namespace std::chrono_literals;
namespace pt = prefix_router::testing;
namespace bhttp = http::bhttp;
using Clock = std::chrono::steady_clock;
using pt::Behavior;
using pt::ClientResponse;
using pt::Eventually;
using pt::FakeUpstream;
using pt::Get;
using pt::Headers;
using pt::HttpClient;
using pt::Metric;
using pt::Post;
using pt::StreamedResponse;

using testing::kChat;
constexpr std::string_view kCompletions = "/v1/completions";
using testing::kInstance;
using testing::kInvocations;
constexpr std::string_view kDecision = "x-prefix-router-decision";
constexpr std::string_view kRank = "x-prefix-router-rank";
using testing::kComponentHeader;
using testing::kGroupHeader;

// The gateway logs every start at info level; keep test output to warnings and errors.
const bool kQuietLogs = [] {
  spdlog::set_level(spdlog::level::warn);
  return true;
}();

// ------------------------------------------------------------------------------------ helpers

using testing::ConfigFor;
using testing::Fakes;
using testing::StartFakes;
using testing::StartGateway;
using testing::TotalAborted;
using testing::TotalInProgress;
using testing::TotalRequests;

void SetBehaviorAll(const Fakes& fakes, const Behavior& b) {
  for (const auto& f : fakes) f->SetBehavior(b);
}

RoutingOptions PrefixAware() {
  RoutingOptions o;
  o.strategy = Strategy::kPrefixAware;
  o.prefix_length = kMinPrefixLength;
  return o;
}

int32_t InFlight(const Gateway& g, uint32_t i) { return g.routing()->fleet->state(i).in_flight.load(); }

int32_t TotalInFlight(const Gateway& g) {
  int32_t n = 0;
  for (uint32_t i = 0; i < g.routing()->fleet->size(); ++i) n += InFlight(g, i);
  return n;
}

// A system prompt longer than the prefix length, so that requests sharing it share a key.
const std::string& SystemPrompt() {
  static const std::string prompt = [] {
    std::string s;
    while (s.size() < 1500) s += "You are a careful assistant for the accounting team. ";
    return s;
  }();
  return prompt;
}

std::string ChatBody(std::string_view model, std::string_view user, std::string_view cache_key = {},
                     bool stream = false) {
  std::string b = R"({"model":")" + std::string(model) + R"(","messages":[{"role":"system","content":")" +
                  SystemPrompt() + R"("},{"role":"user","content":")" + std::string(user) + "\"}]";
  if (!cache_key.empty()) b += R"(,"prompt_cache_key":")" + std::string(cache_key) + "\"";
  if (stream) b += R"(,"stream":true)";
  return b + "}";
}

pt::ClientRequest JsonRequest(std::string_view target, std::string body, Headers headers = {}) {
  headers.emplace_back("Content-Type", "application/json");
  return pt::MakeRequest(bhttp::verb::post, target, std::move(body), headers);
}

// The instance that answered a chat request for `body` ("" after a test failure).
std::string ChatInstance(uint16_t port, const std::string& body) {
  const ClientResponse r = Post(port, kChat, body);
  EXPECT_EQ(r.status(), 200) << r.error.message() << " " << r.body();
  return r.Header(kInstance);
}

// The instance that answered a native request ("" after a test failure).
std::string NativeInstance(uint16_t port, const std::string& body, const Headers& headers = {}) {
  const ClientResponse r = Post(port, kInvocations, body, headers);
  EXPECT_EQ(r.status(), 200) << r.error.message() << " " << r.body();
  return r.Header(kInstance);
}

// A prompt_cache_key whose first choice (rank 0) for `model` is `instance`, found by asking.
std::string GroupPreferring(uint16_t port, std::string_view model, std::string_view instance) {
  for (int i = 0; i < 200; ++i) {
    const std::string group = "group-" + std::to_string(i);
    const ClientResponse r = Post(port, kChat, ChatBody(model, "probe", group));
    if (r.status() == 200 && r.Header(kInstance) == instance && r.Header(kRank) == "0") return group;
  }
  ADD_FAILURE() << "no routing group prefers " << instance;
  return "";
}

struct ErrorBody {
  std::string message;
  std::string type;
  std::string code;  // "" for null
};

// Parses an OpenAI-style error body: {"error":{"message":...,"type":...,"code":...}}.
std::optional<ErrorBody> ParseError(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::object error;
  std::string_view message, type, code;
  if (parser.parse(body).get(doc) || doc["error"].get(error) || error["message"].get(message) ||
      error["type"].get(type)) {
    return std::nullopt;
  }
  simdjson::dom::element code_value;
  if (error["code"].get(code_value)) return std::nullopt;  // the field must be present
  if (!code_value.is_null() && code_value.get(code)) return std::nullopt;
  return ErrorBody{std::string(message), std::string(type), std::string(code)};
}

// Checks status, JSON content type and the OpenAI error shape (and the code, when given).
void ExpectApiError(const ClientResponse& r, int status, std::string_view code = {}) {
  EXPECT_FALSE(r.error) << r.error.message();
  EXPECT_EQ(r.status(), status) << r.body();
  EXPECT_EQ(r.Header("content-type"), "application/json");
  const auto e = ParseError(r.body());
  ASSERT_TRUE(e.has_value()) << "not an OpenAI-style error: " << r.body();
  EXPECT_FALSE(e->message.empty());
  EXPECT_FALSE(e->type.empty());
  if (!code.empty()) {
    EXPECT_EQ(e->code, code) << r.body();
  }
}

// The status /health reports for one instance ("up" or "ejected"; "" if absent).
std::string InstanceHealth(uint16_t port, const std::string& name) {
  const ClientResponse r = Get(port, "/health");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view state;
  if (parser.parse(r.body()).get(doc) || doc["instances"][name].get(state)) return "";
  return std::string(state);
}

bool HasHeader(const pt::RecordedRequest& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (http::beast::iequals(k, name)) return true;
  }
  return false;
}

// ------------------------------------------------------------------------------------- routes

// Each routed API reaches the instance with method, path, query and body bytes unchanged, Host
// set to the instance, and none of the client's hop-by-hop headers; the answer names the
// configured instance (not its address) and the decision.
TEST(GatewayTest, ForwardsEachRouteUnchanged) {
  Fakes fakes = StartFakes({"alpha"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  static constexpr char kRawBody[] = "raw \x01 bytes\0 and not JSON {\n";
  struct Case {
    std::string target;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"/v1/chat/completions?trace=1",
       "{ \"model\" : \"m1\",\n  \"messages\":[{\"role\":\"user\",\"content\":\"h\\u00e9llo \xc3\xa9\"}]  }"},
      {"/v1/completions", R"({"model":"m1","prompt":"  spaced   prompt  ","max_tokens":3})"},
      {"/invocations?x=%2F", std::string(kRawBody, sizeof(kRawBody) - 1)},
  };
  const Headers client_headers = {
      {"Connection", "keep-alive, X-Hop-Token"},
      {"Keep-Alive", "timeout=5"},
      {"TE", "trailers"},
      {"Upgrade", "h2c"},
      {"Proxy-Connection", "keep-alive"},
      {"X-Hop-Token", "for-the-gateway-only"},
      {"X-Custom", "kept"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].target);
    const ClientResponse r = Post(gw->port(), cases[k].target, cases[k].body, client_headers);
    ASSERT_EQ(r.status(), 200) << r.error.message() << " " << r.body();
    EXPECT_NE(r.body().find(R"("instance":"alpha")"), std::string::npos) << r.body();
    EXPECT_EQ(r.Header("x-upstream"), "alpha");  // the instance's own headers come through
    EXPECT_EQ(r.Header(kInstance), "alpha");
    EXPECT_EQ(r.Header(kDecision), "random");
    EXPECT_EQ(r.Header(kRank), "0");

    const auto received = fakes[0]->received();
    ASSERT_EQ(received.size(), k + 1);
    const pt::RecordedRequest& up = received.back();
    EXPECT_EQ(up.method, "POST");
    EXPECT_EQ(up.target, cases[k].target);
    EXPECT_EQ(up.body, cases[k].body);
    EXPECT_EQ(up.Header("host"), "127.0.0.1:" + std::to_string(fakes[0]->port()));
    EXPECT_EQ(up.Header("x-custom"), "kept");
    EXPECT_EQ(up.Header("content-type"), "application/json");
    for (std::string_view hop : {"Keep-Alive", "TE", "Upgrade", "Proxy-Connection"}) {
      EXPECT_FALSE(HasHeader(up, hop)) << hop;
    }
    // The client's Connection header is for the gateway alone, and so is every header it names
    // (RFC 9110 section 7.6.1).
    EXPECT_EQ(up.Header("connection").find("X-Hop-Token"), std::string::npos);
    EXPECT_FALSE(HasHeader(up, "X-Hop-Token"));
  }
}

// A request body far larger than the sockets' buffers reaches the instance whole: the gateway
// writes what the upstream socket takes at once and the rest as the instance reads it.
TEST(GatewayTest, LargeRequestBodyReachesTheInstanceWhole) {
  Fakes fakes = StartFakes({"alpha"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  std::string body((size_t{12} << 20) + 5, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + (i * 7 + i / 4093) % 26);
  const ClientResponse r = Post(gw->port(), "/invocations", body);
  ASSERT_EQ(r.status(), 200) << r.error.message() << " " << r.body();
  const auto received = fakes[0]->received();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].body.size(), body.size());
  EXPECT_TRUE(received[0].body == body) << "the instance received other bytes than were sent";
}

// With decision_headers off, responses carry no x-prefix-router-* headers.
TEST(GatewayTest, DecisionHeadersCanBeTurnedOff) {
  Fakes fakes = StartFakes({"alpha"});
  GatewayConfig config = ConfigFor(fakes);
  config.decision_headers = false;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const ClientResponse r = Post(gw->port(), kChat, ChatBody("m1", "hi"));
  ASSERT_EQ(r.status(), 200) << r.body();
  EXPECT_FALSE(r.HasHeader(kInstance));
  EXPECT_FALSE(r.HasHeader(kDecision));
  EXPECT_FALSE(r.HasHeader(kRank));
}

// GET /v1/models lists the union of the names the instances declare, once each.
TEST(GatewayTest, ModelsListsServedNames) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.instances[0].models = {"m1"};
  config.instances[1].models = {"m2", "m1"};
  auto gw = StartGateway(config);  // c serves every name and declares none
  ASSERT_NE(gw, nullptr);
  const ClientResponse r = Get(gw->port(), "/v1/models");
  ASSERT_EQ(r.status(), 200);
  EXPECT_EQ(r.Header("content-type"), "application/json");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_FALSE(parser.parse(r.body()).get(doc)) << r.body();
  std::string_view object;
  ASSERT_FALSE(doc["object"].get(object));
  EXPECT_EQ(object, "list");
  std::vector<std::string> ids;
  simdjson::dom::array data;
  ASSERT_FALSE(doc["data"].get(data)) << r.body();
  for (simdjson::dom::element m : data) {
    std::string_view id;
    ASSERT_FALSE(m["id"].get(id));
    ids.emplace_back(id);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"m1", "m2"}));
}

// GET /health reports every model and instance; ?model=M answers 200 while M has an available
// instance, 503 when none is, 404 when no instance serves M.
TEST(GatewayTest, HealthReportsPerModel) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.instances[0].models = {"m1"};
  config.instances[1].models = {"m2"};
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);

  ClientResponse all = Get(gw->port(), "/health");
  EXPECT_EQ(all.status(), 200);
  EXPECT_EQ(all.Header("content-type"), "application/json");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_FALSE(parser.parse(all.body()).get(doc)) << all.body();
  std::string_view status;
  int64_t m2_available = -1;
  ASSERT_FALSE(doc["status"].get(status));
  EXPECT_EQ(status, "ok");
  ASSERT_FALSE(doc["models"]["m2"]["available"].get(m2_available)) << all.body();
  EXPECT_EQ(m2_available, 1);
  EXPECT_EQ(InstanceHealth(gw->port(), "b"), "up");

  // b leaves rotation (as the health checker would eject it; checks are off here).
  gw->routing()->fleet->state(1).available.store(false);
  all = Get(gw->port(), "/health");
  EXPECT_EQ(all.status(), 200) << all.body();  // m1 is still served
  ASSERT_FALSE(parser.parse(all.body()).get(doc)) << all.body();
  ASSERT_FALSE(doc["models"]["m2"]["available"].get(m2_available)) << all.body();
  EXPECT_EQ(m2_available, 0);
  EXPECT_EQ(InstanceHealth(gw->port(), "b"), "ejected");
  EXPECT_EQ(InstanceHealth(gw->port(), "a"), "up");

  EXPECT_EQ(Get(gw->port(), "/health?model=m1").status(), 200);
  const ClientResponse m2 = Get(gw->port(), "/health?model=m2");
  EXPECT_EQ(m2.status(), 503);
  EXPECT_NE(m2.body().find(R"("status":"unavailable")"), std::string::npos) << m2.body();
  ExpectApiError(Get(gw->port(), "/health?model=nope"), 404, "model_not_found");
}

// GET /metrics is Prometheus text with request counts by instance, model and decision, the live
// in-flight and up gauges, error counters and latency histograms.
TEST(GatewayTest, MetricsExposition) {
  Fakes fakes = StartFakes({"alpha"});
  GatewayConfig config = ConfigFor(fakes);
  config.instances[0].models = {"m1"};  // a declared name labels its series (others: "other")
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  ASSERT_EQ(Post(gw->port(), kChat, ChatBody("m1", "hi")).status(), 200);

  const ClientResponse r = Get(gw->port(), "/metrics");
  ASSERT_EQ(r.status(), 200);
  EXPECT_TRUE(r.Header("content-type").starts_with("text/plain; version=0.0.4")) << r.Header("content-type");
  const uint16_t port = gw->port();
  EXPECT_EQ(Metric(port, R"(prefix_router_requests_total{instance="alpha",model="m1",decision="random"})"), 1);
  EXPECT_EQ(Metric(port, R"(prefix_router_in_flight_requests{instance="alpha"})"), 0);
  EXPECT_EQ(Metric(port, R"(prefix_router_instance_up{instance="alpha"})"), 1);
  EXPECT_EQ(Metric(port, R"(prefix_router_responses_total{code="200",origin="upstream"})"), 1);
  EXPECT_EQ(Metric(port, R"(prefix_router_request_duration_seconds_count{instance="alpha"})"), 1);
  EXPECT_EQ(Metric(port, R"(prefix_router_request_duration_seconds_bucket{instance="alpha",le="+Inf"})"), 1);
  EXPECT_EQ(Metric(port, R"(prefix_router_upstream_first_byte_seconds_count{instance="alpha",stream="false"})"), 1);
  EXPECT_EQ(Metric(port, "prefix_router_routing_decision_seconds_count"), 1);
  for (std::string_view family :
       {"# TYPE prefix_router_upstream_errors_total counter", "# TYPE prefix_router_retries_total counter",
        "# TYPE prefix_router_client_disconnects_total counter", "# TYPE prefix_router_in_flight_requests gauge",
        "# TYPE prefix_router_request_duration_seconds histogram"}) {
    EXPECT_NE(r.body().find(family), std::string::npos) << family;
  }
}

// Unknown paths get 404 and known paths with the wrong method 405, both as OpenAI-style JSON.
TEST(GatewayTest, UnknownPathIs404WrongMethodIs405) {
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  ExpectApiError(Get(gw->port(), "/v2/nothing"), 404);
  ExpectApiError(Post(gw->port(), "/v1/audio/speech", "{}"), 404);
  ExpectApiError(Get(gw->port(), "/v1/chat/completions"), 405);
  ExpectApiError(Post(gw->port(), "/metrics", "{}"), 405);
  EXPECT_EQ(fakes[0]->requests(), 0);
}

// ----------------------------------------------------------------------------- prefix routing

// Requests sharing a system prompt longer than the prefix length all land on one instance.
TEST(GatewayTest, SharedPrefixLandsOnOneInstance) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PrefixAware();
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  std::set<std::string> instances;
  for (int i = 0; i < 20; ++i) {
    const ClientResponse r = Post(gw->port(), kChat, ChatBody("m1", "question number " + std::to_string(i)));
    ASSERT_EQ(r.status(), 200) << r.body();
    EXPECT_EQ(r.Header(kDecision), "affinity");
    EXPECT_EQ(r.Header(kRank), "0");
    instances.insert(r.Header(kInstance));
  }
  EXPECT_EQ(instances.size(), 1u);
  EXPECT_EQ(TotalRequests(fakes), 20);
}

// Distinct routing groups (prompt_cache_key, or the native Prefix-Aware-Id header) spread one
// shared prompt over the fleet, each group staying on its instance.
TEST(GatewayTest, RoutingGroupsSpreadAcrossInstances) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PrefixAware();
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const std::string native_body = "{\"inputs\":\"" + SystemPrompt() + "\"}";
  std::set<std::string> openai_used, native_used;
  // A new key may be placed by load (prefix-aware places part of new keys on the least loaded
  // instance as reuse falls); the gateway ends a request's bookkeeping just after the client has
  // its answer, so each new key waits for the previous request to end: all idle, load ties and
  // the key goes home.
  auto idle = [&] { ASSERT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; })); };
  for (int i = 0; i < 30; ++i) {
    const std::string group = "tenant-" + std::to_string(i);
    idle();
    const std::string first = ChatInstance(gw->port(), ChatBody("m1", "hi", group));
    EXPECT_EQ(ChatInstance(gw->port(), ChatBody("m1", "another question", group)), first) << group;
    openai_used.insert(first);
    const Headers h = {{std::string(kGroupHeader), group}};
    idle();
    const std::string native = NativeInstance(gw->port(), native_body, h);
    EXPECT_EQ(NativeInstance(gw->port(), native_body, h), native) << group;
    native_used.insert(native);
  }
  EXPECT_EQ(openai_used, (std::set<std::string>{"a", "b", "c"}));
  EXPECT_EQ(native_used, (std::set<std::string>{"a", "b", "c"}));
}

// JSON formatting does not change an OpenAI request's key (it is taken from the message text)
// but does change a native one (taken from the raw body bytes).
TEST(GatewayTest, JsonFormattingMattersOnlyOnTheNativeRoute) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PrefixAware();
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  std::set<std::string> openai_used, native_used;
  for (int spaces = 0; spaces < 12; ++spaces) {
    // The whitespace sits in the first bytes, well inside the 1024-unit prefix.
    const std::string pad(spaces, ' ');
    const std::string body = "{" + pad + R"("model":)" + pad + R"("m1",)" + pad +
                             R"("messages":[{"role":"system","content":")" + SystemPrompt() + "\"}]}";
    openai_used.insert(ChatInstance(gw->port(), body));
    native_used.insert(NativeInstance(gw->port(), body));
  }
  EXPECT_EQ(openai_used.size(), 1u);
  EXPECT_GE(native_used.size(), 2u);
}

// ---------------------------------------------------------------------------------------- pools

// A request for model M reaches only instances that serve M, on either API; a model nobody
// serves is a 404 model_not_found.
TEST(GatewayTest, PoolsSendModelsOnlyToTheirInstances) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.instances[0].models = {"m1"};
  config.instances[1].models = {"m1"};
  config.instances[2].models = {"m2"};
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  for (int i = 0; i < 10; ++i) {
    EXPECT_NE(ChatInstance(port, ChatBody("m1", "q" + std::to_string(i))), "c");
    EXPECT_EQ(ChatInstance(port, ChatBody("m2", "q" + std::to_string(i))), "c");
    const ClientResponse completion = Post(port, kCompletions, R"({"model":"m2","prompt":"p"})");
    EXPECT_EQ(completion.Header(kInstance), "c");
    EXPECT_EQ(NativeInstance(port, "{}", {{std::string(kComponentHeader), "m2"}}), "c");
    EXPECT_NE(NativeInstance(port, "{}", {{std::string(kComponentHeader), "m1"}}), "c");
  }
  const int before = TotalRequests(fakes);
  ExpectApiError(Post(port, kChat, ChatBody("m3", "q")), 404, "model_not_found");
  ExpectApiError(Post(port, kInvocations, "{}", {{std::string(kComponentHeader), "m3"}}), 404, "model_not_found");
  EXPECT_EQ(TotalRequests(fakes), before);
}

// Each pool routes with its own options: prefix-aware for m1, the default (random) for m3.
TEST(GatewayTest, PoolRoutingOptionsApplyPerModel) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.pools["m1"] = PrefixAware();
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  std::set<std::string> m1_used, m3_used;
  for (int i = 0; i < 24; ++i) {
    const ClientResponse m1 = Post(gw->port(), kChat, ChatBody("m1", "q" + std::to_string(i)));
    EXPECT_EQ(m1.Header(kDecision), "affinity");
    m1_used.insert(m1.Header(kInstance));
    const ClientResponse m3 = Post(gw->port(), kChat, ChatBody("m3", "q" + std::to_string(i)));
    EXPECT_EQ(m3.Header(kDecision), "random");
    m3_used.insert(m3.Header(kInstance));
  }
  EXPECT_EQ(m1_used.size(), 1u);
  EXPECT_EQ(m3_used.size(), 2u);  // all 24 on one of two instances: chance 2^-23
}

// A retry routes by the request's own model even when the same I/O thread has parsed other
// requests (for other models) while the first attempt was waiting.
TEST(GatewayTest, RetryKeepsItsModelWhileOtherRequestsAreParsed) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.io_threads = 1;  // one thread, so one request parser for every request
  config.instances[0].models = {"m1"};
  config.instances[1].models = {"m1"};
  config.instances[2].models = {"m2"};
  config.pools["m1"] = PrefixAware();
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  const std::string group = GroupPreferring(port, "m1", "a");
  Behavior slow_503;
  slow_503.status = 503;
  slow_503.head_delay = 500ms;
  fakes[0]->SetBehavior(slow_503);
  const int c_before = fakes[2]->requests();

  ClientResponse first;
  std::thread client([&] { first = Post(port, kChat, ChatBody("m1", "first", group)); });
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 1; }));
  // Meanwhile a larger request for another model is parsed on the same thread.
  const ClientResponse second = Post(port, kChat, ChatBody("m2", std::string(20000, 'x')));
  client.join();
  EXPECT_EQ(second.status(), 200);
  EXPECT_EQ(second.Header(kInstance), "c");
  EXPECT_EQ(first.status(), 200) << first.body();
  EXPECT_EQ(first.Header(kInstance), "b");
  EXPECT_EQ(fakes[2]->requests(), c_before + 1);
}

// load_measure: prompt-tokens. With a 32k-token prompt in flight on one instance, three short
// requests all go to the other (by request count the third would go back to the first), and the
// outstanding tokens are counted while the requests last and given back when they end.
TEST(GatewayTest, PromptTokenLoadMeasureWeighsLongPrefills) {
  Fakes fakes = StartFakes({"a", "b"});
  Behavior slow;
  slow.head_delay = 4000ms;  // keeps every request in flight while the next ones are routed
  for (auto& f : fakes) f->SetBehavior(slow);
  GatewayConfig config = ConfigFor(fakes);
  config.routing.strategy = Strategy::kLeastOutstanding;
  config.routing.load_measure = LoadMeasure::kPromptTokens;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  const auto fleet = gw->routing()->fleet;

  std::vector<ClientResponse> responses(4);
  std::vector<std::thread> clients;
  clients.emplace_back([&] { responses[0] = Post(port, kChat, ChatBody("m", std::string(128'000, 'x'))); });
  ASSERT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 1; }));
  const uint32_t long_on = fleet->state(0).in_flight.load() == 1 ? 0 : 1;
  EXPECT_GE(fleet->state(long_on).outstanding_tokens.load(), 32'000);
  for (int n = 1; n <= 3; ++n) {
    clients.emplace_back([&, n] { responses[n] = Post(port, kChat, ChatBody("m", "short " + std::to_string(n))); });
    ASSERT_TRUE(Eventually([&] { return TotalInFlight(*gw) == n + 1; }));
  }
  EXPECT_EQ(fleet->state(long_on).in_flight.load(), 1);
  EXPECT_EQ(fleet->state(1 - long_on).in_flight.load(), 3);
  for (auto& c : clients) c.join();
  for (const auto& r : responses) EXPECT_EQ(r.status(), 200) << r.body();
  for (int n = 1; n <= 3; ++n) EXPECT_EQ(responses[n].Header(kInstance), fakes[1 - long_on]->name());
  // Given back once each exchange has ended, which may be just after its client read the body.
  EXPECT_TRUE(Eventually([&] {
    return fleet->state(0).outstanding_tokens.load() == 0 && fleet->state(1).outstanding_tokens.load() == 0;
  })) << fleet->state(0).outstanding_tokens.load()
      << " " << fleet->state(1).outstanding_tokens.load();
}

// dynamo-kv in the gateway: a request's prefill tokens leave its instance's load at the first
// byte of its stream (Policy::OnFirstToken), its blocks only when it completes. Every response
// streams its first event after 1 s. Prompts: a shared system prompt and 1,000 or 1,500 words of
// the same length, so that R1 < R0 < 2 x R1 in tokens and in blocks. R0 (1.5 units) is past its
// first token on Y when R1 (1 unit) arrives and goes to X; a probe during R1's prefill goes to Y
// (X counts R1's tokens and blocks, 2 units; Y R0's blocks, 1.5), a probe after R1's first byte
// to X (1 unit).
TEST(GatewayTest, DynamoKvReleasesPrefillAtTheFirstByte) {
  Fakes fakes = StartFakes({"a", "b"});
  for (auto& f : fakes) f->SetBehavior(testing::SseStream(4, 1000ms));
  GatewayConfig config = ConfigFor(fakes);
  config.routing.strategy = Strategy::kDynamoKv;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  const auto fleet = gw->routing()->fleet;
  auto words = [](int n, int from) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "w" + std::to_string(from + i) + " ";
    return s;
  };
  // EXPECT only from here on: an early return would destroy the clients' threads unjoined.
  std::vector<ClientResponse> responses(4);
  std::vector<std::thread> clients;
  const auto start = Clock::now();
  clients.emplace_back([&] { responses[0] = Post(port, kChat, ChatBody("m", words(1500, 10000), {}, true)); });
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 1; }));
  const uint32_t y = fleet->state(0).in_flight.load() == 1 ? 0 : 1;
  const uint32_t x = 1 - y;
  std::this_thread::sleep_until(start + 1300ms);  // R0's first event came at 1 s
  clients.emplace_back([&] { responses[1] = Post(port, kChat, ChatBody("m", words(1000, 20000), {}, true)); });
  EXPECT_TRUE(Eventually([&] { return fleet->state(x).in_flight.load() == 1; }));
  clients.emplace_back([&] { responses[2] = Post(port, kChat, ChatBody("m", "probe one")); });
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 3; }));
  EXPECT_EQ(fleet->state(y).in_flight.load(), 2) << "during R1's prefill the probe goes to Y";
  std::this_thread::sleep_until(start + 2800ms);  // R1's first event came at about 2.3 s
  clients.emplace_back([&] { responses[3] = Post(port, kChat, ChatBody("m", "probe two")); });
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 4; }));
  EXPECT_EQ(fleet->state(x).in_flight.load(), 2) << "after R1's first byte the probe goes to X";
  for (auto& c : clients) c.join();
  for (const auto& r : responses) EXPECT_EQ(r.status(), 200) << r.body();
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; }));
}

// cache-aware end to end: the block chain is built from the keyed text, so requests that share
// a long document (whatever follows it, and at any length) go where it was sent, on both APIs;
// a different tenant (routing group) is placed on its own.
TEST(GatewayTest, CacheAwareFollowsTheSentBlocks) {
  Fakes fakes = StartFakes({"a", "b", "c", "d"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing.strategy = Strategy::kCacheAware;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  std::string doc;
  while (doc.size() < 20'000) doc += "Clause " + std::to_string(doc.size()) + " of the agreement applies. ";
  const ClientResponse first = Post(port, kChat, ChatBody("m", doc + " Question 0?"));
  ASSERT_EQ(first.status(), 200) << first.body();
  const std::string home = first.Header(kInstance);
  for (int q = 1; q <= 6; ++q) {
    const ClientResponse r = Post(port, kChat, ChatBody("m", doc + " Question " + std::to_string(q) + "?"));
    EXPECT_EQ(r.Header(kInstance), home) << q;
    EXPECT_EQ(r.Header("x-prefix-router-decision"), "affinity") << q;
  }
  // Native API: the body bytes are the text.
  const std::string native = R"({"inputs":")" + doc + R"(","n":)";
  const ClientResponse n0 = Post(port, "/invocations", native + "0}");
  ASSERT_EQ(n0.status(), 200) << n0.body();
  for (int q = 1; q <= 3; ++q) {
    EXPECT_EQ(Post(port, "/invocations", native + std::to_string(q) + "}").Header(kInstance), n0.Header(kInstance));
  }
  // Another tenant with the same document matches nothing: its decision says so.
  const ClientResponse other = Post(port, kChat, ChatBody("m", doc + " Question 0?", "tenant-2"));
  EXPECT_EQ(other.Header("x-prefix-router-decision"), "least-outstanding");
}

// ------------------------------------------------------------------------------------ streaming

Behavior Streaming(bool sse, int chunks, std::chrono::milliseconds delay) {
  Behavior b;
  b.sse = sse;
  b.chunk_delay = delay;
  for (int i = 0; i < chunks; ++i) {
    b.chunks.push_back(sse ? "data: {\"n\":" + std::to_string(i) + "}\n\n" : "piece-" + std::to_string(i) + ";");
  }
  return b;
}

std::string Concat(const std::vector<std::string>& pieces) {
  std::string s;
  for (const auto& p : pieces) s += p;
  return s;
}

// Checks that a stream of 5 pieces 250 ms apart arrived whole, in order, and incrementally.
void ExpectStreamedIncrementally(const StreamedResponse& r, const Behavior& b) {
  EXPECT_TRUE(r.complete) << r.error.message();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, Concat(b.chunks));
  ASSERT_GE(r.pieces.size(), 2u);
  EXPECT_TRUE(r.pieces.front().bytes.starts_with(b.chunks.front()));
  // The instance needs at least 1.25 s for the whole stream.
  EXPECT_GE(r.done_at - r.sent_at, 1200ms);
  // The first piece was forwarded while most of the stream was still to come (~1 s of it); a
  // gateway that buffered the response would deliver everything at the end.
  EXPECT_GE(r.done_at - r.pieces.front().at, 500ms);
}

// An SSE response reaches the client piece by piece as the instance produces it, byte-exact.
TEST(GatewayTest, StreamsSseAsItArrives) {
  Fakes fakes = StartFakes({"a"});
  const Behavior b = Streaming(/*sse=*/true, 5, 250ms);
  fakes[0]->SetBehavior(b);
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  HttpClient client(gw->port());
  ASSERT_FALSE(client.Send(JsonRequest(kChat, ChatBody("m1", "hi", {}, /*stream=*/true))));
  const StreamedResponse r = client.ReadStreamed();
  EXPECT_EQ(r.Header("content-type"), "text/event-stream");
  ExpectStreamedIncrementally(r, b);
}

// A chunked non-SSE response is relayed the same way.
TEST(GatewayTest, StreamsChunkedBodyAsItArrives) {
  Fakes fakes = StartFakes({"a"});
  const Behavior b = Streaming(/*sse=*/false, 5, 250ms);
  fakes[0]->SetBehavior(b);
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  HttpClient client(gw->port());
  ASSERT_FALSE(client.Send(JsonRequest(kInvocations, "{}")));
  const StreamedResponse r = client.ReadStreamed();
  EXPECT_EQ(r.Header("content-type"), "application/octet-stream");
  EXPECT_EQ(r.Header("transfer-encoding"), "chunked");
  ExpectStreamedIncrementally(r, b);
}

// --------------------------------------------------------------------------------------- errors

// A body that is not valid JSON on an OpenAI route is a 400 and goes nowhere.
TEST(GatewayTest, MalformedJsonIs400) {
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  ExpectApiError(Post(gw->port(), kChat, R"({"model":"m1","messages":[)"), 400);
  ExpectApiError(Post(gw->port(), kCompletions, R"({"model":"m1","prompt":)"), 400);
  ExpectApiError(Post(gw->port(), kChat, R"({"messages":[]})"), 400);  // no model
  EXPECT_EQ(fakes[0]->requests(), 0);
}

// A routing-group header of 65 characters or with a control character is a 400.
TEST(GatewayTest, InvalidRoutingHeaderIs400) {
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  const std::string h(kGroupHeader);
  ExpectApiError(Post(gw->port(), kInvocations, "{}", {{h, std::string(65, 'g')}}), 400);
  ExpectApiError(Post(gw->port(), kInvocations, "{}", {{h, "tab\tinside"}}), 400);
  ExpectApiError(Post(gw->port(), kInvocations, "{}", {{h, "ctl\x01inside"}}), 400);
  EXPECT_EQ(fakes[0]->requests(), 0);
  // 64 characters are fine.
  EXPECT_EQ(Post(gw->port(), kInvocations, "{}", {{h, std::string(64, 'g')}}).status(), 200);
}

// A body over max_request_body_bytes is a 413 and goes nowhere.
TEST(GatewayTest, OversizedBodyIs413) {
  Fakes fakes = StartFakes({"a"});
  GatewayConfig config = ConfigFor(fakes);
  config.max_request_body_bytes = 2048;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  ExpectApiError(Post(gw->port(), kInvocations, std::string(4096, 'x')), 413);
  EXPECT_EQ(fakes[0]->requests(), 0);
  EXPECT_EQ(Post(gw->port(), kInvocations, std::string(2048, 'x')).status(), 200);
}

// When every instance is ejected, requests get 503 no_instance_available.
TEST(GatewayTest, AllInstancesEjectedIs503) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.health.interval = 0.1;
  config.health.timeout = 0.5;
  config.health.unhealthy_threshold = 2;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  for (auto& f : fakes) f->Stop();
  ASSERT_TRUE(Eventually([&] { return Get(gw->port(), "/health").status() == 503; }));
  ExpectApiError(Post(gw->port(), kChat, ChatBody("m1", "hi")), 503, "no_instance_available");
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_instance_up{instance="a"})"), 0);
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_instance_up{instance="b"})"), 0);
}

// When every attempt fails before a response (each instance closes the connection), the client
// gets 502 upstream_failed, after one attempt per instance.
TEST(GatewayTest, RetriesExhaustedIs502) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  Behavior closes;
  closes.fault = Behavior::Fault::kCloseBeforeResponse;
  SetBehaviorAll(fakes, closes);
  auto gw = StartGateway(ConfigFor(fakes));  // max_retries 2: three attempts
  ASSERT_NE(gw, nullptr);
  ExpectApiError(Post(gw->port(), kChat, ChatBody("m1", "hi")), 502, "upstream_failed");
  for (const auto& f : fakes) EXPECT_EQ(f->requests(), 1) << f->name();
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_retries_total{model="other",reason="reset"})"), 2);
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_responses_total{code="502",origin="gateway"})"), 1);
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; })) << TotalInFlight(*gw);
}

// An instance that sends no response head within timeouts.first_byte gives 504, and the request
// is not repeated elsewhere (the instance may still be working on it).
TEST(GatewayTest, FirstByteTimeoutIs504WithoutRetry) {
  Fakes fakes = StartFakes({"a", "b"});
  Behavior hang;
  hang.fault = Behavior::Fault::kHang;
  hang.hang_for = 5000ms;
  SetBehaviorAll(fakes, hang);
  GatewayConfig config = ConfigFor(fakes);
  config.timeouts.first_byte = 0.3;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  ExpectApiError(Post(gw->port(), kChat, ChatBody("m1", "hi")), 504, "upstream_failed");
  EXPECT_EQ(TotalRequests(fakes), 1);
  const std::string a_timeouts = R"(prefix_router_upstream_errors_total{instance="a",kind="timeout"})";
  const std::string b_timeouts = R"(prefix_router_upstream_errors_total{instance="b",kind="timeout"})";
  EXPECT_EQ(std::max(Metric(gw->port(), a_timeouts), 0.0) + std::max(Metric(gw->port(), b_timeouts), 0.0), 1);
  // Giving up closed the upstream connection, which the instance sees as an abort.
  EXPECT_TRUE(Eventually([&] { return TotalAborted(fakes) == 1 && TotalInProgress(fakes) == 0; }, 4000ms));
}

// An upstream 503 moves the request to the next instance; the client sees only the 200.
TEST(GatewayTest, Upstream503IsRetriedOnTheNextInstance) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PrefixAware();
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const std::string group = GroupPreferring(gw->port(), "m1", "a");
  Behavior unavailable;
  unavailable.status = 503;
  fakes[0]->SetBehavior(unavailable);
  const int a_before = fakes[0]->requests(), b_before = fakes[1]->requests();

  const ClientResponse r = Post(gw->port(), kChat, ChatBody("m1", "hi", group));
  EXPECT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(r.Header(kInstance), "b");
  EXPECT_EQ(r.Header(kRank), "1");
  EXPECT_EQ(fakes[0]->requests(), a_before + 1);
  EXPECT_EQ(fakes[1]->requests(), b_before + 1);
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_retries_total{model="other",reason="status_503"})"), 1);
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_upstream_errors_total{instance="a",kind="status_503"})"), 1);
}

// A refused connection (an instance down but still configured) moves the request on.
TEST(GatewayTest, ConnectRefusedIsRetriedOnAnotherInstance) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PrefixAware();
  auto gw = StartGateway(config);  // no health checks: a stays in rotation
  ASSERT_NE(gw, nullptr);
  const std::string group = GroupPreferring(gw->port(), "m1", "a");
  fakes[0]->Stop();
  for (int i = 0; i < 3; ++i) {
    const ClientResponse r = Post(gw->port(), kChat, ChatBody("m1", "hi", group));
    EXPECT_EQ(r.status(), 200) << r.body();
    EXPECT_EQ(r.Header(kInstance), "b");
  }
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_upstream_errors_total{instance="a",kind="connect"})"), 3);
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_retries_total{model="other",reason="connect"})"), 3);
}

// max_retries bounds the attempts: 1 + max_retries instances are tried, no more.
TEST(GatewayTest, MaxRetriesBoundsAttempts) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  Behavior closes;
  closes.fault = Behavior::Fault::kCloseBeforeResponse;
  SetBehaviorAll(fakes, closes);
  for (uint32_t max_retries : {0u, 1u}) {
    SCOPED_TRACE(max_retries);
    GatewayConfig config = ConfigFor(fakes);
    config.max_retries = max_retries;
    auto gw = StartGateway(config);
    ASSERT_NE(gw, nullptr);
    const int before = TotalRequests(fakes);
    ExpectApiError(Post(gw->port(), kChat, ChatBody("m1", "hi")), 502, "upstream_failed");
    EXPECT_EQ(TotalRequests(fakes) - before, static_cast<int>(max_retries) + 1);
  }
}

// A stream that breaks after bytes reached the client is not retried: an SSE client gets the
// pieces so far, then an error event, then the end of the stream.
TEST(GatewayTest, BrokenSseStreamEndsWithErrorEventWithoutRetry) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  Behavior b = Streaming(/*sse=*/true, 4, 20ms);
  b.fault = Behavior::Fault::kCloseMidStream;
  b.fault_after_chunks = 2;
  SetBehaviorAll(fakes, b);
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  HttpClient client(gw->port());
  ASSERT_FALSE(client.Send(JsonRequest(kChat, ChatBody("m1", "hi", {}, /*stream=*/true))));
  const StreamedResponse r = client.ReadStreamed();
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.complete) << r.error.message();  // the stream ends properly, with its last chunk
  const std::string sent = b.chunks[0] + b.chunks[1];
  ASSERT_TRUE(r.body.starts_with(sent)) << r.body;
  const std::string tail = r.body.substr(sent.size());
  EXPECT_TRUE(tail.starts_with("data: {\"error\":")) << tail;
  EXPECT_TRUE(tail.ends_with("\n\n")) << tail;
  EXPECT_EQ(TotalRequests(fakes), 1);
  EXPECT_EQ(pt::MetricSum(gw->port(), R"(prefix_router_retries_total{model="other",)"), 0);
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; })) << TotalInFlight(*gw);
}

// A chunked non-SSE stream that breaks is passed on truncated (no last chunk, connection
// closed), so the client can tell; it is not retried either.
TEST(GatewayTest, BrokenChunkedStreamIsTruncatedWithoutRetry) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  Behavior b = Streaming(/*sse=*/false, 4, 20ms);
  b.fault = Behavior::Fault::kCloseMidStream;
  b.fault_after_chunks = 2;
  SetBehaviorAll(fakes, b);
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  HttpClient client(gw->port());
  ASSERT_FALSE(client.Send(JsonRequest(kInvocations, "{}")));
  const StreamedResponse r = client.ReadStreamed();
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete);
  EXPECT_TRUE(r.error) << "the connection should have ended the body";
  EXPECT_EQ(r.body, b.chunks[0] + b.chunks[1]);
  EXPECT_EQ(TotalRequests(fakes), 1);
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; })) << TotalInFlight(*gw);
}

// ---------------------------------------------------------------------------------- disconnects

// A client that leaves while its instance has not answered yet aborts the upstream request and
// releases its in-flight count.
TEST(GatewayTest, ClientGoneWhileWaitingAbortsUpstream) {
  Fakes fakes = StartFakes({"a", "b"});
  Behavior slow;
  slow.head_delay = 8000ms;
  SetBehaviorAll(fakes, slow);
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  HttpClient client(gw->port());
  ASSERT_FALSE(client.Send(JsonRequest(kChat, ChatBody("m1", "hi"))));
  ASSERT_TRUE(Eventually([&] { return TotalInProgress(fakes) == 1; }));
  EXPECT_EQ(TotalInFlight(*gw), 1);
  client.Close();
  // All well before the instance would have answered (8 s).
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; }));
  EXPECT_TRUE(Eventually([&] { return TotalAborted(fakes) == 1 && TotalInProgress(fakes) == 0; }));
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_client_disconnects_total{stage="waiting"})"), 1);
  EXPECT_EQ(TotalRequests(fakes), 1);
}

// A client that leaves mid-stream aborts the upstream stream and releases its in-flight count.
TEST(GatewayTest, ClientGoneMidStreamAbortsUpstream) {
  Fakes fakes = StartFakes({"a", "b"});
  SetBehaviorAll(fakes, Streaming(/*sse=*/true, 40, 200ms));  // 8 s in all
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  HttpClient client(gw->port());
  ASSERT_FALSE(client.Send(JsonRequest(kChat, ChatBody("m1", "hi", {}, /*stream=*/true))));
  const StreamedResponse r = client.ReadStreamed([](const StreamedResponse&) { return false; });
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.pieces.empty());
  EXPECT_EQ(TotalInFlight(*gw), 1);
  client.Close();
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; }));
  EXPECT_TRUE(Eventually([&] { return TotalAborted(fakes) == 1 && TotalInProgress(fakes) == 0; }));
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_client_disconnects_total{stage="streaming"})"), 1);
}

// After many concurrent streams, some completed and some abandoned at various points, every
// in-flight count is exactly zero again.
TEST(GatewayTest, MixedCompletedAndAbortedStreamsLeaveNoCount) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  const Behavior b = Streaming(/*sse=*/true, 3, 30ms);
  SetBehaviorAll(fakes, b);
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  std::atomic<int> completed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 5; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 10; ++k) {
        const int i = t * 10 + k;
        HttpClient client(port);
        if (client.Send(JsonRequest(kChat, ChatBody("m1", "q" + std::to_string(i), {}, true)))) continue;
        if (i % 3 == 0) {
          client.Close();  // gone before any answer
        } else if (i % 3 == 1) {
          client.ReadStreamed([](const StreamedResponse&) { return false; });
          client.Close();  // gone after the first piece
        } else {
          const StreamedResponse r = client.ReadStreamed();
          if (r.complete && r.body == Concat(b.chunks)) ++completed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(completed.load(), 16);
  // A request sent just before its client left may be read and dispatched late: wait until all
  // 50 have been dispatched and have ended.
  auto dispatched = [&] {
    uint64_t n = 0;
    for (uint32_t i = 0; i < gw->routing()->fleet->size(); ++i) n += gw->routing()->fleet->state(i).dispatched.load();
    return n;
  };
  EXPECT_TRUE(Eventually([&] { return dispatched() == 50 && TotalInFlight(*gw) == 0 && TotalInProgress(fakes) == 0; }))
      << "dispatched " << dispatched() << ", in flight " << TotalInFlight(*gw) << ", at the instances "
      << TotalInProgress(fakes);
  for (uint32_t i = 0; i < gw->routing()->fleet->size(); ++i) {
    const std::string& name = gw->routing()->fleet->spec(i).name;
    EXPECT_EQ(InFlight(*gw, i), 0) << name;
    EXPECT_EQ(Metric(port, "prefix_router_in_flight_requests{instance=\"" + name + "\"}"), 0) << name;
  }
}

// --------------------------------------------------------------------------------------- health

// Active checks eject a stopped instance (its keys move to their next preferred instances, the
// others stay) and readmit it when it comes back on the same address (its keys return).
TEST(GatewayTest, ActiveHealthChecksEjectAndReadmit) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PrefixAware();
  config.health.interval = 0.1;
  config.health.timeout = 0.5;
  config.health.unhealthy_threshold = 2;
  config.health.healthy_threshold = 2;
  config.health.passive_failures = 0;  // only the active checks decide here
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();

  // A key may be placed by load (prefix-aware places part of new keys on the least loaded
  // instance as reuse falls), and the gateway ends a request's bookkeeping just after the client
  // has its answer: each request waits for the previous one to end, so that loads tie.
  auto idle = [&] { ASSERT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; })); };
  std::vector<std::string> groups, home;
  for (int i = 0; i < 30; ++i) {
    groups.push_back("g" + std::to_string(i));
    idle();
    home.push_back(ChatInstance(port, ChatBody("m1", "hi", groups.back())));
  }
  FakeUpstream& victim = *fakes[0];
  ASSERT_NE(std::count(home.begin(), home.end(), "a"), 0);
  const uint16_t victim_port = victim.port();
  victim.Stop();

  ASSERT_TRUE(Eventually([&] { return InstanceHealth(port, "a") == "ejected"; }));
  EXPECT_EQ(Metric(port, R"(prefix_router_instance_up{instance="a"})"), 0);
  EXPECT_FALSE(gw->routing()->fleet->state(0).available.load());
  for (size_t i = 0; i < groups.size(); ++i) {
    idle();
    const std::string now = ChatInstance(port, ChatBody("m1", "hi", groups[i]));
    if (home[i] == "a") {
      EXPECT_NE(now, "a") << groups[i];
    } else {
      EXPECT_EQ(now, home[i]) << groups[i];  // keys of the other instances do not move
    }
  }

  // Back on the same port (retried: the port may be briefly unavailable).
  ASSERT_TRUE(Eventually([&] { return victim.Start(victim_port).ok(); }));
  ASSERT_TRUE(Eventually([&] { return InstanceHealth(port, "a") == "up"; }));
  EXPECT_EQ(Metric(port, R"(prefix_router_instance_up{instance="a"})"), 1);
  for (size_t i = 0; i < groups.size(); ++i) {
    idle();
    EXPECT_EQ(ChatInstance(port, ChatBody("m1", "hi", groups[i])), home[i]) << groups[i];
  }
}

// With passive_failures 1, one refused connection on live traffic ejects the instance at once.
TEST(GatewayTest, ConnectFailureEjectsPassively) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PrefixAware();
  config.health.interval = 60;  // checks on, but none will run again during the test
  config.health.passive_failures = 1;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const std::string group = GroupPreferring(gw->port(), "m1", "a");
  fakes[0]->Stop();
  const ClientResponse r = Post(gw->port(), kChat, ChatBody("m1", "hi", group));
  EXPECT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(r.Header(kInstance), "b");
  EXPECT_FALSE(gw->routing()->fleet->state(0).available.load());
  EXPECT_EQ(InstanceHealth(gw->port(), "a"), "ejected");
  // Ejected: the next request for the key goes to b directly, with no further connect attempt.
  EXPECT_EQ(ChatInstance(gw->port(), ChatBody("m1", "again", group)), "b");
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_upstream_errors_total{instance="a",kind="connect"})"), 1);
}

// ----------------------------------------------------------------------------------- keep-alive

// One client connection carries several sequential requests of every kind.
TEST(GatewayTest, KeepAliveCarriesSequentialRequests) {
  Fakes fakes = StartFakes({"a", "b"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  HttpClient client(gw->port());
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(client.RoundTrip(JsonRequest(kChat, ChatBody("m1", "hi"))).status(), 200);
    EXPECT_EQ(client.RoundTrip(JsonRequest(kCompletions, R"({"model":"m1","prompt":"p"})")).status(), 200);
    EXPECT_EQ(client.RoundTrip(JsonRequest(kInvocations, "{}")).status(), 200);
    EXPECT_EQ(client.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/health")).status(), 200);
    EXPECT_EQ(client.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/v1/models")).status(), 200);
    EXPECT_EQ(client.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/nowhere")).status(), 404);
  }
  EXPECT_TRUE(client.connected());
  EXPECT_EQ(client.connects(), 1);
}

// An instance that answers 200 at once; its Server reports how many connections are open.
class CountingUpstream final : public http::Handler {
 public:
  http::net::awaitable<void> Handle(http::Exchange& ex) override {
    ++requests;
    http::StringResponse res{bhttp::status::ok, 11};
    res.set(bhttp::field::content_type, "application/json");
    res.body() = R"({"ok":true})";
    co_await ex.Send(std::move(res));
  }
  std::atomic<int> requests{0};
};

// Upstream connections are kept alive and reused: sequential requests share one connection.
TEST(GatewayTest, ReusesUpstreamConnections) {
  CountingUpstream handler;
  http::ServerOptions options;
  options.io_threads = 1;
  http::Server upstream(options, handler);
  ASSERT_TRUE(upstream.Start().ok());
  GatewayConfig config;
  config.listen = "127.0.0.1:0";
  config.io_threads = 1;
  config.health.interval = 0;
  config.timeouts.drain = 1;
  config.discovery.models = false;  // the handler counts every request, a /v1/models poll too
  config.instances.push_back(InstanceConfig{"solo", "http://127.0.0.1:" + std::to_string(upstream.port())});
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  for (int i = 0; i < 8; ++i) {
    // A new client connection each time: reuse does not depend on the client's keep-alive.
    EXPECT_EQ(Post(gw->port(), kChat, ChatBody("m1", "q" + std::to_string(i))).status(), 200);
    EXPECT_EQ(upstream.open_connections(), 1);
  }
  EXPECT_EQ(handler.requests.load(), 8);
  gw.reset();
  upstream.Stop(0ms);
}

// ------------------------------------------------------------------------------------- shutdown

// Stop lets a request in flight finish (within the drain time) and refuses new connections.
TEST(GatewayTest, StopDrainsInFlightAndRefusesNew) {
  Fakes fakes = StartFakes({"a"});
  Behavior slow;
  slow.head_delay = 2000ms;
  fakes[0]->SetBehavior(slow);
  GatewayConfig config = ConfigFor(fakes);
  config.timeouts.drain = 5;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  HttpClient client(port);
  ASSERT_FALSE(client.Send(JsonRequest(kChat, ChatBody("m1", "hi"))));
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 1; }));

  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    gw->Stop();
    stopped = true;
  });
  bool refused_while_in_flight = false;
  EXPECT_TRUE(Eventually([&] {
    HttpClient probe(port, 1000ms);
    if (probe.Connect() != http::net::error::connection_refused) return false;
    refused_while_in_flight = fakes[0]->in_progress() == 1;
    return true;
  }));
  EXPECT_TRUE(refused_while_in_flight);
  EXPECT_FALSE(stopped.load());  // still draining

  const ClientResponse r = client.Read();
  EXPECT_FALSE(r.error) << r.error.message();
  EXPECT_EQ(r.status(), 200);
  EXPECT_EQ(r.Header(kInstance), "a");
  stopper.join();
  EXPECT_EQ(fakes[0]->aborted(), 0);
}

// Starting on an address already in use fails with a status that names the address.
TEST(GatewayTest, StartOnBusyPortNamesTheAddress) {
  Fakes fakes = StartFakes({"a"});
  auto first = StartGateway(ConfigFor(fakes));
  ASSERT_NE(first, nullptr);
  GatewayConfig config = ConfigFor(fakes);
  const std::string address = "127.0.0.1:" + std::to_string(first->port());
  config.listen = address;
  ASSERT_TRUE(ValidateConfig(config).ok());
  auto second = Gateway::Create(config);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  const Status s = (*second)->Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(address), std::string::npos) << s.ToString();
  EXPECT_EQ(Get(first->port(), "/health").status(), 200);  // the first one is unaffected
}

}  // namespace
}  // namespace prefix_router::gateway
