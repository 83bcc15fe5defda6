#include "gateway/config_flags.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace prefix_router::gateway {
namespace {

// Parses `args` (without the program name) as `serve`'s flags. CLI11 throws CLI::ParseError on
// malformed values.
ConfigFlags ParseFlags(std::vector<std::string> args) {
  CLI::App app{"serve"};
  ConfigFlags flags;
  AddConfigFlags(app, flags);
  std::reverse(args.begin(), args.end());  // CLI11 consumes the vector from the back
  app.parse(args);
  return flags;
}

GatewayConfig Build(std::vector<std::string> args) {
  Result<GatewayConfig> r = BuildConfig(ParseFlags(std::move(args)));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : GatewayConfig{};
}

// The message of the CLI11 error `args` raise, or "" when they parse.
std::string ParseErrorOf(std::vector<std::string> args) {
  try {
    ParseFlags(std::move(args));
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

Status BuildErrorOf(std::vector<std::string> args) {
  Result<GatewayConfig> r = BuildConfig(ParseFlags(std::move(args)));
  return r.ok() ? Status::Ok() : r.status();
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Writes `text` to a fresh temp file and removes it when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& text)
      : path_((std::filesystem::temp_directory_path() /
               ("config_flags_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++) + ".yaml"))
                  .string()) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

// The short form from the documentation builds the configuration it describes.
TEST(BuildConfig, ShortFormWithoutFile) {
  GatewayConfig c = Build({"--listen", "127.0.0.1:8080", "--instance", "http://127.0.0.1:8001", "--instance",
                           "b=http://127.0.0.1:8002", "--strategy", "prefix-aware", "--prefix-length", "1024",
                           "--concurrency-threshold", "8"});
  EXPECT_EQ(c.listen_host, "127.0.0.1");
  EXPECT_EQ(c.listen_port, 8080);
  ASSERT_EQ(c.instances.size(), 2u);
  EXPECT_EQ(c.instances[0].name, "127.0.0.1:8001");
  EXPECT_EQ(c.instances[0].port, 8001);
  EXPECT_EQ(c.instances[1].name, "b");
  EXPECT_EQ(c.instances[1].url, "http://127.0.0.1:8002");
  EXPECT_EQ(c.routing.strategy, Strategy::kPrefixAware);
  EXPECT_EQ(c.routing.prefix_length, 1024u);
  EXPECT_EQ(c.routing.concurrency_threshold, 8u);
  EXPECT_EQ(c.routing.spill, SpillMode::kNextPreferred);
  EXPECT_EQ(c.timeouts.connect, 5);  // untouched fields keep their defaults
}

// Every scalar flag sets the field its help text names.
TEST(BuildConfig, EveryScalarFlagSetsItsField) {
  GatewayConfig c = Build({"--instance",
                           "http://a:1",
                           "--listen",
                           "[::1]:0",
                           "--io-threads",
                           "3",
                           "--decision-headers",
                           "false",
                           "--unknown-path-status",
                           "403",
                           "--strategy",
                           "least-outstanding-requests",
                           "--prefix-length",
                           "4096",
                           "--concurrency-threshold",
                           "100",
                           "--spill-mode",
                           "least-loaded",
                           "--load-measure",
                           "prompt-tokens",
                           "--balance-factor",
                           "2.5",
                           "--max-request-body-bytes",
                           "2048",
                           "--max-header-bytes",
                           "4096",
                           "--connect-timeout",
                           "1.5",
                           "--first-byte-timeout",
                           "11",
                           "--idle-timeout",
                           "12",
                           "--total-timeout",
                           "13",
                           "--client-read-timeout",
                           "14",
                           "--client-write-timeout",
                           "15",
                           "--client-idle-timeout",
                           "16",
                           "--drain-timeout",
                           "0",
                           "--max-retries",
                           "0",
                           "--health-path",
                           "/ready",
                           "--health-interval",
                           "0.5",
                           "--health-timeout",
                           "0.25",
                           "--unhealthy-threshold",
                           "7",
                           "--healthy-threshold",
                           "8",
                           "--passive-failures",
                           "0"});
  EXPECT_EQ(c.listen_host, "::1");
  EXPECT_EQ(c.listen_port, 0);
  EXPECT_EQ(c.io_threads, 3u);
  EXPECT_FALSE(c.decision_headers);
  EXPECT_EQ(c.unknown_path_status, 403u);
  EXPECT_EQ(c.routing.strategy, Strategy::kLeastOutstanding);
  EXPECT_EQ(c.routing.prefix_length, 4096u);
  EXPECT_EQ(c.routing.concurrency_threshold, 100u);
  EXPECT_EQ(c.routing.spill, SpillMode::kLeastLoaded);
  EXPECT_EQ(c.routing.load_measure, LoadMeasure::kPromptTokens);
  EXPECT_EQ(c.routing.balance_factor, 2.5);
  EXPECT_EQ(c.max_request_body_bytes, 2048u);
  EXPECT_EQ(c.max_header_bytes, 4096u);
  EXPECT_EQ(c.timeouts.connect, 1.5);
  EXPECT_EQ(c.timeouts.first_byte, 11);
  EXPECT_EQ(c.timeouts.idle, 12);
  EXPECT_EQ(c.timeouts.total, 13);
  EXPECT_EQ(c.timeouts.client_read, 14);
  EXPECT_EQ(c.timeouts.client_write, 15);
  EXPECT_EQ(c.timeouts.client_idle, 16);
  EXPECT_EQ(c.timeouts.drain, 0);
  EXPECT_EQ(c.max_retries, 0u);
  EXPECT_EQ(c.health.path, "/ready");
  EXPECT_EQ(c.health.interval, 0.5);
  EXPECT_EQ(c.health.timeout, 0.25);
  EXPECT_EQ(c.health.unhealthy_threshold, 7u);
  EXPECT_EQ(c.health.healthy_threshold, 8u);
  EXPECT_EQ(c.health.passive_failures, 0u);
}

// --tokenizer sets routing.tokenizer; an unknown source is refused naming the flag and the choices.
TEST(BuildConfig, TokenizerFlagSetsTheRoutingSection) {
  GatewayConfig c = Build({"--instance", "http://a:1", "--strategy", "kv-aware", "--tokenizer", "engine"});
  EXPECT_EQ(c.routing.tokenizer, TokenizerSource::kEngine);
  EXPECT_EQ(Build({"--instance", "http://a:1"}).routing.tokenizer, TokenizerSource::kLocal);
  const std::string error = ParseErrorOf({"--tokenizer", "vllm"});
  EXPECT_TRUE(Contains(error, "--tokenizer")) << error;
  EXPECT_TRUE(Contains(error, "local, engine")) << error;
}

// --log-format and --access-log set log.format and log.access_log; --no-access-log clears it.
TEST(BuildConfig, LogFlagsSetTheLogSection) {
  GatewayConfig c = Build({"--instance", "http://a:1", "--log-format", "json", "--access-log"});
  EXPECT_EQ(c.log.format, LogFormat::kJson);
  EXPECT_TRUE(c.log.access_log);
  GatewayConfig d = Build({"--instance", "http://a:1"});
  EXPECT_EQ(d.log.format, LogFormat::kText);
  EXPECT_FALSE(d.log.access_log) << "the access log is off by default";
  const ConfigFlags off = ParseFlags({"--instance", "http://a:1", "--no-access-log"});
  ASSERT_EQ(off.values.size(), 1u);
  EXPECT_EQ(off.values[0].first->path, "log.access_log");
  EXPECT_EQ(off.values[0].second, "false");
  EXPECT_TRUE(Contains(ParseErrorOf({"--log-format", "xml"}), "text, json"));
}

// Flags not given record nothing, so they override nothing.
TEST(ParseFlags, AbsentFlagsStayUnset) {
  ConfigFlags f = ParseFlags({"--instance", "http://a:1"});
  EXPECT_TRUE(f.config_file.empty());
  EXPECT_TRUE(f.values.empty());
  EXPECT_EQ(f.instances, std::vector<std::string>{"http://a:1"});
}

constexpr const char* kFile = R"(
listen: 127.0.0.1:7000
routing: {routing_strategy: random, prefix_length: 2048, concurrency_threshold: 32}
pools:
  llama: {prefix_length: 8192}
  mistral: {routing_strategy: round-robin, concurrency_threshold: 4, balance_factor: 0}
instances:
  - {name: a, url: 'http://10.0.0.1:8001', models: [llama, mistral]}
  - {name: b, url: 'http://10.0.0.2:8001'}
timeouts: {connect: 2, idle: 40}
health: {path: /healthz}
)";

// Flags override the file's fields; fields no flag sets keep the file's values.
TEST(BuildConfig, FlagsOverrideFile) {
  TempFile file(kFile);
  GatewayConfig c = Build(
      {"--config", file.path(), "--listen", "127.0.0.1:9000", "--connect-timeout", "3", "--health-path", "/ready"});
  EXPECT_EQ(c.listen_port, 9000);
  EXPECT_EQ(c.timeouts.connect, 3);
  EXPECT_EQ(c.timeouts.idle, 40);
  EXPECT_EQ(c.health.path, "/ready");
  EXPECT_EQ(c.routing.concurrency_threshold, 32u);
  ASSERT_EQ(c.instances.size(), 2u);
  EXPECT_EQ(c.instances[0].name, "a");
}

// --instance flags replace the file's instances instead of adding to them.
TEST(BuildConfig, InstanceFlagsReplaceFileInstances) {
  TempFile file(kFile);
  GatewayConfig c = Build({"--config", file.path(), "--instance", "c=http://10.0.0.3:8001;models=llama,mistral"});
  ASSERT_EQ(c.instances.size(), 1u);
  EXPECT_EQ(c.instances[0].name, "c");
  EXPECT_EQ(c.instances[0].models, (std::vector<std::string>{"llama", "mistral"}));
}

// A routing flag reaches the file's pools for the fields they do not set, as if it were written
// in the file's `routing` section; fields a pool sets stay.
TEST(BuildConfig, RoutingFlagsReachPoolsThatDoNotSetTheField) {
  TempFile file(kFile);
  GatewayConfig c = Build({"--config", file.path(), "--strategy", "prefix-aware", "--prefix-length", "1024",
                           "--concurrency-threshold", "16"});
  EXPECT_EQ(c.routing.strategy, Strategy::kPrefixAware);
  const RoutingOptions& llama = c.pools.at("llama");
  EXPECT_EQ(llama.strategy, Strategy::kPrefixAware);
  EXPECT_EQ(llama.prefix_length, 8192u);
  EXPECT_EQ(llama.concurrency_threshold, 16u);
  const RoutingOptions& mistral = c.pools.at("mistral");
  EXPECT_EQ(mistral.strategy, Strategy::kRoundRobin);
  EXPECT_EQ(mistral.prefix_length, 1024u);
  EXPECT_EQ(mistral.concurrency_threshold, 4u);
}

// --balance-factor sets the default pool's factor and reaches the file's pools that do not set
// their own (mistral sets 0, threshold only, and keeps it); without the flag the file decides.
TEST(BuildConfig, BalanceFactorFlagReachesPoolsThatDoNotSetIt) {
  TempFile file(kFile);
  GatewayConfig c = Build({"--config", file.path(), "--balance-factor", "3"});
  EXPECT_EQ(c.routing.balance_factor, 3);
  EXPECT_EQ(c.pools.at("llama").balance_factor, 3);
  EXPECT_EQ(c.pools.at("mistral").balance_factor, 0);

  c = Build({"--config", file.path()});
  EXPECT_EQ(c.routing.balance_factor, kDefaultBalanceFactor);
  EXPECT_EQ(c.pools.at("llama").balance_factor, kDefaultBalanceFactor);
  EXPECT_EQ(c.pools.at("mistral").balance_factor, 0);

  c = Build({"--instance", "http://a:1", "--balance-factor", "0"});
  EXPECT_EQ(c.routing.balance_factor, 0);
}

// A missing --config file is NotFound naming the path.
TEST(BuildConfig, MissingConfigFileIsNotFound) {
  const std::string path = "/nonexistent/prefix-router.yaml";
  Status s = BuildErrorOf({"--config", path, "--instance", "http://a:1"});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s.message(), path)) << s.message();
}

// Without any instance the error says how to give one.
TEST(BuildConfig, NoInstanceSuggestsTheFlag) {
  Status s = BuildErrorOf({"--listen", "127.0.0.1:0"});
  EXPECT_TRUE(Contains(s.message(), "instances: at least one instance is required")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "--instance")) << s.message();
}

// Ranges of flag values are checked by ValidateConfig, with the YAML path and the range.
TEST(BuildConfig, FlagRangesAreCheckedByValidateConfig) {
  Status s = BuildErrorOf({"--instance", "http://a:1", "--prefix-length", "10"});
  EXPECT_TRUE(Contains(s.message(), "routing.prefix_length: 10 is outside the allowed range 1024..65536"))
      << s.message();
  s = BuildErrorOf({"--instance", "http://a:1", "--first-byte-timeout", "0"});
  EXPECT_TRUE(Contains(s.message(), "timeouts.first_byte: 0 is outside the allowed range (0, 3600]")) << s.message();
  s = BuildErrorOf({"--instance", "http://a:1", "--balance-factor", "0.5"});
  EXPECT_TRUE(Contains(s.message(), "routing.balance_factor: 0.5 is outside the allowed range 1..100 (or 0 = off)"))
      << s.message();
  s = BuildErrorOf({"--instance", "http://a:1", "--balance-factor", "101"});
  EXPECT_TRUE(Contains(s.message(), "routing.balance_factor: 101 is outside the allowed range")) << s.message();
  s = BuildErrorOf({"--instance", "ftp://a:1"});
  EXPECT_TRUE(Contains(s.message(), "is not http(s)://host[:port][/path]")) << s.message();
}

// --instance accepts URL, NAME=URL and NAME=URL;weight=N;models=a,b.
TEST(ParseInstanceFlag, AcceptedForms) {
  Result<InstanceConfig> url = ParseInstanceFlag("http://127.0.0.1:8001/v1");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->name, "");
  EXPECT_EQ(url->url, "http://127.0.0.1:8001/v1");
  EXPECT_EQ(url->weight, 1u);
  EXPECT_TRUE(url->models.empty());

  Result<InstanceConfig> named = ParseInstanceFlag("b=http://127.0.0.1:8002");
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->name, "b");
  EXPECT_EQ(named->url, "http://127.0.0.1:8002");

  Result<InstanceConfig> full = ParseInstanceFlag("c=http://h:1;weight=3;models=llama,my-lora");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->name, "c");
  EXPECT_EQ(full->url, "http://h:1");
  EXPECT_EQ(full->weight, 3u);
  EXPECT_EQ(full->models, (std::vector<std::string>{"llama", "my-lora"}));

  Result<InstanceConfig> unnamed = ParseInstanceFlag("http://h:1;models=llama");
  ASSERT_TRUE(unnamed.ok()) << unnamed.status().ToString();
  EXPECT_EQ(unnamed->name, "");
  EXPECT_EQ(unnamed->models, std::vector<std::string>{"llama"});
}

// Malformed --instance values are errors that name the flag and the value.
TEST(ParseInstanceFlag, InvalidSyntaxNamesTheFlag) {
  for (const std::string spec :
       {"", "=http://h:1", "a=", "a=http://h:1;weight=abc", "a=http://h:1;weight=-1", "a=http://h:1;colour=red",
        "a=http://h:1;models=x,,y", "a=http://h:1;weight=1;weight=2", "a=http://h:1;", "a=http://h:1;weight"}) {
    Result<InstanceConfig> r = ParseInstanceFlag(spec);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_TRUE(Contains(r.status().message(), "--instance '" + spec + "'")) << r.status().message();
  }
  Status s = BuildErrorOf({"--instance", "a=http://h:1;colour=red"});
  EXPECT_TRUE(Contains(s.message(), "--instance 'a=http://h:1;colour=red': unknown attribute")) << s.message();
}

// Instance weight ranges are checked by validation, like the YAML field.
TEST(ParseInstanceFlag, WeightRangeIsValidated) {
  Status s = BuildErrorOf({"--instance", "a=http://h:1;weight=0"});
  EXPECT_TRUE(Contains(s.message(), "instances[0].weight: 0 is outside the allowed range 1..10000")) << s.message();
}

// Values that are not of the flag's type fail the parse naming the flag.
TEST(ParseFlags, MalformedValuesNameTheFlag) {
  EXPECT_TRUE(Contains(ParseErrorOf({"--prefix-length", "abc"}), "--prefix-length: expected"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--prefix-length", "0x800"}), "--prefix-length"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--max-request-body-bytes=-1"}), "--max-request-body-bytes"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--max-retries=-1"}), "--max-retries"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--io-threads", "4294967296"}), "--io-threads"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--connect-timeout", "soon"}),
                       "--connect-timeout: expected a number of seconds, got 'soon'"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--connect-timeout", "nan"}), "--connect-timeout"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--decision-headers", "maybe"}),
                       "--decision-headers: expected true or false, got 'maybe'"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--strategy", "fastest"}), "--strategy: 'fastest' is not one of random"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--spill-mode", "anywhere"}), "--spill-mode: 'anywhere'"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--load-measure", "tokens"}),
                       "--load-measure: 'tokens' is not one of requests, prompt-tokens, engine"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--balance-factor", "high"}), "--balance-factor: expected a number, got 'high'"));
  EXPECT_TRUE(Contains(ParseErrorOf({"--balance-factor", "inf"}), "--balance-factor: expected"));
}

// --decision-headers takes an explicit true or false.
TEST(ParseFlags, DecisionHeadersTakesTrueOrFalse) {
  EXPECT_TRUE(Build({"--instance", "http://a:1", "--decision-headers", "true"}).decision_headers);
  EXPECT_FALSE(Build({"--instance", "http://a:1", "--decision-headers", "false"}).decision_headers);
  EXPECT_FALSE(ParseErrorOf({"--decision-headers"}).empty());
}

// --unknown-path-status is validated like the YAML field: one of the documented codes.
TEST(BuildConfig, UnknownPathStatusFlagIsValidated) {
  Result<GatewayConfig> c = BuildConfig(ParseFlags({"--instance", "http://a:1", "--unknown-path-status", "410"}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->unknown_path_status, 410u);
  const Status bad = BuildErrorOf({"--instance", "http://a:1", "--unknown-path-status", "500"});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.message(), "unknown_path_status: 500")) << bad.message();
}

// A single-valued flag given twice is an error rather than a silent choice.
TEST(ParseFlags, SingleValuedFlagTwiceIsAnError) {
  EXPECT_FALSE(ParseErrorOf({"--listen", "a:1", "--listen", "b:2"}).empty());
}

// Every flag's help text names the YAML field it sets, its default and its range.
TEST(AddConfigFlags, HelpTextStatesFieldDefaultAndRange) {
  struct Expected {
    std::string field;
    std::string default_value;
  };
  const std::map<std::string, Expected> expected = {
      {"--config", {"YAML configuration file", "none"}},
      {"--listen", {"listen", "127.0.0.1:8080"}},
      {"--io-threads", {"io_threads", "0"}},
      {"--decision-headers", {"decision_headers", "true"}},
      {"--unknown-path-status", {"unknown_path_status", "404"}},
      {"--strategy", {"routing.routing_strategy", "cache-aware"}},
      {"--prefix-length", {"routing.prefix_length", "2048"}},
      {"--concurrency-threshold", {"routing.concurrency_threshold", "64"}},
      {"--spill-mode", {"routing.spill_mode", "next-preferred"}},
      {"--load-measure", {"routing.load_measure", "requests"}},
      {"--tokenizer", {"routing.tokenizer", "local"}},
      {"--balance-factor", {"routing.balance_factor", "1.5"}},
      {"--canonical-json", {"routing.key_normalisation.canonical_json", "false"}},
      {"--exclude-field", {"routing.key_normalisation.exclude_fields", "none"}},
      {"--exclude-pattern", {"routing.key_normalisation.exclude_patterns", "none"}},
      {"--instance", {"instances", "none"}},
      {"--max-request-body-bytes", {"limits.max_request_body_bytes", "33554432"}},
      {"--max-header-bytes", {"limits.max_header_bytes", "65536"}},
      {"--connect-timeout", {"timeouts.connect", "5"}},
      {"--first-byte-timeout", {"timeouts.first_byte", "300"}},
      {"--idle-timeout", {"timeouts.idle", "120"}},
      {"--total-timeout", {"timeouts.total", "0"}},
      {"--client-read-timeout", {"timeouts.client_read", "30"}},
      {"--client-write-timeout", {"timeouts.client_write", "60"}},
      {"--client-idle-timeout", {"timeouts.client_idle", "60"}},
      {"--drain-timeout", {"timeouts.drain", "30"}},
      {"--per-try-timeout", {"timeouts.per_try_first_byte", "0"}},
      {"--max-retries", {"retries.max_retries", "2"}},
      {"--health-path", {"health.path", "/health"}},
      {"--health-interval", {"health.interval", "5"}},
      {"--health-timeout", {"health.timeout", "2"}},
      {"--unhealthy-threshold", {"health.unhealthy_threshold", "3"}},
      {"--healthy-threshold", {"health.healthy_threshold", "2"}},
      {"--passive-failures", {"health.passive_failures", "1"}},
      {"--max-in-flight", {"routing.max_in_flight", "0"}},
      {"--max-queue", {"routing.flow_control.max_queue", "0"}},
      {"--max-queue-wait", {"routing.flow_control.max_queue_wait", "10"}},
      {"--max-connections", {"limits.max_connections", "auto"}},
      {"--max-connections-per-client", {"limits.max_connections_per_client", "0"}},
      {"--log-format", {"log.format", "text"}},
      {"--compat", {"routing.compatibility", "none"}},
      {"--access-log", {"log.access_log", "false"}},
      {"--epp-listen", {"epp.listen", "\"\""}},
      {"--set", {"by its YAML path", "none"}},
  };
  CLI::App app{"serve"};
  ConfigFlags flags;
  AddConfigFlags(app, flags);
  size_t checked = 0;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt == app.get_help_ptr()) continue;
    const std::string name = opt->get_name();
    auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << "flag without an expectation: " << name;
    const std::string& help = opt->get_description();
    EXPECT_TRUE(Contains(help, it->second.field)) << name << ": " << help;
    EXPECT_TRUE(Contains(help, "Default: " + it->second.default_value)) << name << ": " << help;
    if (name != "--config") {
      EXPECT_TRUE(Contains(help, "Range: ")) << name << ": " << help;
    }
    ++checked;
  }
  EXPECT_EQ(checked, expected.size());
}

}  // namespace
}  // namespace prefix_router::gateway
