// The `key_normalisation` settings of `routing` and `pools.NAME`, from YAML and from flags.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gateway/config.h"
#include "gateway/config_flags.h"
#include "gateway/gateway_test_util.h"

namespace prefix_router::gateway {
namespace {

constexpr const char* kInstances = R"(
instances:
  - url: http://127.0.0.1:8001
)";

Result<GatewayConfig> Load(const std::string& yaml) {
  Result<GatewayConfig> r = ParseConfigYaml(yaml + kInstances);
  if (!r.ok()) return r.status();
  GatewayConfig c = std::move(r).value();
  if (Status s = ValidateConfig(c); !s.ok()) return s;
  return c;
}

std::string ErrorOf(const std::string& yaml) {
  Result<GatewayConfig> r = Load(yaml);
  return r.ok() ? "" : r.status().message();
}

// The routing section's settings reach every pool; a pool overrides them field by field.
TEST(KeyNormalisationConfig, RoutingAndPoolsFieldByField) {
  Result<GatewayConfig> r = Load(R"(
routing:
  key_normalisation:
    canonical_json: true
    exclude_fields: [timestamp, metadata.trace_id]
pools:
  a: {prefix_length: 4096}
  b:
    key_normalisation:
      exclude_fields: [request_id]
      exclude_patterns: ['\d{4}-\d\d-\d\dT\S+Z']
  c:
    key_normalisation: {canonical_json: false, exclude_fields: []}
)");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const KeyNormalisation& d = r->routing.key_normalisation;
  EXPECT_TRUE(d.canonical_json);
  EXPECT_EQ(d.exclude_fields, (std::vector<std::string>{"timestamp", "metadata.trace_id"}));
  EXPECT_EQ(r->pools.at("a").key_normalisation, d);
  const KeyNormalisation& b = r->pools.at("b").key_normalisation;
  EXPECT_TRUE(b.canonical_json);
  EXPECT_EQ(b.exclude_fields, std::vector<std::string>{"request_id"});
  EXPECT_EQ(b.exclude_patterns, std::vector<std::string>{R"(\d{4}-\d\d-\d\dT\S+Z)"});
  EXPECT_FALSE(r->pools.at("c").key_normalisation.enabled());
  // Off by default: the managed service's raw-byte key.
  EXPECT_FALSE(GatewayConfig{}.routing.key_normalisation.enabled());
}

// Errors name the YAML path of the bad setting.
TEST(KeyNormalisationConfig, ErrorsNameTheField) {
  EXPECT_EQ(ErrorOf("routing: {key_normalisation: {exclude_fields: ['a..b']}}")
                .rfind("routing.key_normalisation.exclude_fields[0]: 'a..b' has an empty segment", 0),
            0u);
  EXPECT_EQ(ErrorOf("pools: {m: {key_normalisation: {exclude_patterns: [ok, '(']}}}")
                .rfind("pools.m.key_normalisation.exclude_patterns[1]: '(' is not a valid regular expression", 0),
            0u);
  EXPECT_NE(ErrorOf("routing: {key_normalisation: {canonical: true}}")
                .find("routing.key_normalisation.canonical: unknown field"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf("routing: {key_normalisation: {exclude_fields: a}}").find("routing.key_normalisation.exclude_fields"),
      std::string::npos);
  EXPECT_NE(
      ErrorOf("routing: {key_normalisation: {canonical_json: maybe}}").find("routing.key_normalisation.canonical_json"),
      std::string::npos);
}

ConfigFlags ParseFlags(std::vector<std::string> args) {
  CLI::App app{"serve"};
  ConfigFlags flags;
  AddConfigFlags(app, flags);
  std::reverse(args.begin(), args.end());  // CLI11 consumes the vector from the back
  app.parse(args);
  return flags;
}

// Flags set the default pool's normalisation; file pools that leave a field unset inherit it.
TEST(KeyNormalisationConfig, FlagsSetRoutingAndPoolsInherit) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pr-keynorm-" + std::to_string(::getpid()) + ".yaml")).string();
  {
    std::ofstream out(path);
    out << "pools:\n  m: {key_normalisation: {exclude_fields: [id]}}\n  n: {prefix_length: 4096}\n" << kInstances;
  }
  ConfigFlags f = ParseFlags({"--config", path, "--canonical-json", "true", "--exclude-field", "ts", "--exclude-field",
                              "meta.*", "--exclude-pattern", "req-[0-9]+"});
  Result<GatewayConfig> r = BuildConfig(f);
  std::filesystem::remove(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const KeyNormalisation& d = r->routing.key_normalisation;
  EXPECT_TRUE(d.canonical_json);
  EXPECT_EQ(d.exclude_fields, (std::vector<std::string>{"ts", "meta.*"}));
  EXPECT_EQ(d.exclude_patterns, std::vector<std::string>{"req-[0-9]+"});
  EXPECT_EQ(r->pools.at("n").key_normalisation, d);
  const KeyNormalisation& m = r->pools.at("m").key_normalisation;
  EXPECT_EQ(m.exclude_fields, std::vector<std::string>{"id"});
  EXPECT_TRUE(m.canonical_json);
  EXPECT_EQ(m.exclude_patterns, d.exclude_patterns);
}

// Through a running gateway: with normalisation on, formatting variants of one native body and
// chat bodies that differ only in an excluded timestamp reach the same instance; without it,
// the native variants scatter.
TEST(KeyNormalisationGateway, VariantsRouteAlike) {
  testing::QuietLogs();
  testing::Fakes fakes = testing::StartFakes({"a", "b", "c", "d"});
  auto instances = [&](bool normalise) {
    GatewayConfig c = testing::ConfigFor(fakes);
    c.routing = testing::PlainPrefixAware();
    if (normalise) {
      c.routing.key_normalisation = {true, {"id"}, {R"(\d{4}-\d\d-\d\dT[0-9:]+Z)"}};
    }
    auto g = testing::StartGateway(c);
    std::vector<std::pair<std::string, std::string>> out;  // per document: the two variants' instances
    if (!g) return out;
    const std::string doc(1500, 'x');
    for (int d = 0; d < 16; ++d) {
      const std::string text = "Document " + std::to_string(d) + " " + doc;
      const std::string compact = R"({"id":"req-1","inputs":")" + text + R"(","parameters":{"t":0.7}})";
      const std::string pretty =
          "{\n  \"parameters\": {\"t\": 0.70},\n  \"id\": \"req-2\",\n  \"inputs\": \"" + text + "\"\n}";
      auto one = testing::pt::Post(g->port(), testing::kInvocations, compact);
      auto two = testing::pt::Post(g->port(), testing::kInvocations, pretty);
      EXPECT_EQ(one.status(), 200);
      EXPECT_EQ(two.status(), 200);
      out.emplace_back(one.Header(testing::kInstance), two.Header(testing::kInstance));
      if (normalise) {
        auto chat = [&](std::string time) {
          std::string body = testing::ChatBody("m", "q");
          body.insert(body.find("content\":\"") + 10, "Now " + time + ". " + std::to_string(d) + " ");
          return testing::pt::Post(g->port(), testing::kChat, body).Header(testing::kInstance);
        };
        EXPECT_EQ(chat("2026-11-30T04:03:37Z"), chat("2026-12-01T11:00:00Z")) << d;
      }
    }
    return out;
  };
  const auto normalised = instances(true);
  ASSERT_EQ(normalised.size(), 16u);
  for (const auto& [one, two] : normalised) EXPECT_EQ(one, two);
  const auto raw = instances(false);
  ASSERT_EQ(raw.size(), 16u);
  int apart = 0;
  for (const auto& [one, two] : raw) apart += one != two;
  EXPECT_GT(apart, 4);  // 3/4 expected: the variants' raw keys are unrelated
}

}  // namespace
}  // namespace prefix_router::gateway
