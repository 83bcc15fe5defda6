#include "gateway/config.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

namespace prefix_router::gateway {
namespace {

GatewayConfig Parse(const std::string& yaml) {
  Result<GatewayConfig> r = ParseConfigYaml(yaml);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : GatewayConfig{};
}

// Expects `s` to be InvalidArgument with every fragment in its message.
void ExpectInvalid(const Status& s, std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(s.ok()) << "expected an error containing " << *fragments.begin();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  for (const std::string& f : fragments) {
    EXPECT_NE(s.message().find(f), std::string::npos) << "'" << f << "' not in: " << s.message();
  }
}

void ExpectParseError(const std::string& yaml, std::initializer_list<std::string> fragments) {
  Result<GatewayConfig> r = ParseConfigYaml(yaml);
  ExpectInvalid(r.status(), fragments);
}

// A configuration that passes validation; tests break one field at a time.
GatewayConfig Valid() {
  GatewayConfig c;
  InstanceConfig a;
  a.url = "http://127.0.0.1:8001";
  c.instances.push_back(a);
  return c;
}

Status ValidateWith(void (*mutate)(GatewayConfig&)) {
  GatewayConfig c = Valid();
  mutate(c);
  return ValidateConfig(c);
}

GatewayConfig Validated(GatewayConfig c) {
  Status s = ValidateConfig(c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

constexpr const char* kFullExample = R"(
listen: 0.0.0.0:9090
io_threads: 4
decision_headers: false
routing:
  routing_strategy: prefix-aware
  prefix_length: 4096
  concurrency_threshold: 16
  spill_mode: least-loaded
  balance_factor: 2.5
  load_measure: prompt-tokens
pools:
  llama-3-70b: {routing_strategy: least-outstanding-requests, prefix_length: 8192}
instances:
  - name: a
    url: http://10.0.0.1:8001/v2/
    weight: 3
    models: [llama-3-70b, my-lora]
  - url: http://gpu-b.internal
limits:
  max_request_body_bytes: 1048576
  max_header_bytes: 16384
timeouts:
  connect: 1.5
  first_byte: 100
  idle: 50
  total: 600
  client_read: 10
  client_write: 20
  client_idle: 30
  drain: 0
retries:
  max_retries: 5
health:
  path: /healthz
  interval: 0.5
  timeout: 0.25
  unhealthy_threshold: 4
  healthy_threshold: 5
  passive_failures: 0
)";

// Every field of the documented shape lands in its struct member.
TEST(ParseConfigYaml, FullExampleParsesToExpectedStruct) {
  GatewayConfig c = Parse(kFullExample);
  EXPECT_EQ(c.listen, "0.0.0.0:9090");
  EXPECT_EQ(c.io_threads, 4u);
  EXPECT_FALSE(c.decision_headers);
  EXPECT_EQ(c.routing.strategy, Strategy::kPrefixAware);
  EXPECT_EQ(c.routing.prefix_length, 4096u);
  EXPECT_EQ(c.routing.concurrency_threshold, 16u);
  EXPECT_EQ(c.routing.spill, SpillMode::kLeastLoaded);
  EXPECT_EQ(c.routing.balance_factor, 2.5);
  EXPECT_EQ(c.routing.load_measure, LoadMeasure::kPromptTokens);
  ASSERT_EQ(c.pools.size(), 1u);
  const RoutingOptions& pool = c.pools.at("llama-3-70b");
  EXPECT_EQ(pool.load_measure, LoadMeasure::kPromptTokens);  // inherited from routing
  EXPECT_EQ(pool.strategy, Strategy::kLeastOutstanding);
  EXPECT_EQ(pool.prefix_length, 8192u);
  EXPECT_EQ(pool.concurrency_threshold, 16u);  // inherited from routing
  EXPECT_EQ(pool.spill, SpillMode::kLeastLoaded);
  EXPECT_EQ(pool.balance_factor, 2.5);  // inherited from routing
  ASSERT_EQ(c.instances.size(), 2u);
  EXPECT_EQ(c.instances[0].name, "a");
  EXPECT_EQ(c.instances[0].url, "http://10.0.0.1:8001/v2/");
  EXPECT_EQ(c.instances[0].weight, 3u);
  EXPECT_EQ(c.instances[0].models, (std::vector<std::string>{"llama-3-70b", "my-lora"}));
  EXPECT_EQ(c.instances[1].name, "");
  EXPECT_EQ(c.instances[1].weight, 1u);
  EXPECT_TRUE(c.instances[1].models.empty());
  EXPECT_EQ(c.max_request_body_bytes, 1048576u);
  EXPECT_EQ(c.max_header_bytes, 16384u);
  EXPECT_EQ(c.timeouts.connect, 1.5);
  EXPECT_EQ(c.timeouts.first_byte, 100);
  EXPECT_EQ(c.timeouts.idle, 50);
  EXPECT_EQ(c.timeouts.total, 600);
  EXPECT_EQ(c.timeouts.client_read, 10);
  EXPECT_EQ(c.timeouts.client_write, 20);
  EXPECT_EQ(c.timeouts.client_idle, 30);
  EXPECT_EQ(c.timeouts.drain, 0);
  EXPECT_EQ(c.max_retries, 5u);
  EXPECT_EQ(c.health.path, "/healthz");
  EXPECT_EQ(c.health.interval, 0.5);
  EXPECT_EQ(c.health.timeout, 0.25);
  EXPECT_EQ(c.health.unhealthy_threshold, 4u);
  EXPECT_EQ(c.health.healthy_threshold, 5u);
  EXPECT_EQ(c.health.passive_failures, 0u);

  ASSERT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c).ToString();
  EXPECT_EQ(c.listen_host, "0.0.0.0");
  EXPECT_EQ(c.listen_port, 9090);
  EXPECT_EQ(c.instances[0].host, "10.0.0.1");
  EXPECT_EQ(c.instances[0].port, 8001);
  EXPECT_EQ(c.instances[0].base_path, "/v2");
  EXPECT_EQ(c.instances[1].name, "gpu-b.internal:80");
}

// Fields absent from the YAML take the defaults documented in config.h.
TEST(ParseConfigYaml, AbsentFieldsTakeDocumentedDefaults) {
  GatewayConfig c = Parse("instances:\n  - url: http://127.0.0.1:8001\n");
  EXPECT_EQ(c.listen, "127.0.0.1:8080");
  EXPECT_EQ(c.io_threads, 0u);
  EXPECT_TRUE(c.decision_headers);
  EXPECT_EQ(c.routing.strategy, kDefaultStrategy);
  EXPECT_EQ(c.routing.strategy, Strategy::kCacheAware);
  EXPECT_EQ(c.routing.prefix_length, 2048u);
  EXPECT_EQ(c.routing.concurrency_threshold, 64u);
  EXPECT_EQ(c.routing.spill, SpillMode::kNextPreferred);
  EXPECT_EQ(c.routing.balance_factor, 1.5);
  EXPECT_TRUE(c.pools.empty());
  EXPECT_EQ(c.max_request_body_bytes, 33554432u);
  EXPECT_EQ(c.max_header_bytes, 65536u);
  EXPECT_EQ(c.timeouts.connect, 5);
  EXPECT_EQ(c.timeouts.first_byte, 300);
  EXPECT_EQ(c.timeouts.idle, 120);
  EXPECT_EQ(c.timeouts.total, 0);
  EXPECT_EQ(c.timeouts.client_read, 30);
  EXPECT_EQ(c.timeouts.client_write, 60);
  EXPECT_EQ(c.timeouts.client_idle, 60);
  EXPECT_EQ(c.timeouts.drain, 30);
  EXPECT_EQ(c.max_retries, 2u);
  EXPECT_EQ(c.health.path, "/health");
  EXPECT_EQ(c.health.interval, 5);
  EXPECT_EQ(c.health.timeout, 2);
  EXPECT_EQ(c.health.unhealthy_threshold, 3u);
  EXPECT_EQ(c.health.healthy_threshold, 2u);
  EXPECT_EQ(c.health.passive_failures, 1u);
  EXPECT_TRUE(ValidateConfig(c).ok());
}

// An empty document (only comments) and empty sections change nothing.
TEST(ParseConfigYaml, EmptyDocumentAndEmptySectionsKeepDefaults) {
  GatewayConfig empty = Parse("# nothing yet\n");
  EXPECT_EQ(empty.listen, "127.0.0.1:8080");
  EXPECT_TRUE(empty.instances.empty());
  GatewayConfig sections = Parse("timeouts:\nhealth:\nrouting:\n");
  EXPECT_EQ(sections.timeouts.connect, 5);
  EXPECT_EQ(sections.routing.prefix_length, 2048u);
}

// Fields the YAML does not mention keep the value they had in `base`.
TEST(ParseConfigYaml, AbsentFieldsKeepBaseValues) {
  GatewayConfig base;
  base.listen = "127.0.0.1:0";
  base.timeouts.idle = 7;
  base.routing.prefix_length = 1024;
  Result<GatewayConfig> r = ParseConfigYaml("timeouts: {connect: 2}\n", base);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->listen, "127.0.0.1:0");
  EXPECT_EQ(r->timeouts.idle, 7);
  EXPECT_EQ(r->timeouts.connect, 2);
  EXPECT_EQ(r->routing.prefix_length, 1024u);
}

// An unknown top-level key is named with the list of valid fields.
TEST(ParseConfigYaml, UnknownTopLevelKeyIsNamed) {
  ExpectParseError("listn: 127.0.0.1:8080\n",
                   {"listn: unknown field; expected one of listen, io_threads, decision_headers, "
                    "routing, pools, instances, limits, timeouts, retries, health"});
}

// An unknown key inside a section is named by its full path.
TEST(ParseConfigYaml, UnknownNestedKeyIsNamedByPath) {
  ExpectParseError("timeouts:\n  conect: 5\n",
                   {"timeouts.conect: unknown field; expected one of connect, first_byte, idle, "
                    "total, client_read, client_write, client_idle, drain"});
  ExpectParseError("routing: {strategy: random}\n",
                   {"routing.strategy: unknown field; expected one of routing_strategy"});
  ExpectParseError("health: {intervall: 1}\n", {"health.intervall: unknown field"});
}

// An unknown key in an instance is named with the instance's index.
TEST(ParseConfigYaml, UnknownInstanceKeyIsNamedWithIndex) {
  ExpectParseError(
      "instances:\n  - url: http://a:1\n  - url: http://b:1\n    wieght: 2\n",
      {"instances[1].wieght: unknown field; expected one of name, url, weight, models, discover_models, resolve"});
}

// An unknown key in a pool is named with the pool's name.
TEST(ParseConfigYaml, UnknownPoolKeyIsNamedWithPool) {
  ExpectParseError("pools:\n  llama: {prefix_lenght: 4096}\n",
                   {"pools.llama.prefix_lenght: unknown field; expected one of routing_strategy, "
                    "prefix_length, concurrency_threshold, spill_mode, load_measure, balance_factor"});
}

// Managed-service spellings are not aliases: only snake_case fields exist.
TEST(ParseConfigYaml, CamelCaseSpellingsAreUnknown) {
  ExpectParseError("routing: {RoutingStrategy: prefix-aware}\n", {"routing.RoutingStrategy: unknown field"});
}

// A key written twice is an error rather than a silent last-wins.
TEST(ParseConfigYaml, DuplicateKeyIsAnError) {
  ExpectParseError("timeouts:\n  idle: 1\n  idle: 2\n", {"timeouts.idle: set more than once"});
}

// A value of the wrong type names the path, the expected type and what was written.
TEST(ParseConfigYaml, WrongTypesNameThePath) {
  ExpectParseError("routing: {prefix_length: abc}\n", {"routing.prefix_length: expected an integer, got 'abc'"});
  ExpectParseError("routing: {prefix_length: 1.5}\n", {"routing.prefix_length: expected an integer, got '1.5'"});
  ExpectParseError("timeouts: {connect: fast}\n", {"timeouts.connect: expected a number of seconds, got 'fast'"});
  ExpectParseError("timeouts: {connect: .inf}\n", {"timeouts.connect: expected a number"});
  ExpectParseError("decision_headers: maybe\n", {"decision_headers: expected true or false, got 'maybe'"});
  ExpectParseError("listen: [a, b]\n", {"listen: expected a string, got a sequence"});
  ExpectParseError("timeouts: 5\n", {"timeouts: expected a map, got '5'"});
  ExpectParseError("instances: {url: http://a}\n", {"instances: expected a list"});
  ExpectParseError("instances:\n  - http://a:1\n", {"instances[0]: expected a map"});
  ExpectParseError("instances:\n  - url: http://a:1\n    models: [a, {b: 1}]\n",
                   {"instances[0].models[1]: expected a string, got a map"});
  ExpectParseError("pools:\n  llama: 5\n", {"pools.llama: expected a map"});
  ExpectParseError("io_threads:\n", {"io_threads: expected an integer, got nothing"});
  ExpectParseError("routing: {balance_factor: high}\n", {"routing.balance_factor: expected a number, got 'high'"});
  ExpectParseError("pools:\n  llama: {balance_factor: .nan}\n",
                   {"pools.llama.balance_factor: expected a number, got '.nan'"});
}

// Negative numbers for unsigned fields are rejected instead of wrapping around.
TEST(ParseConfigYaml, NegativeUnsignedIsRejected) {
  ExpectParseError("io_threads: -1\n", {"io_threads: expected a non-negative integer, got '-1'"});
  ExpectParseError("limits: {max_request_body_bytes: -1}\n",
                   {"limits.max_request_body_bytes: expected a non-negative integer"});
  ExpectParseError("instances:\n  - url: http://a:1\n    weight: -3\n",
                   {"instances[0].weight: expected a non-negative integer, got '-3'"});
}

// Integers beyond the field's type are rejected, not truncated.
TEST(ParseConfigYaml, OversizedIntegerIsRejected) {
  ExpectParseError("routing: {prefix_length: 4294967296}\n",
                   {"routing.prefix_length: 4294967296 is too large (at most 4294967295)"});
  ExpectParseError("limits: {max_request_body_bytes: 99999999999999999999}\n",
                   {"limits.max_request_body_bytes: 99999999999999999999 is too large"});
}

// The top level must be a map; broken YAML syntax is reported, not thrown.
TEST(ParseConfigYaml, NonMapTopLevelAndSyntaxErrorsAreStatuses) {
  ExpectParseError("- a\n- b\n", {"top level must be a map", "got a sequence"});
  ExpectParseError("just a string\n", {"top level must be a map"});
  ExpectParseError("routing: {prefix_length: 1\n", {"invalid YAML", "line"});
}

// Strategy and spill names go through the core's parsers, with the path in front.
TEST(ParseConfigYaml, StrategyAndSpillErrorsCarryThePath) {
  ExpectParseError("routing: {routing_strategy: fastest}\n",
                   {"routing.routing_strategy: 'fastest' is not one of random, "
                    "least-outstanding-requests, round-robin, prefix-aware"});
  ExpectParseError("pools:\n  llama: {spill_mode: anywhere}\n",
                   {"pools.llama.spill_mode: 'anywhere' is not one of next-preferred, least-loaded"});
  ExpectParseError("pools:\n  llama: {load_measure: tokens}\n",
                   {"pools.llama.load_measure: 'tokens' is not one of requests, prompt-tokens, engine"});
  ExpectParseError("pools:\n  llama: {tokenizer: vllm}\n",
                   {"pools.llama.tokenizer: 'vllm' is not one of local, engine"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.tokenize = 0; }),
                {"timeouts.tokenize: 0 is outside the allowed range (0, 600]"});
}

// routing.tokenizer and timeouts.tokenize: defaults local and 1 s; a pool inherits the routing
// section's tokenizer unless it sets its own.
TEST(ParseConfigYaml, TokenizerSourceAndTimeout) {
  GatewayConfig d = Parse("instances: [{url: 'http://a:1'}]\n");
  EXPECT_EQ(d.routing.tokenizer, TokenizerSource::kLocal);
  EXPECT_EQ(d.timeouts.tokenize, 1);
  GatewayConfig c = Parse(
      "routing: {routing_strategy: kv-aware, tokenizer: engine}\n"
      "pools:\n  a: {prefix_length: 4096}\n  b: {tokenizer: local}\n"
      "timeouts: {tokenize: 0.25}\n"
      "instances: [{url: 'http://a:1'}]\n");
  EXPECT_EQ(c.routing.tokenizer, TokenizerSource::kEngine);
  EXPECT_EQ(c.pools.at("a").tokenizer, TokenizerSource::kEngine);
  EXPECT_EQ(c.pools.at("b").tokenizer, TokenizerSource::kLocal);
  EXPECT_EQ(c.timeouts.tokenize, 0.25);
}

// `models` accepts a single string and treats an empty value as "serves every name".
TEST(ParseConfigYaml, ModelsAcceptsSingleStringAndEmpty) {
  GatewayConfig c = Parse(
      "instances:\n  - {url: 'http://a:1', models: llama}\n  - {url: 'http://b:1', models: []}\n"
      "  - {url: 'http://c:1', models: }\n");
  ASSERT_EQ(c.instances.size(), 3u);
  EXPECT_EQ(c.instances[0].models, std::vector<std::string>{"llama"});
  EXPECT_TRUE(c.instances[1].models.empty());
  EXPECT_TRUE(c.instances[2].models.empty());
}

// A pool inherits every field it does not set from the final `routing`, whichever comes first.
TEST(ParseConfigYaml, PoolsInheritFromFinalRoutingRegardlessOfOrder) {
  const std::string routing =
      "routing: {routing_strategy: prefix-aware, prefix_length: 4096, concurrency_threshold: 8, "
      "spill_mode: least-loaded}\n";
  const std::string pools = "pools:\n  llama: {prefix_length: 1024}\n  mistral: {}\n";
  for (const std::string& yaml : {routing + pools, pools + routing}) {
    GatewayConfig c = Parse(yaml);
    ASSERT_EQ(c.pools.size(), 2u) << yaml;
    const RoutingOptions& llama = c.pools.at("llama");
    EXPECT_EQ(llama.strategy, Strategy::kPrefixAware) << yaml;
    EXPECT_EQ(llama.prefix_length, 1024u) << yaml;
    EXPECT_EQ(llama.concurrency_threshold, 8u) << yaml;
    EXPECT_EQ(llama.spill, SpillMode::kLeastLoaded) << yaml;
    EXPECT_EQ(c.pools.at("mistral").prefix_length, 4096u) << yaml;
  }
}

// Pools also inherit routing fields that `base` supplies and the YAML leaves alone.
TEST(ParseConfigYaml, PoolsInheritBaseRouting) {
  GatewayConfig base;
  base.routing.concurrency_threshold = 5;
  Result<GatewayConfig> r = ParseConfigYaml("pools: {llama: {prefix_length: 1024}}\n", base);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->pools.at("llama").concurrency_threshold, 5u);
}

// balance_factor is read wherever the other routing settings are: `routing` sets the default
// pool's (and what pools inherit), a pool overrides it, 0 turns it off, integers are numbers.
TEST(ParseConfigYaml, BalanceFactorInRoutingAndPools) {
  const std::string yaml =
      "routing: {routing_strategy: prefix-aware, balance_factor: 2}\n"
      "pools:\n  llama: {balance_factor: 0}\n  mistral: {balance_factor: 1.25}\n  qwen: {}\n";
  GatewayConfig c = Validated(Parse(yaml + "instances:\n  - url: http://a:1\n"));
  EXPECT_EQ(c.routing.balance_factor, 2);
  EXPECT_EQ(c.pools.at("llama").balance_factor, 0);
  EXPECT_EQ(c.pools.at("mistral").balance_factor, 1.25);
  EXPECT_EQ(c.pools.at("qwen").balance_factor, 2);  // inherited from routing
  EXPECT_EQ(c.RoutingFor("llama").balance_factor, 0);
  EXPECT_EQ(c.RoutingFor("other").balance_factor, 2);
}

// RoutingFor gives a pool's settings for its name and the default pool's for any other name.
TEST(GatewayConfig, RoutingForPicksPoolElseDefault) {
  GatewayConfig c =
      Parse("routing: {routing_strategy: round-robin}\npools: {llama: {routing_strategy: prefix-aware}}\n");
  EXPECT_EQ(c.RoutingFor("llama").strategy, Strategy::kPrefixAware);
  EXPECT_EQ(c.RoutingFor("mistral").strategy, Strategy::kRoundRobin);
  EXPECT_EQ(c.RoutingFor("").strategy, Strategy::kRoundRobin);
  EXPECT_EQ(&c.RoutingFor("other"), &c.routing);
}

// The minimal valid configuration passes, and so does every field at its bounds.
TEST(ValidateConfig, AcceptsBoundaryValues) {
  EXPECT_TRUE(ValidateWith([](GatewayConfig&) {}).ok());
  EXPECT_TRUE(ValidateWith([](GatewayConfig& c) {
                c.io_threads = 256;
                c.routing.prefix_length = 65536;
                c.routing.concurrency_threshold = 1024;
                c.routing.balance_factor = 100;
                c.instances[0].weight = 10000;
                c.max_request_body_bytes = 1u << 30;
                c.max_header_bytes = 1u << 20;
                c.timeouts = {600, 3600, 3600, 86400, 3600, 3600, 3600, 3600};
                c.max_retries = 10;
                c.health.interval = 3600;
                c.health.timeout = 600;
                c.health.unhealthy_threshold = 100;
                c.health.healthy_threshold = 100;
                c.health.passive_failures = 100;
              }).ok());
  EXPECT_TRUE(ValidateWith([](GatewayConfig& c) {
                c.routing.prefix_length = 1024;
                c.routing.concurrency_threshold = 1;
                c.routing.balance_factor = 1;
                c.max_request_body_bytes = 1024;
                c.max_header_bytes = 1024;
                c.timeouts = {0.001, 0.001, 0.001, 0, 0.001, 0.001, 0.001, 0};
                c.max_retries = 0;
                c.health.interval = 0;
                c.health.unhealthy_threshold = 1;
                c.health.healthy_threshold = 1;
                c.health.passive_failures = 0;
              }).ok());
}

// listen is split into host and port: IPv4, host names, bracketed IPv6, and port 0 (ephemeral).
TEST(ValidateConfig, ListenFormsAreParsed) {
  GatewayConfig c = Valid();
  c.listen = "127.0.0.1:0";
  c = Validated(c);
  EXPECT_EQ(c.listen_host, "127.0.0.1");
  EXPECT_EQ(c.listen_port, 0);
  c.listen = "localhost:8080";
  c = Validated(c);
  EXPECT_EQ(c.listen_host, "localhost");
  EXPECT_EQ(c.listen_port, 8080);
  c.listen = "[::1]:9000";
  c = Validated(c);
  EXPECT_EQ(c.listen_host, "::1");
  EXPECT_EQ(c.listen_port, 9000);
}

// listen must be host:port with a port of at most 65535.
TEST(ValidateConfig, RejectsBadListen) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.listen = "127.0.0.1"; }),
                {"listen: '127.0.0.1' is not host:port"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.listen = ":8080"; }), {"listen:"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.listen = "::1:8080"; }), {"listen:"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.listen = "host:http"; }), {"listen:"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.listen = "127.0.0.1:65536"; }),
                {"listen: port 65536 is outside the allowed range 0..65535"});
}

// The admin listener cannot share the gateway's address: --check-config says so instead of the
// start failing to bind.
TEST(ValidateConfig, RejectsAdminListenerOnTheGatewaysAddress) {
  auto with = [](const std::string& listen, const std::string& admin) {
    GatewayConfig c = Valid();
    c.listen = listen;
    c.admin.enabled = true;
    c.admin.listen = admin;
    return ValidateConfig(c);
  };
  ExpectInvalid(with("127.0.0.1:8080", "127.0.0.1:8080"),
                {"admin.listen: '127.0.0.1:8080' is the address of listen ('127.0.0.1:8080')"});
  ExpectInvalid(with("0.0.0.0:8080", "127.0.0.1:8080"), {"admin.listen:", "a port of its own"});
  ExpectInvalid(with("localhost:8080", "127.0.0.1:8080"), {"admin.listen:"});
  EXPECT_TRUE(with("127.0.0.1:8080", "127.0.0.1:9901").ok());
  EXPECT_TRUE(with("127.0.0.1:8080", "127.0.0.2:8080").ok());
  EXPECT_TRUE(with("127.0.0.1:0", "127.0.0.1:0").ok());  // any free port: two different ones
}

// kv-aware and dynamo-kv without any KV event stream are valid (they fall back) but said.
TEST(ConfigWarnings, KvStrategiesWithoutAnEventStream) {
  GatewayConfig c = Validated(Valid());
  EXPECT_TRUE(ConfigWarnings(c).empty());
  c.routing.strategy = Strategy::kKvAware;
  RoutingOptions dynamo = c.routing;
  dynamo.strategy = Strategy::kDynamoKv;
  c.pools["llama"] = dynamo;
  const std::vector<std::string> w = ConfigWarnings(c);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("routing.routing_strategy: kv-aware"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("as cache-aware"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("pools.llama.routing_strategy: dynamo-kv"), std::string::npos) << w[1];
  // One instance with a stream: nothing to say.
  c.instances[0].kv_events.endpoint = "tcp://127.0.0.1:5557";
  EXPECT_TRUE(ConfigWarnings(c).empty());
}

// io_threads is 0..256.
TEST(ValidateConfig, RejectsIoThreadsOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.io_threads = 257; }),
                {"io_threads: 257 is outside the allowed range 0..256"});
}

// The default pool's ranges come from RoutingOptions::Validate, prefixed with "routing.".
TEST(ValidateConfig, RejectsRoutingOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.routing.prefix_length = 10; }),
                {"routing.prefix_length: 10 is outside the allowed range 1024..65536"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.routing.concurrency_threshold = 0; }),
                {"routing.concurrency_threshold: 0 is outside the allowed range 1..1024"});
}

// balance_factor is 0 (off) or 1..100, for the default pool and for each pool; the message reads
// like the other range errors and names the field's path.
TEST(ValidateConfig, RejectsBalanceFactorOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.routing.balance_factor = 0.5; }),
                {"routing.balance_factor: 0.5 is outside the allowed range 1..100 (or 0 = off)"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.routing.balance_factor = 101; }),
                {"routing.balance_factor: 101 is outside the allowed range 1..100 (or 0 = off)"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.routing.balance_factor = -1; }),
                {"routing.balance_factor: -1 is outside the allowed range"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.pools["llama"].balance_factor = 0.9; }),
                {"pools.llama.balance_factor: 0.9 is outside the allowed range 1..100 (or 0 = off)"});
  Result<GatewayConfig> parsed =
      ParseConfigYaml("instances: [{url: 'http://a:1'}]\npools: {llama: {balance_factor: 250}}\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();  // ranges are validation's
  ExpectInvalid(ValidateConfig(*parsed),
                {"pools.llama.balance_factor: 250 is outside the allowed range 1..100 (or 0 = off)"});
  for (double ok : {0.0, 1.0, 1.5, 100.0}) {
    GatewayConfig c = Valid();
    c.routing.balance_factor = ok;
    c.pools["llama"].balance_factor = ok;
    EXPECT_TRUE(ValidateConfig(c).ok()) << ok;
  }
}

// cache_aware parses field by field (a pool's fields over `routing`'s) and its ranges are the
// core's, under the field's path.
TEST(ParseConfigYaml, CacheAwareSection) {
  GatewayConfig c = Parse(
      "instances: [{url: 'http://a:1'}]\n"
      "routing: {routing_strategy: cache-aware, cache_aware: {block_bytes: 128, load_weight: 0.25}}\n"
      "pools: {llama: {cache_aware: {capacity_blocks: 5000, max_index_bytes: 2097152, max_blocks: 64}}}\n");
  EXPECT_EQ(c.routing.strategy, Strategy::kCacheAware);
  EXPECT_EQ(c.routing.cache_aware.block_bytes, 128u);
  EXPECT_EQ(c.routing.cache_aware.load_weight, 0.25);
  const RoutingOptions& llama = c.pools.at("llama");
  EXPECT_EQ(llama.strategy, Strategy::kCacheAware);
  EXPECT_EQ(llama.cache_aware.block_bytes, 128u);  // inherited
  EXPECT_EQ(llama.cache_aware.capacity_blocks, 5000u);
  EXPECT_EQ(llama.cache_aware.max_index_bytes, 2097152u);
  EXPECT_EQ(llama.cache_aware.max_blocks, 64u);
  EXPECT_TRUE(ValidateConfig(c).ok());
  ExpectParseError("routing: {cache_aware: {block_size: 4}}\n",
                   {"routing.cache_aware.block_size: unknown field; expected one of block_bytes"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.pools["llama"].cache_aware.block_bytes = 8; }),
                {"pools.llama.cache_aware.block_bytes: 8 is outside the allowed range 16..65536"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.routing.cache_aware.load_weight = 101; }),
                {"routing.cache_aware.load_weight"});
}

// A pool's ranges are reported under the pool's path.
TEST(ValidateConfig, RejectsPoolOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.pools["llama"].prefix_length = 10; }),
                {"pools.llama.prefix_length: 10 is outside the allowed range 1024..65536"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.pools["llama"].concurrency_threshold = 2000; }),
                {"pools.llama.concurrency_threshold: 2000 is outside the allowed range 1..1024"});
}

// A pool must be served by some instance, by name or by an instance that serves every name.
TEST(ValidateConfig, RejectsPoolNoInstanceServes) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) {
                  c.instances[0].models = {"llama"};
                  c.pools["foo"] = c.routing;
                }),
                {"pools.foo: no instance serves 'foo'"});
  EXPECT_TRUE(ValidateWith([](GatewayConfig& c) { c.pools["foo"] = c.routing; }).ok());
  EXPECT_TRUE(ValidateWith([](GatewayConfig& c) {
                c.instances[0].models = {"llama", "foo"};
                c.pools["foo"] = c.routing;
              }).ok());
}

// Served names must be valid UTF-8: yaml-cpp passes a file's invalid bytes through, and such a
// name could never match a request's model and would break the /v1/models JSON (found by
// fuzz/gateway_config_fuzzer; input fuzz/corpus/gateway_config/found-invalid-utf8-model.yaml).
TEST(ValidateConfig, RejectsServedNamesThatAreNotUtf8) {
  GatewayConfig parsed = Parse("instances:\n  - url: http://h\n    models: [ok, \"caf\\u00e9\", caf\xbd]\n");
  ASSERT_EQ(parsed.instances.size(), 1u);
  ExpectInvalid(ValidateConfig(parsed), {"instances[0].models[2]: must be valid UTF-8"});
  for (const char* bad : {"\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                          "a\xff"
                          "b"}) {
    GatewayConfig model = Valid();
    model.instances[0].models = {bad};
    ExpectInvalid(ValidateConfig(model), {"instances[0].models[0]: must be valid UTF-8"});
    GatewayConfig pool = Valid();
    pool.pools[bad] = pool.routing;
    ExpectInvalid(ValidateConfig(pool), {"pools: pool names must be valid UTF-8"});
  }
  EXPECT_TRUE(ValidateWith([](GatewayConfig& c) {
                c.instances[0].models = {"caf\xc3\xa9", "\xf0\x9f\x98\x80", "tab\there"};
                c.pools["caf\xc3\xa9"] = c.routing;
              }).ok());
}

// At least one instance is required.
TEST(ValidateConfig, RejectsNoInstances) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances.clear(); }),
                {"instances: at least one instance is required"});
}

// Instance URLs: parsed into host, port (default 80) and base path without trailing slash.
TEST(ValidateConfig, ParsesInstanceUrls) {
  GatewayConfig c = Valid();
  c.instances.resize(6);
  c.instances[0].url = "http://127.0.0.1:8001";
  c.instances[1].url = "http://gpu-a.internal";
  c.instances[2].url = "http://gpu-b:9000/v2/";
  c.instances[3].url = "http://[::1]:8000";
  c.instances[4].url = "http://gpu-c/";
  c.instances[5].url = "HTTP://gpu-d:81";  // the scheme is case-insensitive
  c = Validated(c);
  const auto& in = c.instances;
  EXPECT_EQ(in[0].host, "127.0.0.1");
  EXPECT_EQ(in[0].port, 8001);
  EXPECT_EQ(in[0].base_path, "");
  EXPECT_EQ(in[1].host, "gpu-a.internal");
  EXPECT_EQ(in[1].port, 80);
  EXPECT_EQ(in[2].host, "gpu-b");
  EXPECT_EQ(in[2].port, 9000);
  EXPECT_EQ(in[2].base_path, "/v2");
  EXPECT_EQ(in[3].host, "::1");
  EXPECT_EQ(in[3].port, 8000);
  EXPECT_EQ(in[4].base_path, "");
  EXPECT_EQ(in[5].host, "gpu-d");
  EXPECT_EQ(in[5].port, 81);
}

// An unnamed instance is named host:port (IPv6 in brackets); a given name is kept.
TEST(ValidateConfig, DefaultInstanceNames) {
  GatewayConfig c = Valid();
  c.instances.resize(4);
  c.instances[1].url = "http://gpu-a.internal";
  c.instances[2].url = "http://[::1]:8000/v1";
  c.instances[3].url = "http://10.0.0.9:8000";
  c.instances[3].name = "nine";
  c = Validated(c);
  EXPECT_EQ(c.instances[0].name, "127.0.0.1:8001");
  EXPECT_EQ(c.instances[1].name, "gpu-a.internal:80");
  EXPECT_EQ(c.instances[2].name, "[::1]:8000");
  EXPECT_EQ(c.instances[3].name, "nine");
}

// Instance URLs must be http(s)://host[:port][/path] (https: tls_test.cc, tls_config_test.cc).
TEST(ValidateConfig, RejectsBadInstanceUrls) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].url = ""; }), {"instances[0].url: is required"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].url = "ftp://a:21"; }),
                {"instances[0].url: 'ftp://a:21' is not http(s)://host[:port][/path]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].url = "127.0.0.1:8001"; }),
                {"instances[0].url: '127.0.0.1:8001' is not http(s)://host[:port][/path]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].url = "http://a:1/x?y=1"; }),
                {"instances[0].url:", "no query"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].url = "http://user@a:1"; }),
                {"instances[0].url: 'http://***@a:1' carries credentials", "authorization_file"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].url = "http://:8000"; }), {"instances[0].url:"});
}

// A URL with a password is refused without printing the password, whatever else is wrong.
TEST(ValidateConfig, InstanceUrlErrorsNeverShowThePassword) {
  for (const char* url : {"http://user:s3cret@a:1", "http://user:s3cret@a:1/x?y=1", "ftp://user:s3cret@a:21",
                          "http://user:s3cret@:8000"}) {
    SCOPED_TRACE(url);
    GatewayConfig c = Valid();
    c.instances[0].url = url;
    const Status s = ValidateConfig(c);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.ToString().find("s3cret"), std::string::npos) << s.ToString();
    EXPECT_NE(s.ToString().find("***@"), std::string::npos) << s.ToString();
  }
}

// Instance ports are 1..65535.
TEST(ValidateConfig, RejectsInstancePortOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].url = "http://a:0"; }),
                {"instances[0].url: port 0 is outside the allowed range 1..65535"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].url = "http://a:70000"; }),
                {"instances[0].url: port 70000 is outside the allowed range 1..65535"});
}

// Weights are 1..kMaxInstanceWeight.
TEST(ValidateConfig, RejectsWeightOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].weight = 0; }),
                {"instances[0].weight: 0 is outside the allowed range 1..10000"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].weight = 10001; }),
                {"instances[0].weight: 10001 is outside the allowed range 1..10000"});
}

// Duplicate instance names, given or defaulted, are rejected naming both indices.
TEST(ValidateConfig, RejectsDuplicateInstanceNames) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) {
                  c.instances.resize(3);
                  c.instances[0].name = "a";
                  c.instances[1].url = "http://b:1";
                  c.instances[2].url = "http://c:1";
                  c.instances[2].name = "a";
                }),
                {"instances[2].name: 'a' is also the name of instances[0]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances.push_back(c.instances[0]); }),
                {"instances[1].name: '127.0.0.1:8001' is also the name of instances[0]"});
}

// Names go into response headers, and served names must not be empty.
TEST(ValidateConfig, RejectsUnusableNames) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.instances[0].name = "gpu a"; }), {"instances[0].name: 'gpu a'"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) {
                  c.instances[0].models = {"llama", ""};
                }),
                {"instances[0].models[1]: must not be empty"});
}

// Size limits: request bodies 1 KiB..1 GiB, headers 1 KiB..1 MiB.
TEST(ValidateConfig, RejectsLimitsOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.max_request_body_bytes = 1023; }),
                {"limits.max_request_body_bytes: 1023 is outside the allowed range 1024..1073741824"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.max_request_body_bytes = (1u << 30) + 1; }),
                {"limits.max_request_body_bytes: 1073741825 is outside"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.max_header_bytes = 100; }),
                {"limits.max_header_bytes: 100 is outside the allowed range 1024..1048576"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.max_header_bytes = (1u << 20) + 1; }),
                {"limits.max_header_bytes: 1048577 is outside"});
}

// Each timeout has its own range; 0 is only allowed where it means something.
TEST(ValidateConfig, RejectsTimeoutsOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.connect = 0; }),
                {"timeouts.connect: 0 is outside the allowed range (0, 600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.connect = 601; }),
                {"timeouts.connect: 601 is outside the allowed range (0, 600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.first_byte = 0; }),
                {"timeouts.first_byte: 0 is outside the allowed range (0, 3600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.idle = 3600.5; }),
                {"timeouts.idle: 3600.5 is outside the allowed range (0, 3600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.total = -1; }),
                {"timeouts.total: -1 is outside the allowed range [0, 86400]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.total = 86401; }),
                {"timeouts.total: 86401 is outside the allowed range [0, 86400]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.client_read = -2; }),
                {"timeouts.client_read: -2 is outside the allowed range (0, 3600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.client_write = 0; }),
                {"timeouts.client_write: 0 is outside the allowed range (0, 3600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.client_idle = 4000; }),
                {"timeouts.client_idle: 4000 is outside the allowed range (0, 3600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.drain = -0.5; }),
                {"timeouts.drain: -0.5 is outside the allowed range [0, 3600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.drain = 3601; }),
                {"timeouts.drain: 3601 is outside the allowed range [0, 3600]"});
}

// A NaN set programmatically fails the range check instead of slipping through comparisons.
TEST(ValidateConfig, RejectsNaNTimeouts) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.connect = std::nan(""); }),
                {"timeouts.connect: nan is outside the allowed range (0, 600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.timeouts.drain = std::nan(""); }), {"timeouts.drain:"});
}

// max_retries is 0..10.
TEST(ValidateConfig, RejectsMaxRetriesOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.max_retries = 11; }),
                {"retries.max_retries: 11 is outside the allowed range 0..10"});
}

// Health checks: path starts with '/', interval [0, 3600], timeout (0, 600], thresholds 1..100,
// passive failures 0..100.
TEST(ValidateConfig, RejectsHealthOutOfRange) {
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.health.path = "health"; }),
                {"health.path: 'health' must start with '/'"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.health.interval = -1; }),
                {"health.interval: -1 is outside the allowed range [0, 3600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.health.interval = 3601; }),
                {"health.interval: 3601 is outside the allowed range [0, 3600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.health.timeout = 0; }),
                {"health.timeout: 0 is outside the allowed range (0, 600]"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.health.unhealthy_threshold = 0; }),
                {"health.unhealthy_threshold: 0 is outside the allowed range 1..100"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.health.healthy_threshold = 101; }),
                {"health.healthy_threshold: 101 is outside the allowed range 1..100"});
  ExpectInvalid(ValidateWith([](GatewayConfig& c) { c.health.passive_failures = 101; }),
                {"health.passive_failures: 101 is outside the allowed range 0..100"});
}

// Validating twice gives the same result (default names are not re-derived differently).
TEST(ValidateConfig, IsIdempotent) {
  GatewayConfig c = Validated(Valid());
  GatewayConfig again = Validated(c);
  EXPECT_EQ(again.instances[0].name, c.instances[0].name);
  EXPECT_EQ(again.listen_port, c.listen_port);
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("config_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A file on disk loads like the same text parsed directly.
TEST(LoadConfigFile, LoadsTempFile) {
  const std::string path = TempPath("full.yaml");
  {
    std::ofstream out(path);
    out << kFullExample;
  }
  Result<GatewayConfig> r = LoadConfigFile(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->listen, "0.0.0.0:9090");
  EXPECT_EQ(r->instances.size(), 2u);
  EXPECT_EQ(r->pools.at("llama-3-70b").prefix_length, 8192u);
}

// A missing file is NotFound and names the path.
TEST(LoadConfigFile, MissingFileIsNotFound) {
  const std::string path = TempPath("does-not-exist.yaml");
  Result<GatewayConfig> r = LoadConfigFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
}

// A directory cannot be read as a file: InvalidArgument naming the path.
TEST(LoadConfigFile, DirectoryIsInvalidArgument) {
  const std::string path = std::filesystem::temp_directory_path().string();
  Result<GatewayConfig> r = LoadConfigFile(path);
  ExpectInvalid(r.status(), {path});
}

// Errors inside a file carry both the file path and the field path.
TEST(LoadConfigFile, ParseErrorsNameFileAndField) {
  const std::string path = TempPath("typo.yaml");
  {
    std::ofstream out(path);
    out << "timeouts:\n  conect: 5\n";
  }
  Result<GatewayConfig> r = LoadConfigFile(path);
  std::filesystem::remove(path);
  ExpectInvalid(r.status(), {path + ": timeouts.conect: unknown field"});
}

// The log section: format and access log, both off the defaults; typos and bad values refused.
TEST(ParseConfigYaml, LogSection) {
  GatewayConfig d = Parse("instances: [{url: 'http://a:1'}]\n");
  EXPECT_EQ(d.log.format, LogFormat::kText);
  EXPECT_FALSE(d.log.access_log);
  GatewayConfig c = Parse("log: {format: json, access_log: true}\n");
  EXPECT_EQ(c.log.format, LogFormat::kJson);
  EXPECT_TRUE(c.log.access_log);
  ExpectParseError("log: {format: xml}\n", {"log.format: 'xml' is not one of text, json"});
  ExpectParseError("log: {acces_log: true}\n", {"log.acces_log"});
  ExpectParseError("log: {access_log: maybe}\n", {"log.access_log"});
}

}  // namespace
}  // namespace prefix_router::gateway
