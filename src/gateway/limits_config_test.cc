// Configuration of client keys (`clients`) and per-tenant rate limits (`rate_limits`): parsing,
// validation messages (the YAML path and the allowed range), key loading, and that no message
// ever contains a key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "gateway/config.h"
#include "gateway/gateway_test_util.h"
#include "gateway/operations.h"

namespace prefix_router::gateway {
namespace {

using testing::TempFile;

// `yaml` after one instance (every configuration needs one).
Status ValidateYaml(const std::string& yaml, GatewayConfig* out = nullptr) {
  return testing::ValidateYaml("instances: [{url: 'http://127.0.0.1:8001'}]\n" + yaml, out);
}

constexpr std::string_view kKeyA = "sk-test-aaaaaaaaaaaa";
constexpr std::string_view kKeyB = "sk-test-bbbbbbbbbbbb";

// InvalidArgument with every fragment in its message, and neither test key anywhere in it.
void ExpectInvalid(const Status& s, std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(s.ok()) << "expected an error containing " << *fragments.begin();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  for (const std::string& f : fragments) {
    EXPECT_NE(s.message().find(f), std::string::npos) << "'" << f << "' not in: " << s.message();
  }
  EXPECT_EQ(s.message().find(kKeyA), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(kKeyB), std::string::npos) << s.message();
}

// ------------------------------------------------------------------------------------ clients

// Without a `clients` section no key is asked for.
TEST(ClientsConfigTest, OffByDefault) {
  GatewayConfig c;
  ASSERT_TRUE(ValidateYaml("", &c).ok());
  EXPECT_FALSE(c.clients.enabled);
  EXPECT_EQ(c.clients.key_set, nullptr);
}

// The keys file: "TENANT KEY" or "KEY" lines, comments and blank lines skipped; a lone key is
// named by a fingerprint.
TEST(ClientsConfigTest, KeysFileLinesWithAndWithoutTenant) {
  TempFile file("keys");
  file.Write("# team keys\n\nteam-a " + std::string(kKeyA) + "\n  " + std::string(kKeyB) + "  \n");
  GatewayConfig c;
  ASSERT_TRUE(ValidateYaml("clients: {keys_file: '" + file.path() + "'}\n", &c).ok());
  ASSERT_NE(c.clients.key_set, nullptr);
  EXPECT_EQ(c.clients.key_set->size(), 2u);
  const std::string* a = c.clients.key_set->Find(kKeyA);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(*a, "team-a");
  const std::string* b = c.clients.key_set->Find(kKeyB);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->starts_with("key-") && b->size() == 12) << *b;
  EXPECT_EQ(b->find("bbbb"), std::string::npos);
  EXPECT_EQ(c.clients.key_set->Find("sk-test-aaaaaaaaaaab"), nullptr);
  EXPECT_EQ(c.clients.key_set->Find(""), nullptr);
  EXPECT_EQ(c.clients.key_set->Find(std::string(kKeyA) + "a"), nullptr);
}

// Keys from the environment and from files of their own, each with its tenant.
TEST(ClientsConfigTest, KeysFromEnvironmentAndFiles) {
  TempFile file("web-key");
  file.Write(std::string(kKeyB) + "\n");
  ::setenv("PR_LIMITS_TEST_KEY", std::string(kKeyA).c_str(), 1);
  GatewayConfig c;
  Status s = ValidateYaml(
      "clients:\n  keys:\n    - {tenant: batch, key_env: PR_LIMITS_TEST_KEY}\n"
      "    - {tenant: web, key_file: '" +
          file.path() + "'}\n",
      &c);
  ::unsetenv("PR_LIMITS_TEST_KEY");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(*c.clients.key_set->Find(kKeyA), "batch");
  EXPECT_EQ(*c.clients.key_set->Find(kKeyB), "web");
  EXPECT_EQ(c.clients.key_set->tenant_count(), 2u);
}

// Every broken key source is named by its YAML path (and the file's line), never by the key.
TEST(ClientsConfigTest, BrokenSourcesNameTheFieldNotTheKey) {
  ExpectInvalid(ValidateYaml("clients: {keys_file: /nonexistent/pr-keys}\n"),
                {"clients.keys_file", "/nonexistent/pr-keys", "cannot open"});
  ExpectInvalid(ValidateYaml("clients: {}\n"), {"clients: no keys"});
  ExpectInvalid(ValidateYaml("clients: {keyfile: x}\n"), {"clients.keyfile: unknown field", "keys_file"});

  TempFile file("bad");
  file.Write("ok " + std::string(kKeyA) + "\nshort\n");
  ExpectInvalid(ValidateYaml("clients: {keys_file: '" + file.path() + "'}\n"),
                {"clients.keys_file", "line 2", "8..4096 bytes"});
  file.Write("a b " + std::string(kKeyA) + "\n");
  ExpectInvalid(ValidateYaml("clients: {keys_file: '" + file.path() + "'}\n"),
                {"line 1", "expected 'TENANT KEY' or 'KEY'"});
  file.Write("t/x " + std::string(kKeyA) + "\n");
  ExpectInvalid(ValidateYaml("clients: {keys_file: '" + file.path() + "'}\n"), {"line 1", "not a tenant name"});
  file.Write("a " + std::string(kKeyA) + "\nb " + std::string(kKeyA) + "\n");
  ExpectInvalid(ValidateYaml("clients: {keys_file: '" + file.path() + "'}\n"), {"line 2", "the same key as", "line 1"});

  ::unsetenv("PR_LIMITS_UNSET");
  ExpectInvalid(ValidateYaml("clients: {keys: [{tenant: a, key_env: PR_LIMITS_UNSET}]}\n"),
                {"clients.keys[0].key_env", "PR_LIMITS_UNSET", "not set"});
  ExpectInvalid(ValidateYaml("clients: {keys: [{key_env: X}]}\n"), {"clients.keys[0].tenant: is required"});
  ExpectInvalid(ValidateYaml("clients: {keys: [{tenant: a}]}\n"),
                {"clients.keys[0]: set exactly one of key_env and key_file"});
  ExpectInvalid(ValidateYaml("clients: {keys: [{tenant: a, key_env: X, key_file: Y}]}\n"),
                {"clients.keys[0]: set exactly one"});
  ExpectInvalid(ValidateYaml("clients: {keys: [{tenant: 'a b', key_env: X}]}\n"),
                {"clients.keys[0].tenant", "not a tenant name"});
  ExpectInvalid(ValidateYaml("clients: {keys: [{tenant: a, key: x}]}\n"), {"clients.keys[0].key: unknown field"});
  ExpectInvalid(ValidateYaml("clients: {keys: x}\n"), {"clients.keys: expected a list"});
  ::setenv("PR_LIMITS_TEST_KEY", "has space inside", 1);
  ExpectInvalid(ValidateYaml("clients: {keys: [{tenant: a, key_env: PR_LIMITS_TEST_KEY}]}\n"),
                {"clients.keys[0].key_env", "visible ASCII"});
  ::unsetenv("PR_LIMITS_TEST_KEY");
}

// The same key in the file and in `keys` is refused, naming both places.
TEST(ClientsConfigTest, DuplicateAcrossSources) {
  TempFile file("dup");
  file.Write("a " + std::string(kKeyA) + "\n");
  ::setenv("PR_LIMITS_TEST_KEY", std::string(kKeyA).c_str(), 1);
  Status s = ValidateYaml("clients:\n  keys_file: '" + file.path() +
                          "'\n  keys: [{tenant: b, key_env: PR_LIMITS_TEST_KEY}]\n");
  ::unsetenv("PR_LIMITS_TEST_KEY");
  ExpectInvalid(s, {"clients.keys[0].key_env", "the same key as clients.keys_file", "line 1"});
}

// ----------------------------------------------------------------------------- rate limits

// Defaults, and overrides that inherit what they do not set.
TEST(RateLimitsConfigTest, OverridesInheritTheDefaultsFieldByField) {
  GatewayConfig c;
  ASSERT_TRUE(ValidateYaml("rate_limits:\n  tenants:\n    vip: {requests_per_minute: 600}\n"
                           "    free: {tokens_per_minute: 0}\n"
                           "  requests_per_minute: 60\n  tokens_per_minute: 10000\n  token_burst: 20000\n"
                           "  max_tenants: 1000\n",
                           &c)
                  .ok());
  const RateLimitsConfig& rl = c.rate_limits;
  EXPECT_TRUE(rl.enabled());
  EXPECT_EQ(rl.max_tenants, 1000u);
  EXPECT_EQ(rl.For("someone").requests_per_minute, 60u);
  EXPECT_EQ(rl.For("vip").requests_per_minute, 600u);
  EXPECT_EQ(rl.For("vip").tokens_per_minute, 10000u);
  EXPECT_EQ(rl.For("vip").token_burst, 20000u);
  EXPECT_EQ(rl.For("free").tokens_per_minute, 0u);
  EXPECT_EQ(rl.For("free").requests_per_minute, 60u);
}

// Nothing set, or everything 0: no limits.
TEST(RateLimitsConfigTest, ZeroMeansNoLimit) {
  GatewayConfig c;
  ASSERT_TRUE(ValidateYaml("rate_limits: {requests_per_minute: 0}\n", &c).ok());
  EXPECT_FALSE(c.rate_limits.enabled());
  EXPECT_EQ(c.rate_limits.max_tenants, 65536u);
}

// Every field's range is checked and named by its YAML path.
TEST(RateLimitsConfigTest, RangesNameThePath) {
  ExpectInvalid(ValidateYaml("rate_limits: {requests_per_minute: 1000000001}\n"),
                {"rate_limits.requests_per_minute", "0..1000000000"});
  ExpectInvalid(ValidateYaml("rate_limits: {request_burst: 1000000001}\n"),
                {"rate_limits.request_burst", "0..1000000000"});
  ExpectInvalid(ValidateYaml("rate_limits: {tokens_per_minute: 1000000000001}\n"),
                {"rate_limits.tokens_per_minute", "0..1000000000000"});
  ExpectInvalid(ValidateYaml("rate_limits: {token_burst: 1000000000001}\n"),
                {"rate_limits.token_burst", "0..1000000000000"});
  ExpectInvalid(ValidateYaml("rate_limits: {max_tenants: 15}\n"), {"rate_limits.max_tenants", "16..10000000"});
  ExpectInvalid(ValidateYaml("rate_limits: {max_tenants: 10000001}\n"), {"rate_limits.max_tenants", "16..10000000"});
  ExpectInvalid(ValidateYaml("rate_limits: {tenants: {a: {requests_per_minute: 2000000000}}}\n"),
                {"rate_limits.tenants.a.requests_per_minute", "0..1000000000"});
  ExpectInvalid(ValidateYaml("rate_limits: {requests_per_minute: -1}\n"),
                {"rate_limits.requests_per_minute", "non-negative"});
  ExpectInvalid(ValidateYaml("rate_limits: {requests_per_minute: lots}\n"),
                {"rate_limits.requests_per_minute", "expected an integer"});
  ExpectInvalid(ValidateYaml("rate_limits: {rpm: 1}\n"), {"rate_limits.rpm: unknown field", "requests_per_minute"});
  ExpectInvalid(ValidateYaml("rate_limits: {tenants: {a: {max_tenants: 1}}}\n"),
                {"rate_limits.tenants.a.max_tenants: unknown field"});
  ExpectInvalid(ValidateYaml("rate_limits: {tenants: [a]}\n"), {"rate_limits.tenants: expected a map"});
}

// With client keys on, an override must name a key's tenant (else it could never apply).
TEST(RateLimitsConfigTest, OverridesMustNameAKeyTenantWhenKeysAreOn) {
  TempFile file("keys");
  file.Write("team-a " + std::string(kKeyA) + "\n");
  const std::string clients = "clients: {keys_file: '" + file.path() + "'}\n";
  EXPECT_TRUE(ValidateYaml(clients + "rate_limits: {tenants: {team-a: {requests_per_minute: 5}}}\n").ok());
  ExpectInvalid(ValidateYaml(clients + "rate_limits: {tenants: {team-b: {requests_per_minute: 5}}}\n"),
                {"rate_limits.tenants.team-b", "no client key has tenant 'team-b'"});
  // Without keys a tenant is a routing group, which may be any string.
  EXPECT_TRUE(ValidateYaml("rate_limits: {tenants: {'any group/1': {requests_per_minute: 5}}}\n").ok());
}

// clients and rate_limits apply on reload: they are not reported as needing a restart.
TEST(RateLimitsConfigTest, ReloadAppliesThemWithoutRestart) {
  TempFile file("keys");
  file.Write("team-a " + std::string(kKeyA) + "\n");
  GatewayConfig a;
  GatewayConfig b;
  ASSERT_TRUE(ValidateYaml("", &a).ok());
  ASSERT_TRUE(
      ValidateYaml("clients: {keys_file: '" + file.path() + "'}\nrate_limits: {requests_per_minute: 5}\n", &b).ok());
  EXPECT_TRUE(RestartRequired(a, b).empty());
}

}  // namespace
}  // namespace prefix_router::gateway
