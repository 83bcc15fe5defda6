// The overload settings: routing.max_in_flight (per pool, inherited by pools like any routing
// field) and limits.max_connections, from YAML and from flags, with their ranges.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gateway/config.h"
#include "gateway/config_flags.h"

namespace prefix_router::gateway {
namespace {

GatewayConfig ParseValid(const std::string& yaml) {
  Result<GatewayConfig> r = ParseConfigYaml(yaml);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  GatewayConfig c = std::move(r).value();
  const Status s = ValidateConfig(c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

// The validation error of `yaml` ("" when valid).
std::string ValidationError(const std::string& yaml) {
  Result<GatewayConfig> r = ParseConfigYaml(yaml);
  if (!r.ok()) return r.status().message();
  GatewayConfig c = std::move(r).value();
  const Status s = ValidateConfig(c);
  return s.ok() ? "" : s.message();
}

constexpr const char* kInstances = "instances: [{url: 'http://127.0.0.1:8001'}]\n";

// Both default to off; YAML sets them, pools inherit routing.max_in_flight unless they set
// their own.
TEST(OverloadConfig, YamlSetsCeilingsAndPoolsInherit) {
  GatewayConfig d = ParseValid(kInstances);
  EXPECT_EQ(d.routing.max_in_flight, 0u);
  EXPECT_EQ(d.max_connections, kAutoMaxConnections);  // derived from the descriptor limit

  GatewayConfig c = ParseValid(std::string(kInstances) + R"(
routing: {max_in_flight: 100}
pools:
  llama: {prefix_length: 4096}
  mistral: {max_in_flight: 7}
limits: {max_connections: 5000}
)");
  EXPECT_EQ(ParseValid(std::string(kInstances) + "limits: {max_connections: auto}\n").max_connections,
            kAutoMaxConnections);
  EXPECT_EQ(ParseValid(std::string(kInstances) + "limits: {max_connections: 0}\n").max_connections, 0u);
  EXPECT_EQ(c.routing.max_in_flight, 100u);
  EXPECT_EQ(c.pools.at("llama").max_in_flight, 100u);
  EXPECT_EQ(c.pools.at("mistral").max_in_flight, 7u);
  EXPECT_EQ(c.max_connections, 5000u);
}

// Out-of-range values are refused with the field's YAML path and its range.
TEST(OverloadConfig, RangesNameTheField) {
  const std::string too_many_in_flight =
      ValidationError(std::string(kInstances) + "routing: {max_in_flight: 1000001}\n");
  EXPECT_NE(too_many_in_flight.find("routing.max_in_flight"), std::string::npos) << too_many_in_flight;
  EXPECT_NE(too_many_in_flight.find("0..1000000"), std::string::npos) << too_many_in_flight;
  const std::string pool = ValidationError(std::string(kInstances) + "pools: {m: {max_in_flight: 2000000}}\n");
  EXPECT_NE(pool.find("pools.m.max_in_flight"), std::string::npos) << pool;
  const std::string connections = ValidationError(std::string(kInstances) + "limits: {max_connections: 1000001}\n");
  EXPECT_NE(connections.find("limits.max_connections"), std::string::npos) << connections;
  EXPECT_NE(connections.find("0..1000000 or auto"), std::string::npos) << connections;
  const std::string word = ValidationError(std::string(kInstances) + "limits: {max_connections: many}\n");
  EXPECT_NE(word.find("limits.max_connections"), std::string::npos) << word;
  const std::string negative = ValidationError(std::string(kInstances) + "routing: {max_in_flight: -1}\n");
  EXPECT_NE(negative.find("routing.max_in_flight"), std::string::npos) << negative;
}

ConfigFlags ParseFlags(std::vector<std::string> args) {
  CLI::App app{"serve"};
  ConfigFlags flags;
  AddConfigFlags(app, flags);
  std::reverse(args.begin(), args.end());  // CLI11 consumes the vector from the back
  app.parse(args);
  return flags;
}

// --max-in-flight sets the default pool's ceiling and reaches the file's pools that do not set
// their own; --max-connections sets limits.max_connections.
TEST(OverloadConfig, FlagsSetCeilings) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("overload_config_test_" + std::to_string(::getpid()) + ".yaml"))
          .string();
  std::ofstream(path) << std::string(kInstances) << "pools:\n  llama: {}\n  mistral: {max_in_flight: 3}\n";
  Result<GatewayConfig> r =
      BuildConfig(ParseFlags({"--config", path, "--max-in-flight", "50", "--max-connections", "64"}));
  std::filesystem::remove(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->routing.max_in_flight, 50u);
  EXPECT_EQ(r->pools.at("llama").max_in_flight, 50u);
  EXPECT_EQ(r->pools.at("mistral").max_in_flight, 3u);
  EXPECT_EQ(r->max_connections, 64u);

  Result<GatewayConfig> automatic = BuildConfig(ParseFlags({"--instance", "http://a:1", "--max-connections", "auto"}));
  ASSERT_TRUE(automatic.ok()) << automatic.status().ToString();
  EXPECT_EQ(automatic->max_connections, kAutoMaxConnections);
  EXPECT_THROW(ParseFlags({"--instance", "http://a:1", "--max-connections", "lots"}), CLI::ConversionError);

  Result<GatewayConfig> bad = BuildConfig(ParseFlags({"--instance", "http://a:1", "--max-connections", "2000000"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("limits.max_connections"), std::string::npos);
}

// timeouts.per_try_first_byte: off by default, (0, 3600] seconds when set, from YAML and flag.
TEST(OverloadConfig, PerTryFirstByteTimeout) {
  EXPECT_EQ(ParseValid(kInstances).timeouts.per_try_first_byte, 0);
  EXPECT_EQ(ParseValid(std::string(kInstances) + "timeouts: {per_try_first_byte: 2.5}\n").timeouts.per_try_first_byte,
            2.5);
  const std::string negative = ValidationError(std::string(kInstances) + "timeouts: {per_try_first_byte: -1}\n");
  EXPECT_NE(negative.find("timeouts.per_try_first_byte"), std::string::npos) << negative;
  const std::string large = ValidationError(std::string(kInstances) + "timeouts: {per_try_first_byte: 3601}\n");
  EXPECT_NE(large.find("[0, 3600] (0 = off)"), std::string::npos) << large;
  Result<GatewayConfig> r = BuildConfig(ParseFlags({"--instance", "http://a:1", "--per-try-timeout", "4"}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->timeouts.per_try_first_byte, 4);
}

// limits.max_connections_per_client: off by default, 0..1000000, from YAML and flag; restart
// required to change.
TEST(OverloadConfig, PerClientConnectionLimit) {
  EXPECT_EQ(ParseValid(kInstances).max_connections_per_client, 0u);
  EXPECT_EQ(
      ParseValid(std::string(kInstances) + "limits: {max_connections_per_client: 50}\n").max_connections_per_client,
      50u);
  const std::string over = ValidationError(std::string(kInstances) + "limits: {max_connections_per_client: 1000001}\n");
  EXPECT_NE(over.find("limits.max_connections_per_client"), std::string::npos) << over;
  Result<GatewayConfig> r = BuildConfig(ParseFlags({"--instance", "http://a:1", "--max-connections-per-client", "8"}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->max_connections_per_client, 8u);
}

// metrics: listener client (default) or admin (which needs the admin listener), require_key
// (which needs client keys); unknown values name the allowed ones.
TEST(OverloadConfig, MetricsSection) {
  const GatewayConfig d = ParseValid(kInstances);
  EXPECT_EQ(d.metrics.listener, MetricsListener::kClient);
  EXPECT_FALSE(d.metrics.require_key);
  const GatewayConfig admin = ParseValid(std::string(kInstances) + "admin: {}\nmetrics: {listener: admin}\n");
  EXPECT_EQ(admin.metrics.listener, MetricsListener::kAdmin);
  const std::string no_admin = ValidationError(std::string(kInstances) + "metrics: {listener: admin}\n");
  EXPECT_NE(no_admin.find("metrics.listener"), std::string::npos) << no_admin;
  const std::string word = ValidationError(std::string(kInstances) + "metrics: {listener: both}\n");
  EXPECT_NE(word.find("client, admin"), std::string::npos) << word;
  const std::string no_keys = ValidationError(std::string(kInstances) + "metrics: {require_key: true}\n");
  EXPECT_NE(no_keys.find("metrics.require_key"), std::string::npos) << no_keys;
}

// An admin listener that is not loopback needs a token of 16 characters at least; loopback
// takes any token.
TEST(OverloadConfig, RemoteAdminTokenLength) {
  ::setenv("PR_TEST_ADMIN_SHORT", "x", 1);
  ::setenv("PR_TEST_ADMIN_LONG", "0123456789abcdef", 1);
  const std::string short_remote =
      ValidationError(std::string(kInstances) + "admin: {listen: '0.0.0.0:9090', token_env: PR_TEST_ADMIN_SHORT}\n");
  EXPECT_NE(short_remote.find("shorter than 16"), std::string::npos) << short_remote;
  EXPECT_EQ(short_remote.find("'x'"), std::string::npos) << "the token must not be echoed: " << short_remote;
  EXPECT_EQ(
      ValidationError(std::string(kInstances) + "admin: {listen: '0.0.0.0:9090', token_env: PR_TEST_ADMIN_LONG}\n"),
      "");
  EXPECT_EQ(
      ValidationError(std::string(kInstances) + "admin: {listen: '127.0.0.1:9090', token_env: PR_TEST_ADMIN_SHORT}\n"),
      "");
}

}  // namespace
}  // namespace prefix_router::gateway
