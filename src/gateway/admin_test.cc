// Tests of the operations side: the admin section of the configuration, the admin listener
// (token, routes, errors) on loopback in front of a real Gateway and FakeUpstreams, membership
// changes and reloads while requests are in flight, and how many keys move when the fleet
// changes (the placement-stability figures quoted in docs/admin.md).
#include "gateway/admin.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"
#include "testing/fake_upstream.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

using namespace std::chrono_literals;
namespace pt = prefix_router::testing;
namespace bhttp = http::bhttp;
namespace json = boost::json;
using pt::Behavior;
using pt::ClientResponse;
using pt::Eventually;
using pt::FakeUpstream;
using pt::Headers;
using testing::LogCapture;
using testing::TempFile;

constexpr std::string_view kToken = "adm1n-T0ken-7f3a9c";  // distinctive, to search logs for it
using testing::kChat;

// ------------------------------------------------------------------------------------ helpers

using testing::ConfigFor;
using testing::Fakes;
using testing::StartFakes;
using testing::StartGateway;

// An admin listener on 127.0.0.1:0, with `token` when not empty.
std::unique_ptr<AdminServer> StartAdmin(Gateway& g, std::string_view token, ConfigLoader loader = {}) {
  AdminConfig ac;
  ac.enabled = true;
  ac.listen_host = "127.0.0.1";
  ac.listen_port = 0;
  if (!token.empty()) ac.token = Secret(std::string(token));
  auto admin = std::make_unique<AdminServer>(ac, TimeoutsConfig{}, g, std::move(loader));
  EXPECT_TRUE(admin->Start().ok());
  return admin;
}

Headers Bearer(std::string_view token = kToken) { return {{"Authorization", "Bearer " + std::string(token)}}; }

ClientResponse Admin(uint16_t port, bhttp::verb method, std::string_view target, std::string body = "",
                     Headers headers = Bearer()) {
  if (!body.empty()) headers.emplace_back("Content-Type", "application/json");
  return pt::Fetch(port, pt::MakeRequest(method, target, std::move(body), headers));
}

json::value Json(const ClientResponse& r) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body(), ec);
  EXPECT_FALSE(ec) << r.body();
  return v;
}

std::string Str(const json::value& v) { return v.is_string() ? std::string(v.as_string().c_str()) : "<not a string>"; }
int64_t Int(const json::value& v) {
  return v.is_int64() ? v.as_int64() : v.is_uint64() ? static_cast<int64_t>(v.as_uint64()) : -999;
}

// Checks status and the OpenAI error shape; returns the message.
std::string ExpectError(const ClientResponse& r, int status, std::string_view code) {
  EXPECT_EQ(r.status(), status) << r.body();
  EXPECT_EQ(r.Header("content-type"), "application/json");
  const json::value v = Json(r);
  const json::value* e = v.is_object() ? v.as_object().if_contains("error") : nullptr;
  const json::object* error = e ? e->if_object() : nullptr;
  if (error == nullptr || !error->contains("message") || !error->contains("type")) {
    ADD_FAILURE() << "not an OpenAI-style error: " << r.body();
    return "";
  }
  EXPECT_EQ(Str(error->at("code")), code) << r.body();
  return Str(error->at("message"));
}

// name -> state, from GET /admin/instances.
std::map<std::string, json::object> InstancesByName(uint16_t admin_port) {
  const ClientResponse r = Admin(admin_port, bhttp::verb::get, "/admin/instances");
  EXPECT_EQ(r.status(), 200) << r.body();
  std::map<std::string, json::object> out;
  const json::value doc = Json(r);
  for (const auto& v : doc.at("instances").as_array()) {
    out[Str(v.at("name"))] = v.as_object();
  }
  return out;
}

std::string ChatBody(std::string_view user) {
  return R"({"model":"llama","messages":[{"role":"user","content":")" + std::string(user) + "\"}]}";
}

// Sends `n` chat requests at once, each on its own thread; returns their statuses and instances
// once they are all answered (the caller does what it wants while they are in flight).
class Burst {
 public:
  Burst(uint16_t port, int n) : statuses_(n), instances_(n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, port, i] {
        const ClientResponse r = pt::Post(port, kChat, ChatBody("burst " + std::to_string(i)));
        statuses_[i] = r.error ? -1 : r.status();
        instances_[i] = r.Header("x-prefix-router-instance");
      });
    }
  }
  void Join() {
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  ~Burst() { Join(); }
  const std::vector<int>& statuses() const { return statuses_; }
  const std::vector<std::string>& instances() const { return instances_; }

 private:
  std::vector<int> statuses_;
  std::vector<std::string> instances_;
  std::vector<std::thread> threads_;
};

int32_t TotalInFlight(const Gateway& g) {
  auto rs = g.routing();
  int32_t n = 0;
  for (uint32_t i = 0; i < rs->fleet->size(); ++i) n += rs->fleet->state(i).in_flight.load();
  return n;
}

Result<GatewayConfig> LoadAndValidate(const std::string& path) {
  Result<GatewayConfig> c = LoadConfigFile(path);
  if (!c.ok()) return c;
  if (Status s = ValidateConfig(*c); !s.ok()) return s;
  return c;
}

// ------------------------------------------------------------------------------ configuration

Status ValidateYaml(const std::string& yaml, GatewayConfig* out = nullptr) {
  auto parsed = ParseConfigYaml("instances: [{url: 'http://127.0.0.1:8001'}]\n" + yaml);
  if (!parsed.ok()) return parsed.status();
  Status s = ValidateConfig(*parsed);
  if (out) *out = *parsed;
  return s;
}

// Admin is off unless the file has an `admin` section; an empty section is loopback:9090.
TEST(AdminConfigTest, OffUnlessConfiguredLoopbackByDefault) {
  GatewayConfig c;
  ASSERT_TRUE(ValidateYaml("", &c).ok());
  EXPECT_FALSE(c.admin.enabled);
  ASSERT_TRUE(ValidateYaml("admin: {}\n", &c).ok());
  EXPECT_TRUE(c.admin.enabled);
  EXPECT_EQ(c.admin.listen_host, "127.0.0.1");
  EXPECT_EQ(c.admin.listen_port, 9090);
  EXPECT_TRUE(c.admin.token.empty());
  const Status typo = ValidateYaml("admin: {listn: 127.0.0.1:1}\n");
  EXPECT_NE(typo.message().find("admin.listn: unknown field"), std::string::npos) << typo.message();
}

// Off loopback an admin listener needs a token: refused at validation, naming the field.
TEST(AdminConfigTest, NonLoopbackWithoutTokenIsRefused) {
  for (const char* listen : {"0.0.0.0:9090", "10.1.2.3:9090", "[::]:9090", "admin.example.com:9090"}) {
    const Status s = ValidateYaml(std::string("admin: {listen: '") + listen + "'}\n");
    ASSERT_FALSE(s.ok()) << listen;
    EXPECT_NE(s.message().find("admin.listen"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("not a loopback address"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("token"), std::string::npos) << s.message();
  }
  for (const char* listen : {"127.0.0.1:9090", "127.0.0.5:0", "[::1]:9090", "localhost:9090"}) {
    EXPECT_TRUE(ValidateYaml(std::string("admin: {listen: '") + listen + "'}\n").ok()) << listen;
  }
  ::setenv("PR_ADMIN_TEST_TOKEN", std::string(kToken).c_str(), 1);
  GatewayConfig c;
  const Status s = ValidateYaml("admin: {listen: '0.0.0.0:9090', token_env: PR_ADMIN_TEST_TOKEN}\n", &c);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(c.admin.token.Matches(kToken));
  ::unsetenv("PR_ADMIN_TEST_TOKEN");
}

// Token sources: a file (trailing newline trimmed) or a variable, not both; a missing or empty
// source is refused naming it; no message shows the token.
TEST(AdminConfigTest, TokenSourcesAreCheckedWithoutShowingTheToken) {
  TempFile file("token");
  file.Write(std::string(kToken) + "\n");
  GatewayConfig c;
  ASSERT_TRUE(ValidateYaml("admin: {token_file: '" + file.path() + "'}\n", &c).ok());
  EXPECT_TRUE(c.admin.token.Matches(kToken));

  Status s = ValidateYaml("admin: {token_file: '" + file.path() + "', token_env: X}\n");
  EXPECT_NE(s.message().find("not both"), std::string::npos) << s.message();
  s = ValidateYaml("admin: {token_file: '/nonexistent/admin-token'}\n");
  EXPECT_NE(s.message().find("admin.token_file: '/nonexistent/admin-token': cannot open"), std::string::npos)
      << s.message();
  ::unsetenv("PR_ADMIN_TEST_UNSET");
  s = ValidateYaml("admin: {token_env: PR_ADMIN_TEST_UNSET}\n");
  EXPECT_NE(s.message().find("PR_ADMIN_TEST_UNSET is not set"), std::string::npos) << s.message();
  file.Write("\n");
  s = ValidateYaml("admin: {token_file: '" + file.path() + "'}\n");
  EXPECT_NE(s.message().find("empty"), std::string::npos) << s.message();
  file.Write(std::string(kToken) + " with a space\n");
  s = ValidateYaml("admin: {token_file: '" + file.path() + "'}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find(kToken), std::string::npos) << s.message();
}

// Secret: equal strings match; a prefix, an extension or another string of the same length do
// not; an empty secret matches nothing.
TEST(AdminConfigTest, SecretMatchesOnlyTheExactValue) {
  const Secret s{std::string(kToken)};
  EXPECT_TRUE(s.Matches(kToken));
  EXPECT_FALSE(s.Matches(kToken.substr(0, kToken.size() - 1)));
  EXPECT_FALSE(s.Matches(std::string(kToken) + "x"));
  std::string flipped(kToken);
  flipped.back() ^= 1;
  EXPECT_FALSE(s.Matches(flipped));
  EXPECT_FALSE(s.Matches(""));
  EXPECT_FALSE(Secret().Matches(""));
}

// A reload names each field it cannot apply; fleet fields are not among them.
TEST(AdminConfigTest, RestartRequiredNamesFieldsReadOnlyAtStart) {
  GatewayConfig a;
  GatewayConfig b = a;
  b.instances.push_back(InstanceConfig{"x", "http://127.0.0.1:1"});
  b.routing.strategy = Strategy::kPrefixAware;
  b.pools["llama"] = RoutingOptions{};
  EXPECT_TRUE(RestartRequired(a, b).empty());
  b.listen = "127.0.0.1:9";
  b.io_threads = 3;
  b.max_connections = 100;
  b.timeouts.connect = 1;
  b.health.interval = 1;
  b.admin.enabled = true;
  EXPECT_EQ(RestartRequired(a, b), (std::vector<std::string>{"listen", "io_threads", "limits.max_connections",
                                                             "timeouts.connect", "health.interval", "admin.listen"}));
  GatewayConfig c = b;
  c.admin.token = Secret("another");
  EXPECT_EQ(RestartRequired(b, c), std::vector<std::string>{"admin.token"});
  // An unchanged admin section without a token is no change (two empty tokens are the same).
  EXPECT_TRUE(RestartRequired(b, b).empty());
  // Read at start by the KV event subscribers and the tokenize client: named, not dropped.
  GatewayConfig d = b;
  d.timeouts.kv_events_silence = 5;
  d.timeouts.tokenize = 0.5;
  EXPECT_EQ(RestartRequired(b, d), (std::vector<std::string>{"timeouts.tokenize", "timeouts.kv_events_silence"}));
}

// --------------------------------------------------------------------------------- listener

// With a token: no header, another scheme, a wrong or partial token get 401 with an OpenAI-style
// body and a WWW-Authenticate challenge; the right token gets the answer.
TEST(AdminTest, TokenIsRequiredAndAccepted) {
  Fakes fakes = StartFakes({"a", "b"});
  auto g = StartGateway(ConfigFor(fakes));
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g, kToken);
  const uint16_t port = admin->port();
  const std::string partial(kToken.substr(0, 6));
  for (const Headers& h :
       {Headers{}, Headers{{"Authorization", "Basic " + std::string(kToken)}}, Bearer("wrong"), Bearer(partial),
        Bearer(std::string(kToken) + "x"), Headers{{"Authorization", std::string(kToken)}}}) {
    const ClientResponse r = Admin(port, bhttp::verb::get, "/admin/instances", "", h);
    ExpectError(r, 401, "invalid_api_key");
    EXPECT_EQ(r.Header("www-authenticate"), "Bearer realm=\"prefix-router admin\"");
    EXPECT_EQ(r.body().find(kToken), std::string::npos);
  }
  // An unauthenticated request learns nothing, not even which routes exist.
  ExpectError(Admin(port, bhttp::verb::get, "/nope", "", {}), 401, "invalid_api_key");
  EXPECT_EQ(Admin(port, bhttp::verb::get, "/admin/instances").status(), 200);
  EXPECT_EQ(Admin(port, bhttp::verb::get, "/admin/instances", "", {{"Authorization", "bearer  " + std::string(kToken)}})
                .status(),
            200);
  // Without a token configured (loopback only) no header is needed.
  auto open_admin = StartAdmin(*g, "");
  EXPECT_EQ(Admin(open_admin->port(), bhttp::verb::get, "/admin/instances", "", {}).status(), 200);
}

// The list shows each instance's address, weight, models and state; drain and undrain change
// the state; a single instance can be read by name.
TEST(AdminTest, ListsInstancesWithState) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.instances[1].weight = 3;
  config.instances[1].models = {"llama"};
  auto g = StartGateway(config);
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g, kToken);
  const uint16_t port = admin->port();
  auto list = InstancesByName(port);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(Str(list["a"].at("url")), fakes[0]->url());
  EXPECT_EQ(Str(list["a"].at("state")), "available");
  EXPECT_EQ(list["a"].at("models").as_array().size(), 0u);
  EXPECT_EQ(Int(list["b"].at("weight")), 3);
  EXPECT_EQ(Str(list["b"].at("models").as_array()[0]), "llama");
  EXPECT_EQ(Int(list["b"].at("in_flight")), 0);

  ClientResponse r = Admin(port, bhttp::verb::post, "/admin/instances/b/drain");
  ASSERT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(Str(Json(r).at("state")), "drained");
  EXPECT_TRUE(InstancesByName(port)["b"].at("drained").as_bool());
  // /health on the client listener agrees.
  EXPECT_NE(pt::Get(g->port(), "/health").body().find("\"b\":\"drained\""), std::string::npos);
  r = Admin(port, bhttp::verb::post, "/admin/instances/b/undrain");
  EXPECT_EQ(Str(Json(r).at("state")), "available");
  g->routing()->fleet->state(0).available.store(false);  // as health checks would
  r = Admin(port, bhttp::verb::get, "/admin/instances/a");
  ASSERT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(Str(Json(r).at("state")), "ejected");
  EXPECT_FALSE(Json(r).at("healthy").as_bool());
}

// Bad input and conflicts get 4xx with a message naming the problem; nothing changes.
TEST(AdminTest, BadRequestsGetClearErrorsAndChangeNothing) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.instances[1].models = {"llama"};
  config.instances[0].models = {"mistral"};
  config.pools["llama"] = RoutingOptions{};
  auto g = StartGateway(config);
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g, kToken);
  const uint16_t port = admin->port();
  using bhttp::verb;
  std::string m = ExpectError(Admin(port, verb::post, "/admin/instances", R"({"name":"a","url":"http://127.0.0.1:1"})"),
                              409, "conflict");
  EXPECT_NE(m.find("'a' already exists"), std::string::npos) << m;
  m = ExpectError(Admin(port, verb::post, "/admin/instances", R"({"name":"c","url":"ftp://x"})"), 400, "invalid_value");
  EXPECT_NE(m.find("url: 'ftp://x' is not http(s)://host[:port][/path]"), std::string::npos) << m;
  m = ExpectError(Admin(port, verb::post, "/admin/instances", R"({"name":"c","url":"http://127.0.0.1:1","weight":0})"),
                  400, "invalid_value");
  EXPECT_NE(m.find("weight: 0 is outside the allowed range 1..10000"), std::string::npos) << m;
  m = ExpectError(Admin(port, verb::post, "/admin/instances", R"({"url":"http://127.0.0.1:1","wieght":2})"), 400,
                  "invalid_body");
  EXPECT_NE(m.find("'wieght': unknown field"), std::string::npos) << m;
  ExpectError(Admin(port, verb::post, "/admin/instances", "{not json"), 400, "invalid_body");
  ExpectError(Admin(port, verb::post, "/admin/instances", R"({"name":"c"})"), 400, "invalid_body");
  ExpectError(Admin(port, verb::delete_, "/admin/instances/zz"), 404, "instance_not_found");
  ExpectError(Admin(port, verb::post, "/admin/instances/zz/drain"), 404, "instance_not_found");
  m = ExpectError(Admin(port, verb::delete_, "/admin/instances/b"), 409, "conflict");
  EXPECT_NE(m.find("pools.llama: no instance serves 'llama'"), std::string::npos) << m;
  ExpectError(Admin(port, verb::get, "/admin/nothing"), 404, "not_found");
  const ClientResponse r = Admin(port, verb::put, "/admin/instances");
  ExpectError(r, 405, "method_not_allowed");
  EXPECT_EQ(r.Header("allow"), "GET, POST");
  EXPECT_EQ(InstancesByName(port).size(), 2u);
  // The last instance cannot go.
  GatewayConfig one = ConfigFor(fakes);
  one.instances.resize(1);
  auto g1 = StartGateway(one);
  ASSERT_NE(g1, nullptr);
  auto admin1 = StartAdmin(*g1, kToken);
  m = ExpectError(Admin(admin1->port(), verb::delete_, "/admin/instances/a"), 409, "conflict");
  EXPECT_NE(m.find("at least one instance"), std::string::npos) << m;
}

// Add, drain and remove while requests are in flight on every instance: every request is
// answered 200 by the instance it started on; new requests skip the drained and the removed
// instance and reach the added one; undrain brings the instance back; no count leaks.
TEST(AdminTest, AddRemoveDrainWhileRequestsAreInFlight) {
  Fakes fakes = StartFakes({"a", "b", "c", "d"});
  // The first nine requests stay in flight until every admin change is made (a fixed delay
  // raced the changes on a loaded machine).
  for (int i = 0; i < 3; ++i) fakes[i]->HoldResponses(true);
  GatewayConfig config = ConfigFor(fakes);
  config.instances.resize(3);                       // d joins later
  config.routing.strategy = Strategy::kRoundRobin;  // exactly 3 requests on each instance
  auto g = StartGateway(config);
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g, kToken);
  const uint16_t port = admin->port();
  auto* old_policy = g->routing()->default_pool.policy.get();

  Burst burst(g->port(), 9);
  struct ReleaseOnExit {  // an assertion below must not leave the burst waiting
    Fakes& fakes;
    ~ReleaseOnExit() {
      for (auto& f : fakes) f->HoldResponses(false);
    }
  } release_on_exit{fakes};
  ASSERT_TRUE(Eventually([&] { return TotalInFlight(*g) == 9; }));
  ClientResponse r = Admin(port, bhttp::verb::post, "/admin/instances",
                           R"({"name":"d","url":")" + fakes[3]->url() + R"(","weight":2})");
  ASSERT_EQ(r.status(), 201) << r.body();
  EXPECT_EQ(Str(Json(r).at("state")), "available");
  r = Admin(port, bhttp::verb::post, "/admin/instances/a/drain");
  ASSERT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(Int(Json(r).at("in_flight")), 3);
  r = Admin(port, bhttp::verb::delete_, "/admin/instances/b");
  ASSERT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(Int(Json(r).at("in_flight")), 3);
  EXPECT_EQ(g->routing()->default_pool.policy.get(), old_policy);  // options unchanged: kept

  for (int i = 0; i < 3; ++i) fakes[i]->HoldResponses(false);
  burst.Join();
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(burst.statuses()[i], 200) << i;
    EXPECT_NE(burst.instances()[i], "d") << i;  // started before d joined
  }
  EXPECT_EQ(fakes[1]->requests(), 3);
  EXPECT_EQ(fakes[1]->aborted(), 0);
  // The gateway gives a request's count back after its last byte went out: the client may
  // have read the response a moment before.
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*g) == 0; })) << TotalInFlight(*g);

  for (auto& f : fakes) f->SetBehavior(Behavior{});
  std::map<std::string, int> seen;
  for (int i = 0; i < 20; ++i) {
    const ClientResponse n = pt::Post(g->port(), kChat, ChatBody("after " + std::to_string(i)));
    ASSERT_EQ(n.status(), 200) << n.body();
    ++seen[n.Header("x-prefix-router-instance")];
  }
  EXPECT_EQ(seen.count("a"), 0u);
  EXPECT_EQ(seen.count("b"), 0u);
  EXPECT_EQ(seen["c"] + seen["d"], 20);
  EXPECT_GT(seen["d"], 0);

  ASSERT_EQ(Admin(port, bhttp::verb::post, "/admin/instances/a/undrain").status(), 200);
  const int a_before = fakes[0]->requests();
  for (int i = 0; i < 6; ++i) pt::Post(g->port(), kChat, ChatBody("back " + std::to_string(i)));
  EXPECT_EQ(fakes[0]->requests(), a_before + 2);  // round-robin over a, c, d
  auto list = InstancesByName(port);
  EXPECT_EQ(list.size(), 3u);
  EXPECT_FALSE(list.contains("b"));
}

// Every admin action logs one info line saying what changed; neither the token nor a wrong
// token presented appears in any log line or response.
TEST(AdminTest, ActionsAreLoggedAndTheTokenNever) {
  LogCapture logs;
  Fakes fakes = StartFakes({"a", "b", "c"});
  auto g = StartGateway(ConfigFor(fakes));
  ASSERT_NE(g, nullptr);
  TempFile file("reload.yaml");
  file.Write("listen: 127.0.0.1:0\nhealth: {interval: 0}\ninstances:\n  - {name: a, url: '" + fakes[0]->url() +
             "'}\n  - {name: b, url: '" + fakes[1]->url() + "'}\n");
  auto admin = StartAdmin(*g, kToken, [&] { return LoadAndValidate(file.path()); });
  const uint16_t port = admin->port();
  const std::string wrong = "wr0ng-" + std::string(kToken).substr(3);
  std::vector<ClientResponse> responses;
  responses.push_back(Admin(port, bhttp::verb::get, "/admin/instances", "", Bearer(wrong)));
  responses.push_back(Admin(port, bhttp::verb::post, "/admin/instances/c/drain"));
  responses.push_back(Admin(port, bhttp::verb::delete_, "/admin/instances/c"));
  responses.push_back(
      Admin(port, bhttp::verb::post, "/admin/instances", R"({"name":"c2","url":")" + fakes[2]->url() + "\"}"));
  responses.push_back(Admin(port, bhttp::verb::post, "/admin/reload"));
  responses.push_back(Admin(port, bhttp::verb::post, "/admin/instances", R"({"url":"bad"})"));
  admin->Stop();
  g->Stop();
  const std::string text = logs.text();
  EXPECT_EQ(text.find(kToken), std::string::npos) << text;
  EXPECT_EQ(text.find(wrong), std::string::npos) << text;
  for (const auto& r : responses) EXPECT_EQ(r.body().find(kToken), std::string::npos) << r.body();
  EXPECT_NE(text.find("admin: GET /admin/instances refused (401): wrong bearer token"), std::string::npos) << text;
  EXPECT_NE(text.find("admin: instance c drained"), std::string::npos) << text;
  EXPECT_NE(text.find("admin: removed instance c"), std::string::npos) << text;
  EXPECT_NE(text.find("admin: added instance c2 (" + fakes[2]->url() + ", weight 1)"), std::string::npos) << text;
  EXPECT_NE(text.find("config reloaded (admin): removed instance c2"), std::string::npos) << text;
  EXPECT_NE(text.find("refused (400): url: 'bad'"), std::string::npos) << text;
}

// /admin/reload applies instances and pools at once, keeps the Policy of a pool whose options did
// not change (and replaces the one whose options did), reports fields that need a restart, and
// lets requests in flight on a removed instance finish.
TEST(AdminTest, ReloadAppliesFleetAndKeepsUnchangedPolicies) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  auto yaml = [&](const std::string& names, const std::string& extra) {
    std::string y = "listen: 127.0.0.1:0\nio_threads: 2\nhealth: {interval: 0}\n" + extra +
                    "routing: {routing_strategy: prefix-aware, prefix_length: 1024}\ninstances:\n";
    for (const auto& f : fakes) {
      if (names.find(f->name()) != std::string::npos) y += "  - {name: " + f->name() + ", url: '" + f->url() + "'}\n";
    }
    return y;
  };
  TempFile file("config.yaml");
  file.Write(yaml("ab", "pools: {llama: {prefix_length: 2048}}\ntimeouts: {drain: 1}\n"));
  auto initial = LoadAndValidate(file.path());
  ASSERT_TRUE(initial.ok()) << initial.status().ToString();
  auto g = StartGateway(*initial);
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g, kToken, [&] { return LoadAndValidate(file.path()); });
  Behavior slow;
  slow.head_delay = 1500ms;
  for (auto& f : fakes) f->SetBehavior(slow);
  const Policy* default_policy = g->routing()->default_pool.policy.get();
  const Policy* llama_policy = g->routing()->PoolFor("llama").policy.get();

  Burst burst(g->port(), 6);
  ASSERT_TRUE(Eventually([&] { return TotalInFlight(*g) == 6; }));
  file.Write(yaml("ac", "pools: {llama: {prefix_length: 4096}}\ntimeouts: {drain: 1, connect: 7}\n"));
  const ClientResponse r = Admin(admin->port(), bhttp::verb::post, "/admin/reload");
  ASSERT_EQ(r.status(), 200) << r.body();
  const json::value report = Json(r);
  std::string changes = json::serialize(report.at("changes"));
  EXPECT_NE(changes.find("added instance c"), std::string::npos) << changes;
  EXPECT_NE(changes.find("removed instance b"), std::string::npos) << changes;
  EXPECT_NE(changes.find("pools.llama: routing options changed"), std::string::npos) << changes;
  EXPECT_EQ(changes.find("\"routing:"), std::string::npos) << changes;
  EXPECT_EQ(json::serialize(report.at("restart_required")), R"(["timeouts.connect"])");
  EXPECT_EQ(g->routing()->default_pool.policy.get(), default_policy);
  EXPECT_NE(g->routing()->PoolFor("llama").policy.get(), llama_policy);
  EXPECT_EQ(g->routing()->PoolFor("llama").options.prefix_length, 4096u);

  burst.Join();
  for (int s : burst.statuses()) EXPECT_EQ(s, 200);
  auto list = InstancesByName(admin->port());
  EXPECT_EQ(list.size(), 2u);
  EXPECT_TRUE(list.contains("a") && list.contains("c"));
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*g) == 0; })) << TotalInFlight(*g);
}

// An invalid file (a range error, broken YAML) is rejected with the reason; the running
// configuration and its policies stay.
TEST(AdminTest, InvalidReloadIsRejectedAndTheOldConfigStays) {
  Fakes fakes = StartFakes({"a", "b"});
  TempFile file("bad.yaml");
  auto g = StartGateway(ConfigFor(fakes));
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g, kToken, [&] { return LoadAndValidate(file.path()); });
  const Policy* policy = g->routing()->default_pool.policy.get();
  const auto fleet = g->routing()->fleet;
  file.Write("instances: [{url: 'http://127.0.0.1:1'}]\nrouting: {prefix_length: 10}\n");
  std::string m = ExpectError(Admin(admin->port(), bhttp::verb::post, "/admin/reload"), 400, "invalid_config");
  EXPECT_NE(m.find("routing.prefix_length: 10 is outside the allowed range 1024..65536"), std::string::npos) << m;
  file.Write("instances: [{url: 'http://127.0.0.1:1'\n");
  m = ExpectError(Admin(admin->port(), bhttp::verb::post, "/admin/reload"), 400, "invalid_config");
  EXPECT_NE(m.find("invalid YAML"), std::string::npos) << m;
  EXPECT_EQ(g->routing()->fleet, fleet);
  EXPECT_EQ(g->routing()->default_pool.policy.get(), policy);
  EXPECT_EQ(pt::Post(g->port(), kChat, ChatBody("still")).status(), 200);
  // Without a configuration source there is nothing to reload.
  auto no_source = StartAdmin(*g, kToken);
  ExpectError(Admin(no_source->port(), bhttp::verb::post, "/admin/reload"), 409, "no_config_source");
}

// --------------------------------------------------------------------------- placement stability

// Which instance each of `keys` goes to, by name, in the default pool's current state.
std::vector<std::string> Homes(const Gateway& g, const std::vector<PrefixKey>& keys) {
  auto rs = g.routing();
  Rng rng(1);
  std::vector<std::string> out;
  for (const PrefixKey& k : keys) {
    auto d = rs->default_pool.policy->Pick(RouteRequest{"", k, {}}, *rs->fleet, rng);
    out.push_back(d.ok() ? rs->fleet->spec(d->instance).name : "");
  }
  return out;
}

double MovedFraction(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t moved = 0;
  for (size_t i = 0; i < a.size(); ++i) moved += a[i] != b[i];
  return static_cast<double>(moved) / static_cast<double>(a.size());
}

// On a 7-instance prefix-aware fleet, through the gateway's own operations: adding an instance
// moves about 1/8 of 10,000 random keys, all to the newcomer; removing one moves about 1/7, only
// its own keys; draining one moves exactly its keys and undraining brings them back (rendezvous
// hashing). Prints the measured fractions (docs/admin.md quotes them).
TEST(AdminPlacementTest, KeysMoveMinimallyOnAddRemoveDrain) {
  GatewayConfig config;
  config.listen = "127.0.0.1:0";
  config.health.interval = 0;
  config.routing.strategy = Strategy::kPrefixAware;
  for (int i = 0; i < 7; ++i) {
    config.instances.push_back(InstanceConfig{"i" + std::to_string(i), "http://127.0.0.1:" + std::to_string(9000 + i)});
  }
  ASSERT_TRUE(ValidateConfig(config).ok());
  auto created = Gateway::Create(config);  // not started: nothing is sent anywhere
  ASSERT_TRUE(created.ok());
  Gateway& g = **created;
  Rng rng(20260130);
  std::vector<PrefixKey> keys(10'000);
  for (auto& k : keys) k = PrefixKey{rng.Next(), rng.Next()};
  const std::vector<std::string> base = Homes(g, keys);

  ASSERT_TRUE(g.AddInstance(InstanceConfig{"i7", "http://127.0.0.1:9007"}).ok());
  const std::vector<std::string> added = Homes(g, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (added[i] != base[i]) {
      ASSERT_EQ(added[i], "i7") << "key " << i << " moved between old instances";
    }
  }
  const double add_fraction = MovedFraction(base, added);
  ASSERT_TRUE(g.RemoveInstance("i7").ok());
  EXPECT_EQ(Homes(g, keys), base);  // the newcomer's keys go back where they were

  ASSERT_TRUE(g.RemoveInstance("i3").ok());
  const std::vector<std::string> removed = Homes(g, keys);
  size_t on_i3 = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    on_i3 += base[i] == "i3";
    ASSERT_EQ(removed[i] != base[i], base[i] == "i3") << "key " << i;
  }
  const double remove_fraction = MovedFraction(base, removed);
  ASSERT_TRUE(g.AddInstance(InstanceConfig{"i3", "http://127.0.0.1:9003"}).ok());
  EXPECT_EQ(Homes(g, keys), base);

  ASSERT_TRUE(g.SetDrained("i5", true).ok());
  const std::vector<std::string> drained = Homes(g, keys);
  size_t on_i5 = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    on_i5 += base[i] == "i5";
    ASSERT_EQ(drained[i] != base[i], base[i] == "i5") << "key " << i;
  }
  const double drain_fraction = MovedFraction(base, drained);
  ASSERT_TRUE(g.SetDrained("i5", false).ok());
  EXPECT_EQ(Homes(g, keys), base);

  // Binomial spread over 10,000 keys is about 0.0035: 4 standard deviations either way.
  EXPECT_NEAR(add_fraction, 1.0 / 8, 0.014);
  EXPECT_NEAR(remove_fraction, 1.0 / 7, 0.015);
  EXPECT_DOUBLE_EQ(remove_fraction, static_cast<double>(on_i3) / keys.size());
  EXPECT_DOUBLE_EQ(drain_fraction, static_cast<double>(on_i5) / keys.size());
  std::printf(
      "[ placement ] 7 instances, %zu random keys, prefix-aware: add 1 -> %.4f moved (ideal 1/8 = "
      "0.1250), remove 1 -> %.4f moved (ideal 1/7 = 0.1429; exactly its keys), drain 1 -> %.4f "
      "moved (exactly its keys; ideal 1/7), undrain -> all back\n",
      keys.size(), add_fraction, remove_fraction, drain_fraction);
}

}  // namespace
}  // namespace prefix_router::gateway
