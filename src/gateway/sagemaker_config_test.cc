// The managed service's configuration names (SageMaker's RoutingConfig block) and the
// `compatibility: sagemaker` preset, from YAML and from flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gateway/config.h"
#include "gateway/config_flags.h"
#include "gateway/gateway_test_util.h"

namespace prefix_router::gateway {
namespace {

using testing::TempFile;

Status ValidateYaml(const std::string& yaml, GatewayConfig* out = nullptr) {
  return testing::ValidateYaml("instances: [{url: 'http://127.0.0.1:8001'}]\n" + yaml, out);
}

void ExpectInvalid(const Status& s, const std::string& fragment) {
  ASSERT_FALSE(s.ok()) << "expected an error containing " << fragment;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << "'" << fragment << "' not in: " << s.message();
}

Result<GatewayConfig> Build(std::vector<std::string> args) {
  CLI::App app{"serve"};
  ConfigFlags flags;
  AddConfigFlags(app, flags);
  std::reverse(args.begin(), args.end());
  app.parse(args);
  return BuildConfig(flags);
}

// The block alone sets the default pool; inside a pool, that pool.
TEST(SageMakerConfigTest, RoutingConfigSetsTheDefaultPoolAndPools) {
  GatewayConfig c;
  ASSERT_TRUE(ValidateYaml("RoutingConfig:\n"
                           "  RoutingStrategy: PREFIX_AWARE\n"
                           "  PrefixAwareRoutingConfig: {PrefixLength: 4096, ConcurrencyThreshold: 16}\n"
                           "pools:\n"
                           "  llama: {RoutingConfig: {RoutingStrategy: LEAST_OUTSTANDING_REQUESTS}}\n"
                           "  lora:\n"
                           "    RoutingConfig:\n"
                           "      RoutingStrategy: PREFIX_AWARE\n"
                           "      PrefixAwareRoutingConfig: {PrefixLength: 1024, ConcurrencyThreshold: 2}\n",
                           &c)
                  .ok());
  EXPECT_EQ(c.routing.strategy, Strategy::kPrefixAware);
  EXPECT_EQ(c.routing.prefix_length, 4096u);
  EXPECT_EQ(c.routing.concurrency_threshold, 16u);
  EXPECT_EQ(c.pools.at("llama").strategy, Strategy::kLeastOutstanding);
  EXPECT_EQ(c.pools.at("llama").prefix_length, 4096u);  // inherited from the default pool
  EXPECT_EQ(c.pools.at("lora").prefix_length, 1024u);
  EXPECT_EQ(c.pools.at("lora").concurrency_threshold, 2u);
  ASSERT_TRUE(ValidateYaml("RoutingConfig: {RoutingStrategy: RANDOM}\n", &c).ok());
  EXPECT_EQ(c.routing.strategy, Strategy::kRandom);
}

// The service's rules, each error naming the service's field.
TEST(SageMakerConfigTest, TheServiceRulesAreEnforced) {
  ExpectInvalid(ValidateYaml("RoutingConfig: {}\n"), "RoutingConfig.RoutingStrategy: required");
  ExpectInvalid(ValidateYaml("RoutingConfig: {RoutingStrategy: prefix-aware}\n"),
                "RoutingConfig.RoutingStrategy: 'prefix-aware' is not one of RANDOM, LEAST_OUTSTANDING_REQUESTS");
  ExpectInvalid(ValidateYaml("RoutingConfig: {RoutingStrategy: PREFIX_AWARE}\n"),
                "RoutingConfig.PrefixAwareRoutingConfig.PrefixLength: required with RoutingStrategy PREFIX_AWARE");
  ExpectInvalid(ValidateYaml("RoutingConfig: {RoutingStrategy: PREFIX_AWARE, PrefixAwareRoutingConfig: "
                             "{PrefixLength: 2048}}\n"),
                "RoutingConfig.PrefixAwareRoutingConfig.ConcurrencyThreshold: required");
  ExpectInvalid(ValidateYaml("RoutingConfig: {RoutingStrategy: RANDOM, PrefixAwareRoutingConfig: "
                             "{PrefixLength: 2048, ConcurrencyThreshold: 4}}\n"),
                "RoutingConfig.PrefixAwareRoutingConfig: only with RoutingStrategy PREFIX_AWARE");
  ExpectInvalid(ValidateYaml("RoutingConfig: {RoutingStrategy: PREFIX_AWARE, PrefixAwareRoutingConfig: "
                             "{PrefixLength: 100, ConcurrencyThreshold: 4}}\n"),
                "RoutingConfig.PrefixAwareRoutingConfig.PrefixLength: 100 is outside the allowed range 1024..65536");
  ExpectInvalid(ValidateYaml("pools: {m: {RoutingConfig: {RoutingStrategy: PREFIX_AWARE, PrefixAwareRoutingConfig: "
                             "{PrefixLength: 2048, ConcurrencyThreshold: 1025}}}}\n"),
                "pools.m.RoutingConfig.PrefixAwareRoutingConfig.ConcurrencyThreshold: 1025 is outside the allowed "
                "range 1..1024");
  ExpectInvalid(ValidateYaml("RoutingConfig: {RoutingStrategy: RANDOM, Extra: 1}\n"),
                "RoutingConfig.Extra: unknown field");
}

// One setting under both names in one scope is refused, in either order.
TEST(SageMakerConfigTest, BothNamesForOneSettingAreRefused) {
  ExpectInvalid(ValidateYaml("routing: {routing_strategy: random}\nRoutingConfig: {RoutingStrategy: RANDOM}\n"),
                "RoutingConfig.RoutingStrategy and routing.routing_strategy set the same thing");
  ExpectInvalid(ValidateYaml("RoutingConfig: {RoutingStrategy: PREFIX_AWARE, PrefixAwareRoutingConfig: "
                             "{PrefixLength: 2048, ConcurrencyThreshold: 4}}\nrouting: {prefix_length: 1024}\n"),
                "RoutingConfig.PrefixAwareRoutingConfig.PrefixLength and routing.prefix_length");
  ExpectInvalid(ValidateYaml("pools: {m: {concurrency_threshold: 3, RoutingConfig: {RoutingStrategy: PREFIX_AWARE, "
                             "PrefixAwareRoutingConfig: {PrefixLength: 2048, ConcurrencyThreshold: 4}}}}\n"),
                "pools.m.RoutingConfig.PrefixAwareRoutingConfig.ConcurrencyThreshold and "
                "pools.m.concurrency_threshold");
  // Different settings under the two names are fine.
  GatewayConfig c;
  ASSERT_TRUE(ValidateYaml("RoutingConfig: {RoutingStrategy: RANDOM}\nrouting: {prefix_length: 1024}\n", &c).ok());
  EXPECT_EQ(c.routing.prefix_length, 1024u);
}

// The preset: the service's spill behaviour, and RANDOM unless a strategy is given (file or flag).
TEST(SageMakerConfigTest, CompatibilityPresetFromYamlAndFlag) {
  GatewayConfig c;
  ASSERT_TRUE(ValidateYaml("routing: {compatibility: sagemaker}\npools: {m: {prefix_length: 4096}}\n", &c).ok());
  EXPECT_EQ(c.routing.strategy, Strategy::kRandom);
  EXPECT_EQ(c.routing.spill, SpillMode::kLeastLoaded);
  EXPECT_EQ(c.routing.balance_factor, 0);
  EXPECT_EQ(c.pools.at("m").compatibility, Compatibility::kSageMaker);
  EXPECT_EQ(c.pools.at("m").strategy, Strategy::kRandom);
  ASSERT_TRUE(
      ValidateYaml("routing: {balance_factor: 0, compatibility: sagemaker, routing_strategy: prefix-aware}\n", &c)
          .ok());
  EXPECT_EQ(c.routing.strategy, Strategy::kPrefixAware);
  ExpectInvalid(ValidateYaml("routing: {balance_factor: 2, compatibility: sagemaker}\n"),
                "routing.balance_factor: compatibility sagemaker fixes");
  ExpectInvalid(ValidateYaml("routing: {compatibility: sagemaker, spill_mode: next-preferred}\n"),
                "routing.spill_mode: compatibility sagemaker fixes");

  Result<GatewayConfig> flag = Build({"--instance", "http://127.0.0.1:1", "--compat", "sagemaker"});
  ASSERT_TRUE(flag.ok()) << flag.status().ToString();
  EXPECT_EQ(flag->routing.strategy, Strategy::kRandom);
  EXPECT_EQ(flag->routing.spill, SpillMode::kLeastLoaded);
  EXPECT_EQ(flag->routing.balance_factor, 0);
  flag = Build({"--instance", "http://127.0.0.1:1", "--strategy", "prefix-aware", "--compat", "sagemaker"});
  ASSERT_TRUE(flag.ok()) << flag.status().ToString();
  EXPECT_EQ(flag->routing.strategy, Strategy::kPrefixAware);
  EXPECT_EQ(flag->routing.balance_factor, 0);
  // A flag contradicting the preset, whatever the order.
  for (auto args : {std::vector<std::string>{"--balance-factor", "2", "--compat", "sagemaker"},
                    std::vector<std::string>{"--compat", "sagemaker", "--balance-factor", "2"}}) {
    args.insert(args.begin(), {"--instance", "http://127.0.0.1:1"});
    flag = Build(args);
    ASSERT_FALSE(flag.ok());
    EXPECT_NE(flag.status().message().find("routing.balance_factor: compatibility sagemaker fixes"), std::string::npos)
        << flag.status().message();
  }
  // A file that names its strategy keeps it under the flag; pools without one follow.
  TempFile file("compat.yaml");
  file.Write(
      "instances: [{url: 'http://127.0.0.1:8001'}]\n"
      "RoutingConfig: {RoutingStrategy: PREFIX_AWARE, PrefixAwareRoutingConfig: "
      "{PrefixLength: 2048, ConcurrencyThreshold: 4}}\n"
      "pools: {m: {prefix_length: 4096}, n: {RoutingConfig: {RoutingStrategy: LEAST_OUTSTANDING_REQUESTS}}}\n");
  flag = Build({"--config", file.path(), "--compat", "sagemaker"});
  ASSERT_TRUE(flag.ok()) << flag.status().ToString();
  EXPECT_EQ(flag->routing.strategy, Strategy::kPrefixAware);
  EXPECT_EQ(flag->routing.spill, SpillMode::kLeastLoaded);
  EXPECT_EQ(flag->pools.at("m").strategy, Strategy::kPrefixAware);
  EXPECT_EQ(flag->pools.at("m").compatibility, Compatibility::kSageMaker);
  EXPECT_EQ(flag->pools.at("n").strategy, Strategy::kLeastOutstanding);
  file.Write("instances: [{url: 'http://127.0.0.1:8001'}]\npools: {m: {prefix_length: 4096}}\n");
  flag = Build({"--config", file.path(), "--compat", "sagemaker"});
  ASSERT_TRUE(flag.ok()) << flag.status().ToString();
  EXPECT_EQ(flag->routing.strategy, Strategy::kRandom);
  EXPECT_EQ(flag->pools.at("m").strategy, Strategy::kRandom);
}

}  // namespace
}  // namespace prefix_router::gateway
