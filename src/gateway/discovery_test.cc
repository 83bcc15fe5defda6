// Tests of discovery (gateway/discovery.h): parsing /v1/models answers and hosts files, the
// configuration's discovery fields, and on loopback a gateway that learns served names from
// fake upstreams and instances from a test resolver whose answers change. Discovery rounds are
// asked for (RequestDiscovery) and waited on, so no test depends on an interval.
#include "gateway/discovery.h"
#include "http/tls.h"
#include "testing/test_pki.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gateway/admin.h"
#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"
#include "testing/fake_upstream.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

using namespace std::chrono_literals;
using namespace prefix_router::gateway::testing;
using pt::ClientResponse;
using pt::Eventually;

// ------------------------------------------------------------------------- pure helpers

// vLLM's list: a base model and LoRA adapters (entries with `parent`), all served names.
TEST(ParseModelListTest, TakesEveryIdIncludingAdapters) {
  auto r = ParseModelList(R"({"object":"list","data":[
      {"id":"meta-llama/Llama-3-8B","object":"model","root":"meta-llama/Llama-3-8B","parent":null},
      {"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"meta-llama/Llama-3-8B"},
      {"id":"chat-lora","object":"model","parent":"meta-llama/Llama-3-8B"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->names, (std::vector<std::string>{"chat-lora", "meta-llama/Llama-3-8B", "sql-lora"}));
  EXPECT_EQ(r->invalid, 0u);
  EXPECT_FALSE(r->truncated);
}

// Ids that are not valid served names are left out and counted; duplicates count once.
TEST(ParseModelListTest, InvalidIdsAreSkippedAndDuplicatesMerged) {
  auto r = ParseModelList(R"({"data":[{"id":"a"},{"id":""},{"id":42},{"name":"x"},{"id":"a"},)"
                          R"({"id":")" +
                          std::string(kMaxServedNameBytes + 1, 'x') + R"("},{"id":"b\u00e9"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->names, (std::vector<std::string>{"a", "b\xc3\xa9"}));
  EXPECT_EQ(r->invalid, 4u);
}

// At most kMaxServedNames names; the rest are dropped and the list says so.
TEST(ParseModelListTest, BoundedToMaxServedNames) {
  std::string body = R"({"data":[)";
  for (size_t i = 0; i < kMaxServedNames + 10; ++i) {
    if (i) body += ',';
    body += R"({"id":"m)" + std::to_string(i) + "\"}";
  }
  body += "]}";
  auto r = ParseModelList(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->names.size(), kMaxServedNames);
  EXPECT_TRUE(r->truncated);
}

// A body that is not the list shape is an error, not an empty list.
TEST(ParseModelListTest, WrongShapesAreErrors) {
  EXPECT_FALSE(ParseModelList("<html>oops</html>").ok());
  EXPECT_FALSE(ParseModelList(R"({"object":"list"})").ok());
  EXPECT_FALSE(ParseModelList(R"({"data":{"id":"a"}})").ok());
  auto empty = ParseModelList(R"({"data":[]})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->names.empty());
}

// Each entry is kept as the engine sent it (every member, minified), the first one per id; an
// `instances` member the engine sent is left out (the gateway's /v1/models sets its own).
TEST(ParseModelListTest, KeepsEachEntryAsSent) {
  auto r = ParseModelList(R"({"data":[
      {"id":"base", "object":"model", "created":1700000000, "max_model_len":8192, "parent":null,
       "permission":[{"id":"p1","allow_sampling":true}], "instances":"theirs"},
      {"id":"base", "max_model_len":1},
      {"id":"lora", "parent":"base", "root":"/adapters/lora"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->entries->size(), 2u);
  EXPECT_EQ(r->entries->at("base"),
            R"({"id":"base","object":"model","created":1700000000,"max_model_len":8192,"parent":null,)"
            R"("permission":[{"id":"p1","allow_sampling":true}]})");
  EXPECT_EQ(r->entries->at("lora"), R"({"id":"lora","parent":"base","root":"/adapters/lora"})");
}

// hosts(5): address then names and aliases, comments, any case, IPv6, junk lines skipped.
TEST(HostsFileTest, FindsEveryAddressOfAName) {
  const std::string text =
      "# a comment naming llm.test\n"
      "127.0.0.1 localhost\n"
      "10.0.0.5   llm.test  llm   # primary\n"
      "10.0.0.6\tother LLM.Test\n"
      "fd00::7 llm.test\n"
      "not-an-address llm.test\n"
      "10.0.0.5 llm.test\n"
      "10.0.0.8\n";
  EXPECT_EQ(AddressesInHosts(text, "llm.test"), (std::vector<std::string>{"10.0.0.5", "10.0.0.6", "fd00::7"}));
  EXPECT_EQ(AddressesInHosts(text, "llm"), (std::vector<std::string>{"10.0.0.5"}));
  EXPECT_TRUE(AddressesInHosts(text, "missing").empty());
}

TEST(HostsFileTest, FormatAddressBracketsIPv6) {
  EXPECT_EQ(FormatAddress({"10.0.0.5", 8000}), "10.0.0.5:8000");
  EXPECT_EQ(FormatAddress({"::1", 80}), "[::1]:80");
}

// ------------------------------------------------------------------------ configuration

void ExpectError(const std::string& yaml, const std::string& part) {
  const Status s = ValidateYaml(yaml);
  EXPECT_FALSE(s.ok()) << yaml;
  EXPECT_NE(s.message().find(part), std::string::npos) << "yaml: " << yaml << "\nmessage: " << s.message();
}

// Defaults: model discovery on for instances without `models` (a configured list stays the
// list), no DNS discovery; every field is read.
TEST(DiscoveryConfigTest, DefaultsAndFields) {
  GatewayConfig c;
  ASSERT_TRUE(
      ValidateYaml("instances: [{url: 'http://127.0.0.1:8001'}, {url: 'http://127.0.0.1:8002', models: [m]}]\n", &c)
          .ok());
  EXPECT_FALSE(c.discovery.models.has_value());
  EXPECT_TRUE(DiscoversModels(c.instances[0], c.discovery));
  EXPECT_FALSE(DiscoversModels(c.instances[1], c.discovery));
  EXPECT_EQ(c.discovery.models_interval, 30);
  EXPECT_EQ(c.discovery.resolve_interval, 30);
  EXPECT_TRUE(c.discovery.hosts_file.empty());
  EXPECT_FALSE(c.instances[0].discover_models.has_value());
  EXPECT_EQ(c.instances[0].resolve, ResolveMode::kNone);

  const Status s = ValidateYaml(
      "discovery: {models: false, models_interval: 5, resolve_interval: 2.5, hosts_file: /etc/hosts}\n"
      "instances:\n"
      "  - {url: 'http://llm.internal:8000', resolve: all, discover_models: false}\n"
      "  - {url: 'http://127.0.0.1:8001', resolve: none}\n",
      &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.discovery.models, std::optional<bool>(false));
  EXPECT_FALSE(DiscoversModels(c.instances[1], c.discovery));
  EXPECT_EQ(c.discovery.models_interval, 5);
  EXPECT_EQ(c.discovery.resolve_interval, 2.5);
  EXPECT_EQ(c.discovery.hosts_file, "/etc/hosts");
  EXPECT_EQ(c.instances[0].resolve, ResolveMode::kAll);
  EXPECT_EQ(c.instances[0].discover_models, std::optional<bool>(false));
  EXPECT_EQ(c.instances[1].resolve, ResolveMode::kNone);
}

// Every new field's errors name the field and the allowed values or range.
TEST(DiscoveryConfigTest, ErrorsNameTheField) {
  const std::string one = "instances: [{url: 'http://127.0.0.1:8001'}]\n";
  ExpectError(one + "discovery: {models_interval: 0}\n",
              "discovery.models_interval: 0 is outside the allowed range [1, 86400]");
  ExpectError(one + "discovery: {models_interval: 90000}\n", "discovery.models_interval: 90000");
  ExpectError(one + "discovery: {resolve_interval: 0.5}\n",
              "discovery.resolve_interval: 0.5 is outside the allowed range [1, 86400]");
  ExpectError(one + "discovery: {models: maybe}\n", "discovery.models");
  ExpectError(one + "discovery: {hosts_file: /nonexistent/hosts}\n",
              "discovery.hosts_file: '/nonexistent/hosts' cannot be opened");
  ExpectError(one + "discovery: {dns: 1}\n", "discovery.dns: unknown field");
  ExpectError("instances: [{url: 'http://llm:8001', resolve: some}]\n",
              "instances[0].resolve: 'some' is not one of none, all");
  ExpectError("instances: [{url: 'http://llm:8001', discover_models: sometimes}]\n", "instances[0].discover_models");
  ExpectError("instances: [{url: 'http://10.0.0.1:8001', resolve: all}]\n",
              "instances[0].resolve: 'all' needs a DNS name in url, not the address '10.0.0.1'");
  ExpectError("instances: [{url: 'http://[::1]:8001', resolve: all}]\n",
              "instances[0].resolve: 'all' needs a DNS name");
  ExpectError("instances: [{url: 'http://llm:8001', resolve: all}, {name: 'x@y', url: 'http://127.0.0.1:1'}]\n",
              "instances[1].name: 'x@y' must not contain '@'");
  // Without resolve: all, '@' in a name stays allowed (as before).
  EXPECT_TRUE(ValidateYaml("instances: [{name: 'x@y', url: 'http://127.0.0.1:1'}]\n").ok());
  std::string many = "instances: [{url: 'http://127.0.0.1:1', models: [";
  for (size_t i = 0; i <= kMaxServedNames; ++i) many += (i ? ",m" : "m") + std::to_string(i);
  ExpectError(many + "]}]\n", "instances[0].models: 1025 is outside the allowed range 0..1024");
  ExpectError(
      "instances: [{url: 'http://127.0.0.1:1', models: ['" + std::string(kMaxServedNameBytes + 1, 'x') + "']}]\n",
      "instances[0].models[0]: longer than 1024 bytes");
}

// The discovery section is read at start: a reload that changes it names it.
TEST(DiscoveryConfigTest, RestartRequiredNamesDiscoveryFields) {
  GatewayConfig a;
  GatewayConfig b;
  b.discovery.models = false;
  b.discovery.models_interval = 10;
  b.discovery.resolve_interval = 10;
  b.discovery.hosts_file = "/etc/hosts";
  EXPECT_EQ(RestartRequired(a, b), (std::vector<std::string>{"discovery.models", "discovery.models_interval",
                                                             "discovery.resolve_interval", "discovery.hosts_file"}));
}

// -------------------------------------------------------------------- loopback helpers

// Asks for a discovery round and waits until one that started afterwards has been applied.
bool Discover(Gateway& g) {
  const uint64_t ticket = g.RequestDiscovery();
  return Eventually([&] { return g.discovery_rounds_done() >= ticket; }, 10s);
}

std::string InstanceFor(uint16_t port, const std::string& model, const std::string& key = "k") {
  const ClientResponse r = pt::Post(port, kChat, ChatBody(model, "hello", key));
  if (r.status() != 200) return "status " + std::to_string(r.status()) + " " + ErrorCode(r.body());
  return r.Header(kInstance);
}

// The `data` of GET /v1/models by id (each entry's JSON text), and its raw body.
std::map<std::string, std::string> GatewayModelEntries(uint16_t port, std::string* raw = nullptr) {
  const ClientResponse r = pt::Get(port, "/v1/models");
  if (raw) *raw = r.body();
  std::map<std::string, std::string> out;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::array data;
  if (parser.parse(r.body()).get(doc) || doc["data"].get(data)) return out;
  for (auto e : data) {
    std::string_view id;
    if (!e["id"].get(id)) out.emplace(id, simdjson::minify(e));
  }
  return out;
}

std::set<std::string> GatewayModels(uint16_t port) {
  std::set<std::string> out;
  for (const auto& [id, entry] : GatewayModelEntries(port)) out.insert(id);
  return out;
}

std::set<std::string> InstanceNames(const Gateway& g) {
  std::set<std::string> out;
  for (const auto& v : g.Instances()) out.insert(v.name);
  return out;
}

// Intervals far longer than any test: rounds happen when a test asks for them (and once at
// start).
GatewayConfig TestConfig(const Fakes& fakes) {
  GatewayConfig c = ConfigFor(fakes);
  c.discovery.models_interval = 3600;
  c.discovery.resolve_interval = 3600;
  return c;
}

// --------------------------------------------------------------------- served names

// A LoRA adapter loaded at run time gets traffic after the next poll, and none once unloaded;
// the gateway's /v1/models follows; one info line names the instance and the names.
TEST(ModelDiscoveryTest, AdapterLoadedThenUnloaded) {
  QuietLogs();
  Fakes fakes = StartFakes({"a", "b"});
  fakes[0]->SetModels({"base"});
  GatewayConfig c = TestConfig(fakes);
  c.instances[0].discover_models = true;
  c.instances[1].models = {"base"};
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceFor(g->port(), "sql-lora"), "status 404 model_not_found");
  EXPECT_EQ(GatewayModels(g->port()), (std::set<std::string>{"base"}));

  LogCapture logs;
  fakes[0]->SetModels({"base", "sql-lora<base"});
  ASSERT_TRUE(Discover(*g));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(InstanceFor(g->port(), "sql-lora", "k" + std::to_string(i)), "a");
  EXPECT_EQ(GatewayModels(g->port()), (std::set<std::string>{"base", "sql-lora"}));
  EXPECT_EQ(g->Instances()[0].models, (std::vector<std::string>{"base", "sql-lora"}));
  EXPECT_EQ(logs.Count("served names discovered"), 1u) << logs.text();
  EXPECT_NE(logs.text().find("added=sql-lora"), std::string::npos) << logs.text();

  fakes[0]->SetModels({"base"});
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceFor(g->port(), "sql-lora"), "status 404 model_not_found");
  EXPECT_EQ(GatewayModels(g->port()), (std::set<std::string>{"base"}));
  EXPECT_NE(logs.text().find("removed=sql-lora"), std::string::npos) << logs.text();
  // The base model stays on both.
  std::set<std::string> seen;
  for (int i = 0; i < 40; ++i) seen.insert(InstanceFor(g->port(), "base", "b" + std::to_string(i)));
  EXPECT_EQ(seen, (std::set<std::string>{"a", "b"}));
}

// The poll carries the instance's upstream credential, as its traffic and health checks do.
TEST(ModelDiscoveryTest, PollCarriesTheInstanceCredential) {
  QuietLogs();
  Fakes fakes = StartFakes({"a"});
  fakes[0]->SetModels({"base"});
  ::setenv("PR_DISCOVERY_TEST_AUTH", "Bearer poll-secret-1", 1);
  GatewayConfig c = TestConfig(fakes);
  c.instances[0].discover_models = true;
  c.instances[0].authorization_env = "PR_DISCOVERY_TEST_AUTH";
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(Discover(*g));
  EXPECT_GE(fakes[0]->models_requests(), 1);
  EXPECT_EQ(fakes[0]->models_authorization(), "Bearer poll-secret-1");
  EXPECT_EQ(InstanceFor(g->port(), "base"), "a");
  ::unsetenv("PR_DISCOVERY_TEST_AUTH");
}

// A failed poll (error status, then a body that is not the list) keeps the last list, and is
// logged once, not at every poll; recovery is logged once too.
TEST(ModelDiscoveryTest, FailedPollKeepsTheLastList) {
  QuietLogs();
  Fakes fakes = StartFakes({"a"});
  fakes[0]->SetModels({"base", "lora-1<base"});
  GatewayConfig c = TestConfig(fakes);
  c.discovery.models = true;  // the global default
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(Discover(*g));
  ASSERT_EQ(InstanceFor(g->port(), "lora-1"), "a");

  LogCapture logs;
  fakes[0]->SetModelsAnswer(500, R"({"error":"boom"})");
  const int polls = fakes[0]->models_requests();
  ASSERT_TRUE(Discover(*g));
  ASSERT_TRUE(Discover(*g));
  EXPECT_GE(fakes[0]->models_requests(), polls + 2);
  EXPECT_EQ(InstanceFor(g->port(), "lora-1"), "a");
  fakes[0]->SetModelsAnswer(200, "<html>not json</html>");
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceFor(g->port(), "lora-1"), "a");
  EXPECT_EQ(GatewayModels(g->port()), (std::set<std::string>{"base", "lora-1"}));
  EXPECT_EQ(logs.Count("model discovery failed"), 1u) << logs.text();

  fakes[0]->SetModels({"base"});
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(logs.Count("model discovery works again"), 1u) << logs.text();
  EXPECT_EQ(InstanceFor(g->port(), "lora-1"), "status 404 model_not_found");
}

// Never polled successfully: configured models are the list meanwhile; with none configured the
// instance gets no named traffic (it might not serve it), rather than every name.
TEST(ModelDiscoveryTest, NeverPolledServesConfiguredOrNothing) {
  QuietLogs();
  Fakes fakes = StartFakes({"a", "b", "c"});
  for (auto& f : fakes) f->SetModelsAnswer(503, "{}");
  GatewayConfig c = TestConfig(fakes);
  c.instances[0].discover_models = true;  // nothing configured
  c.instances[1].discover_models = true;
  c.instances[1].models = {"base"};   // the initial list
  c.instances[2].models = {"other"};  // no discovery
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(Discover(*g));
  std::set<std::string> seen;
  for (int i = 0; i < 20; ++i) seen.insert(InstanceFor(g->port(), "base", "k" + std::to_string(i)));
  EXPECT_EQ(seen, (std::set<std::string>{"b"}));
  EXPECT_EQ(InstanceFor(g->port(), "anything"), "status 404 model_not_found");
  EXPECT_EQ(fakes[0]->requests(), 0);
  EXPECT_EQ(GatewayModels(g->port()), (std::set<std::string>{"base", "other"}));

  // The first successful poll replaces the configured list.
  fakes[1]->SetModels({"base-v2"});
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceFor(g->port(), "base"), "status 404 model_not_found");
  EXPECT_EQ(InstanceFor(g->port(), "base-v2"), "b");
}

// Bare instances (no discovery field anywhere, as `serve --instance URL` makes them) serve the
// names their engines list, adapters loaded at run time included; an unknown name is the
// gateway's own 404, no engine asked.
TEST(ModelDiscoveryTest, BareInstancesDiscoverByDefault) {
  QuietLogs();
  Fakes fakes = StartFakes({"a", "b"});
  fakes[0]->SetModels({"base", "sql-lora<base"});
  fakes[1]->SetModels({"base"});
  GatewayConfig c = TestConfig(fakes);  // models_interval only: discovery fields left alone
  ASSERT_FALSE(c.instances[0].discover_models.has_value());
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  // No Discover(): the first poll runs at start, and GET /v1/models waits for it.
  EXPECT_EQ(GatewayModels(g->port()), (std::set<std::string>{"base", "sql-lora"}));

  const ClientResponse r = pt::Post(g->port(), kChat, ChatBody("no-such-model", "hello"));
  EXPECT_EQ(r.status(), 404);
  EXPECT_EQ(ErrorCode(r.body()), "model_not_found") << r.body();
  EXPECT_EQ(r.Header("x-prefix-router-decision"), "");  // the gateway answered, not an engine
  EXPECT_EQ(r.Header(kInstance), "");
  EXPECT_EQ(TotalRequests(fakes), 0);

  for (int i = 0; i < 5; ++i) EXPECT_EQ(InstanceFor(g->port(), "sql-lora", "k" + std::to_string(i)), "a");
  fakes[1]->SetModels({"base", "chat-lora<base"});  // loaded at run time
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceFor(g->port(), "chat-lora"), "b");
  EXPECT_EQ(GatewayModels(g->port()), (std::set<std::string>{"base", "chat-lora", "sql-lora"}));
}

// A request that arrives before the first poll has answered waits for it (bounded by
// health.timeout): it is neither refused nor sent to an instance that does not serve it.
TEST(ModelDiscoveryTest, RequestsBeforeTheFirstPollWaitForIt) {
  QuietLogs();
  Fakes fakes = StartFakes({"a", "b"});
  fakes[0]->SetModels({"m1"});
  fakes[1]->SetModels({"m2"});
  for (auto& f : fakes) f->SetModelsDelay(300ms);
  auto g = StartGateway(TestConfig(fakes));
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(InstanceFor(g->port(), "m2", "first"), "b");
  EXPECT_EQ(InstanceFor(g->port(), "m1", "second"), "a");
  EXPECT_EQ(InstanceFor(g->port(), "m3"), "status 404 model_not_found");
}

// An instance without a usable /v1/models (404, or an answer that is not the list) serves every
// name, as without discovery, and says so once, not at every poll; the others serve their lists.
TEST(ModelDiscoveryTest, InstanceWithoutModelsServesEveryNameWithOneWarning) {
  QuietLogs();
  Fakes fakes = StartFakes({"a", "b", "c"});
  // a: unset, the fake answers 404 (a native /invocations container).
  fakes[1]->SetModelsAnswer(200, R"({"predictions":[]})");
  fakes[2]->SetModels({"base"});
  LogCapture logs;
  auto g = StartGateway(TestConfig(fakes));
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(Discover(*g));
  ASSERT_TRUE(Discover(*g));
  EXPECT_GE(fakes[0]->models_requests(), 2);  // polled again (the start round may be the first Discover's)
  EXPECT_EQ(logs.Count("no usable /v1/models; the instance serves every name"), 2u) << logs.text();
  EXPECT_NE(logs.text().find("instance=a"), std::string::npos) << logs.text();
  EXPECT_NE(logs.text().find("instance=b"), std::string::npos) << logs.text();
  EXPECT_EQ(logs.Count("model discovery failed"), 0u) << logs.text();

  std::set<std::string> other;
  std::set<std::string> base;
  for (int i = 0; i < 40; ++i) {
    other.insert(InstanceFor(g->port(), "anything", "k" + std::to_string(i)));
    base.insert(InstanceFor(g->port(), "base", "k" + std::to_string(i)));
  }
  EXPECT_EQ(other, (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(base, (std::set<std::string>{"a", "b", "c"}));
  auto entries = GatewayModelEntries(g->port());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_NE(entries["base"].find(R"("instances":["a","b","c"])"), std::string::npos) << entries["base"];
}

// GET /v1/models keeps each engine entry as the engine sent it and adds the instances serving
// the id; an id listed differently by two instances takes the first instance's entry in
// configuration order; a name known from configuration only gets a synthesized entry.
TEST(ModelDiscoveryTest, ModelsKeepTheEnginesFieldsAndNameTheInstances) {
  QuietLogs();
  Fakes fakes = StartFakes({"a", "b", "c"});
  fakes[0]->SetModelsAnswer(200, R"({"object":"list","data":[
      {"id":"base","object":"model","created":1700000000,"owned_by":"vllm","root":"/models/base",
       "parent":null,"max_model_len":8192,"permission":[{"id":"modelperm-1","allow_sampling":true}],
       "instances":"the engine's own"},
      {"id":"sql-lora","object":"model","created":1700000001,"owned_by":"vllm","root":"/adapters/sql",
       "parent":"base","max_model_len":8192}]})");
  fakes[1]->SetModelsAnswer(200, R"({"object":"list","data":[
      {"id":"base","object":"model","created":1600000000,"owned_by":"sglang","root":"base",
       "parent":null,"max_model_len":4096}]})");
  GatewayConfig c = TestConfig(fakes);
  c.instances[2].discover_models = false;
  c.instances[2].models = {"configured-only"};
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  std::string raw;
  auto entries = GatewayModelEntries(g->port(), &raw);
  ASSERT_EQ(entries.size(), 3u) << raw;
  EXPECT_EQ(entries["base"],
            R"({"id":"base","object":"model","created":1700000000,"owned_by":"vllm","root":"/models/base",)"
            R"("parent":null,"max_model_len":8192,"permission":[{"id":"modelperm-1","allow_sampling":true}],)"
            R"("instances":["a","b"]})");
  EXPECT_EQ(entries["sql-lora"],
            R"({"id":"sql-lora","object":"model","created":1700000001,"owned_by":"vllm","root":"/adapters/sql",)"
            R"("parent":"base","max_model_len":8192,"instances":["a"]})");
  EXPECT_EQ(entries["configured-only"],
            R"({"id":"configured-only","object":"model","created":0,"owned_by":"prefix-router","instances":["c"]})");
  size_t members = 0;  // one `instances` per entry: the engine's own was not passed on
  for (size_t at = raw.find("\"instances\""); at != std::string::npos; at = raw.find("\"instances\"", at + 1))
    ++members;
  EXPECT_EQ(members, 3u) << raw;

  // Configuration order decides, not which poll answered first.
  GatewayConfig reversed = c;
  std::swap(reversed.instances[0], reversed.instances[1]);
  g.reset();
  g = StartGateway(reversed);
  ASSERT_NE(g, nullptr);
  entries = GatewayModelEntries(g->port());
  EXPECT_NE(entries["base"].find(R"("max_model_len":4096)"), std::string::npos) << entries["base"];
  EXPECT_NE(entries["base"].find(R"("instances":["b","a"])"), std::string::npos) << entries["base"];
}

// Reload and admin changes keep discovered names of the instances they keep; the pool's policy
// (what it learned) carries over a discovery change.
TEST(ModelDiscoveryTest, ReloadKeepsDiscoveredNames) {
  QuietLogs();
  Fakes fakes = StartFakes({"a", "b"});
  fakes[0]->SetModels({"base", "lora-1<base"});
  GatewayConfig c = TestConfig(fakes);
  c.routing = PlainPrefixAware();
  c.instances[0].discover_models = true;
  c.instances[0].models = {"base"};
  c.instances[1].models = {"base"};
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  auto* policy = g->routing()->default_pool.policy.get();
  ASSERT_TRUE(Discover(*g));
  ASSERT_EQ(InstanceFor(g->port(), "lora-1"), "a");
  EXPECT_EQ(g->routing()->default_pool.policy.get(), policy);

  GatewayConfig next = c;
  ASSERT_TRUE(ValidateConfig(next).ok());
  const ReloadReport report = g->Reload(next, "test");
  EXPECT_TRUE(report.restart_required.empty());
  EXPECT_EQ(InstanceFor(g->port(), "lora-1"), "a");

  auto removed = g->RemoveInstance("b");
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(InstanceFor(g->port(), "lora-1"), "a");
  EXPECT_EQ(InstanceFor(g->port(), "base"), "a");
}

// --------------------------------------------------------------------------- DNS

constexpr char kHost[] = "llm.test";

// A template `resolve: all` instance in front of `fakes` (all on 127.0.0.1, told apart by port).
GatewayConfig ResolvedConfig(const Fakes& fakes) {
  GatewayConfig c = TestConfig(fakes);
  c.instances.clear();
  InstanceConfig t;
  t.name = "vllm";
  t.url = std::string("http://") + kHost + ":8000";
  t.resolve = ResolveMode::kAll;
  c.instances.push_back(t);
  c.routing = PlainPrefixAware();
  return c;
}

std::vector<ResolvedAddress> Endpoints(const Fakes& fakes, std::initializer_list<int> which) {
  std::vector<ResolvedAddress> out;
  for (int i : which) out.push_back({"127.0.0.1", fakes[i]->port()});
  return out;
}

std::string Derived(const pt::FakeUpstream& f) { return "vllm@127.0.0.1:" + std::to_string(f.port()); }

std::unique_ptr<Gateway> StartResolved(GatewayConfig config, std::shared_ptr<Resolver> resolver) {
  if (Status s = ValidateConfig(config); !s.ok()) {
    ADD_FAILURE() << s.ToString();
    return nullptr;
  }
  auto created = Gateway::Create(std::move(config), std::move(resolver));
  if (!created.ok()) {
    ADD_FAILURE() << created.status().ToString();
    return nullptr;
  }
  if (Status s = (*created)->Start(); !s.ok()) {
    ADD_FAILURE() << s.ToString();
    return nullptr;
  }
  return std::move(*created);
}

// Where each of `keys` goes (its first choice: nothing is loaded).
std::map<std::string, std::string> Placement(uint16_t port, int keys) {
  std::map<std::string, std::string> out;
  for (int i = 0; i < keys; ++i) {
    const std::string key = "key-" + std::to_string(i);
    out[key] = InstanceFor(port, "m", key);
  }
  return out;
}

// An https template: each address is verified against the name in the url (the certificate
// names the service, not its addresses), and is sent that name as SNI.
TEST(DnsDiscoveryTest, HttpsAddressesAreVerifiedAgainstTheName) {
  QuietLogs();
  pt::TestPki pki("discovery-ca");
  ASSERT_TRUE(pki.ok());
  auto cert = pki.Issue(kHost, 7, std::string("DNS:") + kHost);  // no IP address in it
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  auto tls = http::MakeServerTlsContext(cert->cert, cert->key, "test");
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  auto upstream = std::make_unique<pt::FakeUpstream>("f0");
  ASSERT_TRUE(upstream->Start(0, *tls).ok());
  Fakes fakes;
  fakes.push_back(std::move(upstream));
  auto resolver = std::make_shared<FixedResolver>();
  resolver->Set(kHost, Endpoints(fakes, {0}));
  GatewayConfig c = ResolvedConfig(fakes);
  c.instances[0].url = std::string("https://") + kHost + ":8000";
  c.upstream_tls.ca_file = pki.ca_file();
  auto g = StartResolved(c, resolver);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(InstanceNames(*g), (std::set<std::string>{Derived(*fakes[0])}));
  EXPECT_EQ(InstanceFor(g->port(), "m"), Derived(*fakes[0]));
}

// 2 then 3 then 2 addresses: instances are added and removed, keys of unchanged addresses keep
// their instance (only keys the new instance wins move, and they come back when it goes).
TEST(DnsDiscoveryTest, AddressesComeAndGoWithStablePlacement) {
  QuietLogs();
  Fakes fakes = StartFakes({"f0", "f1", "f2"});
  auto resolver = std::make_shared<FixedResolver>();
  resolver->Set(kHost, Endpoints(fakes, {0, 1}));
  auto g = StartResolved(ResolvedConfig(fakes), resolver);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(InstanceNames(*g), (std::set<std::string>{Derived(*fakes[0]), Derived(*fakes[1])}));
  const auto two = Placement(g->port(), 200);
  std::set<std::string> used;
  for (const auto& [k, i] : two) used.insert(i);
  ASSERT_EQ(used, (std::set<std::string>{Derived(*fakes[0]), Derived(*fakes[1])}));

  LogCapture logs;
  resolver->Set(kHost, Endpoints(fakes, {2, 0, 1}));
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(g->Instances().size(), 3u);
  const auto three = Placement(g->port(), 200);
  int moved = 0;
  for (const auto& [key, was] : two) {
    const std::string& now = three.at(key);
    if (now != was) {
      ++moved;
      EXPECT_EQ(now, Derived(*fakes[2])) << key << " moved between unchanged addresses";
    }
  }
  EXPECT_GT(moved, 20);  // about a third of the keys go to the new address
  EXPECT_LT(moved, 120);
  EXPECT_NE(logs.text().find("instances resolved"), std::string::npos) << logs.text();
  EXPECT_NE(logs.text().find("added=127.0.0.1:" + std::to_string(fakes[2]->port())), std::string::npos) << logs.text();

  resolver->Set(kHost, Endpoints(fakes, {0, 1}));
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceNames(*g), (std::set<std::string>{Derived(*fakes[0]), Derived(*fakes[1])}));
  EXPECT_EQ(Placement(g->port(), 200), two);
  // Requests carry the name the operator wrote as Host.
  const auto received = fakes[0]->received();
  ASSERT_FALSE(received.empty());
  EXPECT_EQ(received.back().Header("Host"), "llm.test:8000");
}

// A removed address's requests in flight finish there; new ones go elsewhere.
TEST(DnsDiscoveryTest, RemovedAddressFinishesItsRequests) {
  QuietLogs();
  Fakes fakes = StartFakes({"f0", "f1"});
  fakes[1]->SetBehavior(SseStream(6, 100ms));
  auto resolver = std::make_shared<FixedResolver>();
  resolver->Set(kHost, Endpoints(fakes, {0, 1}));
  GatewayConfig c = ResolvedConfig(fakes);
  c.routing.strategy = Strategy::kRoundRobin;
  auto g = StartResolved(c, resolver);
  ASSERT_NE(g, nullptr);

  std::vector<pt::StreamedResponse> streams(2);
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&, i] {
      pt::HttpClient client(g->port());
      client.Send(JsonRequest(kChat, ChatBody("m", "stream " + std::to_string(i), "", true)));
      streams[i] = client.ReadStreamed();
    });
  }
  // One of the two is streaming from f1 (round-robin over two instances).
  ASSERT_TRUE(Eventually([&] { return fakes[1]->in_progress() == 1; }));
  resolver->Set(kHost, Endpoints(fakes, {0}));
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceNames(*g), (std::set<std::string>{Derived(*fakes[0])}));
  for (auto& t : clients) t.join();
  int from_f1 = 0;
  for (const auto& s : streams) {
    EXPECT_TRUE(s.complete) << s.error.message();
    EXPECT_EQ(s.status, 200);
    if (s.Header(kInstance) == Derived(*fakes[1])) {
      ++from_f1;
      EXPECT_EQ(s.body, Concat(SseStream(6, 0ms).chunks));
    }
  }
  EXPECT_EQ(from_f1, 1);
  EXPECT_EQ(fakes[1]->aborted(), 0);
  const int f1_before = fakes[1]->requests();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(InstanceFor(g->port(), "m", "after" + std::to_string(i)), Derived(*fakes[0]));
  EXPECT_EQ(fakes[1]->requests(), f1_before);
}

// An empty answer or a failed resolution keeps the set (never removes everything), logged once.
TEST(DnsDiscoveryTest, EmptyOrFailedResolutionKeepsTheSet) {
  QuietLogs();
  Fakes fakes = StartFakes({"f0", "f1"});
  auto resolver = std::make_shared<FixedResolver>();
  resolver->Set(kHost, Endpoints(fakes, {0, 1}));
  auto g = StartResolved(ResolvedConfig(fakes), resolver);
  ASSERT_NE(g, nullptr);
  const auto names = InstanceNames(*g);
  ASSERT_EQ(names.size(), 2u);

  LogCapture logs;
  resolver->Set(kHost, {});
  const int calls = resolver->calls();
  ASSERT_TRUE(Discover(*g));
  EXPECT_GT(resolver->calls(), calls);
  EXPECT_EQ(InstanceNames(*g), names);
  resolver->Fail(kHost, "SERVFAIL");
  ASSERT_TRUE(Discover(*g));
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceNames(*g), names);
  EXPECT_EQ(logs.Count("resolution failed"), 1u) << logs.text();
  std::set<std::string> seen;
  for (int i = 0; i < 40; ++i) seen.insert(InstanceFor(g->port(), "m", "k" + std::to_string(i)));
  EXPECT_EQ(seen, names);

  resolver->Set(kHost, Endpoints(fakes, {1}));
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceNames(*g), (std::set<std::string>{Derived(*fakes[1])}));
  EXPECT_EQ(logs.Count("resolution works again"), 1u) << logs.text();
}

// Derived instances show in /health and the admin view; drain takes a derived name; remove of
// a derived name and drain of the template are refused with a reason; a reload keeps them.
TEST(DnsDiscoveryTest, OperationsOnDerivedInstances) {
  QuietLogs();
  Fakes fakes = StartFakes({"f0", "f1", "plain"});
  auto resolver = std::make_shared<FixedResolver>();
  resolver->Set(kHost, Endpoints(fakes, {0, 1}));
  GatewayConfig c = ResolvedConfig(fakes);
  c.instances.push_back(InstanceConfig{"plain", fakes[2]->url()});
  auto g = StartResolved(c, resolver);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(InstanceHealth(g->port(), Derived(*fakes[0])), "up");
  EXPECT_EQ(InstanceHealth(g->port(), Derived(*fakes[1])), "up");

  auto drained = g->SetDrained(Derived(*fakes[0]), true);
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ(InstanceHealth(g->port(), Derived(*fakes[0])), "drained");
  for (int i = 0; i < 20; ++i) EXPECT_NE(InstanceFor(g->port(), "m", "k" + std::to_string(i)), Derived(*fakes[0]));

  auto removed = g->RemoveInstance(Derived(*fakes[1]));
  ASSERT_FALSE(removed.ok());
  EXPECT_EQ(removed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(removed.status().message().find("remove 'vllm'"), std::string::npos) << removed.status().message();
  auto template_drain = g->SetDrained("vllm", true);
  ASSERT_FALSE(template_drain.ok());
  EXPECT_EQ(template_drain.status().code(), StatusCode::kFailedPrecondition);

  // A reload with the same instances keeps the derived ones (and the drain).
  GatewayConfig next = c;
  ASSERT_TRUE(ValidateConfig(next).ok());
  g->Reload(next, "test");
  EXPECT_EQ(g->Instances().size(), 3u);
  EXPECT_EQ(InstanceHealth(g->port(), Derived(*fakes[0])), "drained");

  // Removing the template removes all its instances.
  ASSERT_TRUE(g->RemoveInstance("vllm").ok());
  EXPECT_EQ(InstanceNames(*g), (std::set<std::string>{"plain"}));
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceNames(*g), (std::set<std::string>{"plain"}));
}

// A template added at run time (here by reload) is resolved at once, without waiting for the
// interval.
TEST(DnsDiscoveryTest, TemplateAddedByReloadIsResolved) {
  QuietLogs();
  Fakes fakes = StartFakes({"plain", "f1"});
  auto resolver = std::make_shared<FixedResolver>();
  resolver->Set(kHost, Endpoints(fakes, {1}));
  GatewayConfig c = TestConfig(fakes);
  c.instances.resize(1);
  auto g = StartResolved(c, resolver);
  ASSERT_NE(g, nullptr);
  GatewayConfig next = ResolvedConfig(fakes);
  next.instances.push_back(c.instances[0]);
  ASSERT_TRUE(ValidateConfig(next).ok());
  g->Reload(next, "test");
  EXPECT_TRUE(Eventually([&] { return g->Instances().size() == 2; }));
  EXPECT_EQ(InstanceNames(*g), (std::set<std::string>{Derived(*fakes[1]), "plain"}));
}

// The admin API takes the new fields: a `resolve: all` template (its instances follow its
// resolution, at once) and an instance with discover_models; a bad value is 400 naming the
// field; deleting a derived instance is 409.
TEST(DnsDiscoveryTest, AdminApiTakesDiscoveryFields) {
  QuietLogs();
  namespace bhttp = http::bhttp;
  Fakes fakes = StartFakes({"plain", "f1", "f2"});
  fakes[2]->SetModels({"base", "lora-z<base"});
  auto resolver = std::make_shared<FixedResolver>();
  resolver->Set(kHost, Endpoints(fakes, {1}));
  GatewayConfig c = TestConfig(fakes);
  c.instances.resize(1);
  auto g = StartResolved(c, resolver);
  ASSERT_NE(g, nullptr);
  AdminConfig ac;
  ac.enabled = true;
  ac.listen_host = "127.0.0.1";
  ac.listen_port = 0;
  AdminServer admin(ac, TimeoutsConfig{}, *g, {});
  ASSERT_TRUE(admin.Start().ok());
  auto call = [&](bhttp::verb method, const std::string& target, std::string body = "") {
    return pt::Fetch(admin.port(),
                     pt::MakeRequest(method, target, std::move(body), {{"Content-Type", "application/json"}}));
  };

  ClientResponse r =
      call(bhttp::verb::post, "/admin/instances", R"({"name":"vllm","url":"http://llm.test:8000","resolve":"all"})");
  EXPECT_EQ(r.status(), 201) << r.body();
  EXPECT_TRUE(Eventually([&] { return InstanceNames(*g) == std::set<std::string>{Derived(*fakes[1]), "plain"}; }));

  r = call(bhttp::verb::post, "/admin/instances", R"({"url":"http://llm.test:8001","resolve":"some"})");
  EXPECT_EQ(r.status(), 400);
  EXPECT_NE(r.body().find("resolve: 'some' is not one of none, all"), std::string::npos) << r.body();
  r = call(bhttp::verb::post, "/admin/instances", R"({"url":"http://llm.test:8001","discover_models":"yes"})");
  EXPECT_EQ(r.status(), 400);
  EXPECT_NE(r.body().find("discover_models: expected true or false"), std::string::npos) << r.body();

  r = call(bhttp::verb::post, "/admin/instances",
           R"({"name":"z","url":")" + fakes[2]->url() + R"(","discover_models":true})");
  EXPECT_EQ(r.status(), 201) << r.body();
  EXPECT_TRUE(Eventually([&] { return InstanceFor(g->port(), "lora-z") == "z"; }));

  r = call(bhttp::verb::delete_, "/admin/instances/" + Derived(*fakes[1]));
  EXPECT_EQ(r.status(), 409) << r.body();
  EXPECT_EQ(InstanceNames(*g), (std::set<std::string>{Derived(*fakes[1]), "plain", "z"}));
  admin.Stop();
}

// Stop() ends the discovery loop even while a poll waits on an instance that does not answer.
TEST(ModelDiscoveryTest, StopEndsDiscoveryDuringAHangingPoll) {
  QuietLogs();
  Fakes fakes = StartFakes({"a"});
  pt::Behavior hang;
  hang.fault = pt::Behavior::Fault::kHang;
  hang.hang_for = 30s;
  fakes[0]->SetBehavior(hang);
  fakes[0]->SetModelsOrdinary();  // the poll is an ordinary request: it hangs
  GatewayConfig c = TestConfig(fakes);
  c.instances[0].discover_models = true;
  c.health.timeout = 60;
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 1; }));
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    g->Stop();
    g->Wait();
    stopped = true;
  });
  // Bounded by the drain (1 s) and the server's own 2 s, far below the poll's 60 s timeout.
  EXPECT_TRUE(Eventually([&] { return stopped.load(); }, 20s));
  stopper.join();
  g.reset();  // the abandoned poll's connection closes with the gateway
  EXPECT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 0; }));
}

// Both features at once: each derived instance is polled for its own names.
TEST(DnsDiscoveryTest, DerivedInstancesDiscoverTheirModels) {
  QuietLogs();
  Fakes fakes = StartFakes({"f0", "f1"});
  fakes[0]->SetModels({"base", "lora-a<base"});
  fakes[1]->SetModels({"base", "lora-b<base"});
  auto resolver = std::make_shared<FixedResolver>();
  resolver->Set(kHost, Endpoints(fakes, {0, 1}));
  GatewayConfig c = ResolvedConfig(fakes);
  c.instances[0].discover_models = true;
  auto g = StartResolved(c, resolver);
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(Discover(*g));
  EXPECT_EQ(InstanceFor(g->port(), "lora-a"), Derived(*fakes[0]));
  EXPECT_EQ(InstanceFor(g->port(), "lora-b"), Derived(*fakes[1]));
  EXPECT_EQ(GatewayModels(g->port()), (std::set<std::string>{"base", "lora-a", "lora-b"}));
}

// The hosts file resolver: edits to the file apply at the next resolution.
TEST(DnsDiscoveryTest, HostsFileResolver) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pr_disc_hosts_" + std::to_string(::getpid()))).string();
  std::ofstream(path) << "127.0.0.1 llm.test\n::1 llm.test\n";
  auto resolver = MakeHostsFileResolver(path);
  auto run = [&] {
    http::net::io_context ctx;
    Result<std::vector<ResolvedAddress>> out = Status::Internal("not run");
    http::net::co_spawn(
        ctx, [&]() -> http::net::awaitable<void> { out = co_await resolver->Resolve(kHost, 8000); },
        http::net::detached);
    ctx.run();
    return out;
  };
  auto first = run();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, (std::vector<ResolvedAddress>{{"127.0.0.1", 8000}, {"::1", 8000}}));
  std::ofstream(path, std::ios::trunc) << "# emptied\n";
  auto second = run();
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->empty());
  std::filesystem::remove(path);
  EXPECT_FALSE(run().ok());
}

}  // namespace
}  // namespace prefix_router::gateway
