// Loopback tests of request correlation (x-request-id, traceparent), the routes without a
// chat or completions body (/v1/responses, /v1/embeddings, /tokenize, /detokenize) and the
// configurable answer to unknown paths: a real Gateway in front of FakeUpstreams that record
// what they received.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "api/trace_context.h"
#include "gateway/config.h"
#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"
#include "testing/fake_upstream.h"
#include "testing/http_client.h"

namespace prefix_router::gateway {
namespace {

namespace pt = prefix_router::testing;
using pt::ClientResponse;
using pt::Headers;
using pt::Post;
using testing::ChatBody;
using testing::ConfigFor;
using testing::Fakes;
using testing::kChat;
using testing::kInstance;
using testing::StartFakes;
using testing::StartGateway;

const bool kQuietLogs = [] {
  testing::QuietLogs();
  return true;
}();

constexpr std::string_view kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// Every value the upstream received for header `name` (case-insensitive).
std::vector<std::string> Received(const pt::RecordedRequest& r, std::string_view name) {
  std::vector<std::string> out;
  for (const auto& [k, v] : r.headers) {
    if (http::beast::iequals(k, name)) out.push_back(v);
  }
  return out;
}

bool IsUuidV4(const std::string& s) {
  return s.size() == 36 && s[8] == '-' && s[13] == '-' && s[14] == '4' && s[18] == '-' && s[23] == '-' &&
         std::string_view("89ab").find(s[19]) != std::string_view::npos &&
         std::all_of(s.begin(), s.end(), [](char c) { return c == '-' || std::isxdigit(c); });
}

// ------------------------------------------------------------------------------- request ids

// Without an x-request-id the gateway makes one, sends it upstream and returns it; every
// request gets a different one.
TEST(RequestIdTest, GeneratedPropagatedAndReturned) {
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const ClientResponse r = Post(gw->port(), kChat, ChatBody("m", "hi"));
    ASSERT_EQ(r.status(), 200) << r.body();
    const std::string id = r.Header("x-request-id");
    EXPECT_TRUE(IsUuidV4(id)) << id;
    EXPECT_EQ(Received(fakes[0]->received().back(), "x-request-id"), std::vector<std::string>{id});
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 3u);
}

// A valid client id is kept, upstream and back; an invalid one (too long, or sent twice) is
// replaced by a generated one everywhere.
TEST(RequestIdTest, ValidIdKeptInvalidReplaced) {
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  const ClientResponse kept = Post(gw->port(), kChat, ChatBody("m", "hi"), {{"X-Request-Id", "client-id 42"}});
  ASSERT_EQ(kept.status(), 200) << kept.body();
  EXPECT_EQ(kept.Header("x-request-id"), "client-id 42");
  EXPECT_EQ(Received(fakes[0]->received().back(), "x-request-id"), std::vector<std::string>{"client-id 42"});

  for (const Headers& bad :
       {Headers{{"X-Request-Id", std::string(129, 'x')}}, Headers{{"X-Request-Id", "one"}, {"X-Request-Id", "two"}}}) {
    const ClientResponse r = Post(gw->port(), kChat, ChatBody("m", "hi"), bad);
    ASSERT_EQ(r.status(), 200) << r.body();
    const std::string id = r.Header("x-request-id");
    EXPECT_TRUE(IsUuidV4(id)) << id;
    EXPECT_EQ(Received(fakes[0]->received().back(), "x-request-id"), std::vector<std::string>{id});
  }
}

// Answers the gateway makes itself (400, 404, 405, 503) and streamed answers carry the id.
TEST(RequestIdTest, ReturnedOnGatewayErrorsAndStreams) {
  Fakes fakes = StartFakes({"a"});
  GatewayConfig config = ConfigFor(fakes);
  config.instances[0].models = {"m"};
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const Headers id = {{"x-request-id", "rid-1"}};
  EXPECT_EQ(Post(gw->port(), kChat, "{not json", id).Header("x-request-id"), "rid-1");
  EXPECT_EQ(Post(gw->port(), kChat, ChatBody("other", "x"), id).Header("x-request-id"), "rid-1");
  EXPECT_EQ(Post(gw->port(), "/nothing", "", id).Header("x-request-id"), "rid-1");
  EXPECT_EQ(Post(gw->port(), "/metrics", "", id).status(), 405);
  EXPECT_TRUE(IsUuidV4(pt::Get(gw->port(), "/v1/models").Header("x-request-id")));

  fakes[0]->SetBehavior(testing::SseStream(3, std::chrono::milliseconds(1)));
  pt::HttpClient client(gw->port());
  ASSERT_FALSE(client.Send(testing::JsonRequest(kChat, ChatBody("m", "s", {}, true), id)));
  const pt::StreamedResponse s = client.ReadStreamed();
  EXPECT_TRUE(s.complete);
  EXPECT_EQ(s.Header("x-request-id"), "rid-1");

  fakes[0]->Stop();  // connect refused on every attempt: the gateway's own 502
  const ClientResponse failed = Post(gw->port(), kChat, ChatBody("m", "x"), id);
  EXPECT_EQ(failed.status(), 502) << failed.body();
  EXPECT_EQ(failed.Header("x-request-id"), "rid-1");
}

// ---------------------------------------------------------------------------- trace context

// A valid traceparent and its tracestate reach the instance unchanged.
TEST(TraceparentTest, ValidTraceparentIsForwarded) {
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  const ClientResponse r = Post(gw->port(), kChat, ChatBody("m", "hi"),
                                {{"traceparent", std::string(kTraceparent)}, {"tracestate", "vendor=x,other=y"}});
  ASSERT_EQ(r.status(), 200) << r.body();
  const auto up = fakes[0]->received().back();
  EXPECT_EQ(Received(up, "traceparent"), std::vector<std::string>{std::string(kTraceparent)});
  EXPECT_EQ(Received(up, "tracestate"), std::vector<std::string>{"vendor=x,other=y"});
}

// An invalid traceparent (malformed, all-zero trace id, or repeated) is dropped with its
// tracestate; the request itself goes through.
TEST(TraceparentTest, InvalidTraceparentIsDropped) {
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  for (const Headers& bad : {
           Headers{{"traceparent", "00-xyz-00f067aa0ba902b7-01"}, {"tracestate", "v=1"}},
           Headers{{"traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}},
           Headers{{"traceparent", std::string(kTraceparent)}, {"traceparent", std::string(kTraceparent)}},
       }) {
    const ClientResponse r = Post(gw->port(), kChat, ChatBody("m", "hi"), bad);
    ASSERT_EQ(r.status(), 200) << r.body();
    const auto up = fakes[0]->received().back();
    EXPECT_TRUE(Received(up, "traceparent").empty()) << bad[0].second;
    EXPECT_TRUE(Received(up, "tracestate").empty());
  }
}

// ----------------------------------------------------------------------------------- routes

// Two instances, each serving one model.
GatewayConfig TwoModels(const Fakes& fakes) {
  GatewayConfig config = ConfigFor(fakes);
  config.instances[0].models = {"m1"};
  config.instances[1].models = {"m2"};
  return config;
}

// Each new route reaches an instance of the requested model with path and body unchanged.
TEST(RoutesTest, NewRoutesReachTheModelsInstance) {
  Fakes fakes = StartFakes({"a", "b"});
  auto gw = StartGateway(TwoModels(fakes));
  ASSERT_NE(gw, nullptr);
  struct Case {
    std::string path, body, instance;
  };
  const std::vector<Case> cases = {
      {"/v1/responses", R"({"model":"m2","instructions":"sys","input":[{"role":"user","content":"hi"}]})", "b"},
      {"/v1/responses", R"({"input":"hi","model":"m1"})", "a"},
      {"/v1/embeddings", R"({"model":"m2","input":["x","y"]})", "b"},
      {"/v1/embeddings?v=1", R"({"model":"m1","input":"x","encoding_format":"float"})", "a"},
      {"/tokenize", R"({"model":"m2","prompt":"hello"})", "b"},
      {"/detokenize", R"({"model":"m1","tokens":[1,2,3]})", "a"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " " + c.body);
    const ClientResponse r = Post(gw->port(), c.path, c.body);
    ASSERT_EQ(r.status(), 200) << r.body();
    EXPECT_EQ(r.Header(kInstance), c.instance);
    const auto& fake = c.instance == "a" ? fakes[0] : fakes[1];
    const auto up = fake->received().back();
    EXPECT_EQ(up.method, "POST");
    EXPECT_EQ(up.target, c.path);
    EXPECT_EQ(up.body, c.body);
  }
  EXPECT_EQ(testing::TotalRequests(fakes), static_cast<int>(cases.size()));
  // tokenize without a model goes to any instance.
  EXPECT_EQ(Post(gw->port(), "/tokenize", R"({"prompt":"hello"})").status(), 200);
}

// The new routes answer bad bodies, unknown models and wrong methods themselves.
TEST(RoutesTest, NewRoutesRejectBadRequests) {
  Fakes fakes = StartFakes({"a", "b"});
  auto gw = StartGateway(TwoModels(fakes));
  ASSERT_NE(gw, nullptr);
  EXPECT_EQ(Post(gw->port(), "/v1/embeddings", R"({"input":"x"})").status(), 400);
  EXPECT_EQ(Post(gw->port(), "/v1/responses", R"({"model":"m1","input":7})").status(), 400);
  EXPECT_EQ(Post(gw->port(), "/v1/embeddings", R"({"model":"nope","input":"x"})").status(), 404);
  EXPECT_EQ(pt::Get(gw->port(), "/v1/embeddings").status(), 405);
  EXPECT_EQ(pt::Get(gw->port(), "/tokenize").status(), 405);
  EXPECT_EQ(testing::TotalRequests(fakes), 0);
}

// In a prefix-aware pool, identical embeddings requests spread over the instances (least
// outstanding requests), while identical responses requests keep to one (prefix affinity).
TEST(RoutesTest, EmbeddingsIgnorePrefixAffinityResponsesKeepIt) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = testing::PlainPrefixAware();
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  std::string instructions(1500, 'i');
  std::map<std::string, int> embeddings, responses;
  for (int i = 0; i < 30; ++i) {
    const ClientResponse e = Post(gw->port(), "/v1/embeddings", R"({"model":"m","input":"same text"})");
    ASSERT_EQ(e.status(), 200) << e.body();
    EXPECT_EQ(e.Header("x-prefix-router-decision"), "least-outstanding");
    ++embeddings[e.Header(kInstance)];
    const ClientResponse r =
        Post(gw->port(), "/v1/responses",
             R"({"model":"m","instructions":")" + instructions + R"(","input":"q)" + std::to_string(i) + "\"}");
    ASSERT_EQ(r.status(), 200) << r.body();
    ++responses[r.Header(kInstance)];
  }
  EXPECT_GE(embeddings.size(), 2u);
  EXPECT_EQ(responses.size(), 1u);
}

// ---------------------------------------------------------------------------- unknown paths

// Unknown paths get the configured status as an OpenAI-style error; wrong methods stay 405.
TEST(UnknownPathTest, StatusIsConfigurable) {
  Fakes fakes = StartFakes({"a"});
  for (const auto& [status, code] : std::vector<std::pair<int, std::string>>{
           {404, "not_found"}, {403, "forbidden"}, {410, "gone"}, {421, "misdirected_request"}}) {
    GatewayConfig config = ConfigFor(fakes);
    config.unknown_path_status = static_cast<uint32_t>(status);
    auto gw = StartGateway(config);
    ASSERT_NE(gw, nullptr);
    const ClientResponse r = pt::Get(gw->port(), "/v2/nothing");
    EXPECT_EQ(r.status(), status) << r.body();
    EXPECT_EQ(r.Header("content-type"), "application/json");
    EXPECT_EQ(testing::ErrorCode(r.body()), code) << r.body();
    EXPECT_EQ(pt::Get(gw->port(), "/v1/chat/completions").status(), 405);
  }
  EXPECT_EQ(fakes[0]->requests(), 0);
}

// unknown_path_status is read from YAML and validated to the allowed set.
TEST(UnknownPathTest, ConfigParsesAndValidates) {
  auto parsed = ParseConfigYaml("unknown_path_status: 410\ninstances: [{url: 'http://127.0.0.1:9'}]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->unknown_path_status, 410u);
  EXPECT_TRUE(ValidateConfig(*parsed).ok());
  parsed->unknown_path_status = 418;
  const Status s = ValidateConfig(*parsed);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown_path_status"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace prefix_router::gateway
