// Validation of the TLS and upstream-credential fields: `tls`, `upstream_tls`, https instance
// urls, an instance's `upstream_tls`, `authorization_env` and `authorization_file`. Errors name
// the field (as a YAML path) and never the credential's value.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gateway/config.h"
#include "gateway/gateway_test_util.h"
#include "gateway/operations.h"
#include "testing/test_pki.h"

namespace prefix_router::gateway {
namespace {

namespace pt = prefix_router::testing;
using testing::ValidateYaml;

std::string Instance(const std::string& url, const std::string& more = "") {
  return "instances: [{url: '" + url + "'" + more + "}]\n";
}

bool Says(const Status& s, std::string_view text) { return s.message().find(text) != std::string::npos; }

// https urls parse (port 443 by default) and get the global upstream_tls; verify is on by default.
TEST(TlsConfigTest, HttpsUrlsAndUpstreamTlsDefaults) {
  GatewayConfig c;
  Status s = ValidateYaml("instances: [{url: 'https://models.internal/v1'}, {url: 'http://127.0.0.1:8001'}]\n", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(c.instances[0].https);
  EXPECT_EQ(c.instances[0].port, 443);
  EXPECT_EQ(c.instances[0].base_path, "/v1");
  EXPECT_TRUE(c.instances[0].tls.verify);
  EXPECT_EQ(c.instances[0].tls.ca_file, "");
  EXPECT_FALSE(c.instances[1].https);
  EXPECT_EQ(c.instances[1].port, 8001);
  EXPECT_FALSE(c.tls.enabled);
  const Status bad = ValidateYaml(Instance("ftp://127.0.0.1:8001"));
  EXPECT_TRUE(Says(bad, "instances[0].url")) << bad.message();
  EXPECT_TRUE(Says(bad, "http(s)://")) << bad.message();
}

// upstream_tls: the CA file is loaded at validation; a missing or non-PEM file is named; an
// instance's settings override the global ones field by field, and only apply to https.
TEST(TlsConfigTest, UpstreamTlsFields) {
  pt::TestPki pki("Config CA");
  ASSERT_TRUE(pki.ok());
  GatewayConfig c;
  Status s = ValidateYaml("upstream_tls: {ca_file: '" + pki.ca_file() + "', verify: false}\n" +
                              "instances: [{url: 'https://127.0.0.1:1'}, {url: 'https://127.0.0.1:2', "
                              "upstream_tls: {verify: true}}]\n",
                          &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.instances[0].tls, (UpstreamTlsConfig{pki.ca_file(), false}));
  EXPECT_EQ(c.instances[1].tls, (UpstreamTlsConfig{pki.ca_file(), true}));

  s = ValidateYaml("upstream_tls: {ca_file: /nonexistent/ca.pem}\n" + Instance("https://127.0.0.1:1"));
  EXPECT_TRUE(Says(s, "upstream_tls.ca_file: '/nonexistent/ca.pem': cannot open")) << s.message();
  ASSERT_TRUE(pt::WriteFile(pki.Path("junk.pem"), "junk\n"));
  s = ValidateYaml("upstream_tls: {ca_file: '" + pki.Path("junk.pem") + "'}\n" + Instance("https://127.0.0.1:1"));
  EXPECT_TRUE(Says(s, "upstream_tls.ca_file")) << s.message();
  s = ValidateYaml(Instance("https://127.0.0.1:1", ", upstream_tls: {ca_file: '" + pki.Path("junk.pem") + "'}"));
  EXPECT_TRUE(Says(s, "instances[0].upstream_tls.ca_file")) << s.message();
  s = ValidateYaml(Instance("http://127.0.0.1:1", ", upstream_tls: {verify: false}"));
  EXPECT_TRUE(Says(s, "instances[0].upstream_tls: applies to an https:// url only")) << s.message();
  s = ValidateYaml("upstream_tls: {verify: maybe}\n" + Instance("https://127.0.0.1:1"));
  EXPECT_TRUE(Says(s, "upstream_tls.verify")) << s.message();
  s = ValidateYaml("upstream_tls: {ca: x}\n" + Instance("https://127.0.0.1:1"));
  EXPECT_TRUE(Says(s, "upstream_tls.ca: unknown field")) << s.message();
}

// tls (the listener): both files are required and loaded at validation; a key of another
// certificate, a missing file and a non-PEM file are each named.
TEST(TlsConfigTest, ListenerTlsFilesAreLoadedAtValidation) {
  pt::TestPki pki("Config CA");
  auto a = pki.Issue("a.test", 1);
  auto b = pki.Issue("b.test", 2);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string inst = Instance("http://127.0.0.1:8001");
  GatewayConfig c;
  Status s = ValidateYaml("tls: {cert_file: '" + a->cert + "', key_file: '" + a->key + "'}\n" + inst, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(c.tls.enabled);

  s = ValidateYaml("tls: {}\n" + inst);
  EXPECT_TRUE(Says(s, "tls.cert_file: is required")) << s.message();
  s = ValidateYaml("tls: {cert_file: '" + a->cert + "'}\n" + inst);
  EXPECT_TRUE(Says(s, "tls.key_file: is required")) << s.message();
  s = ValidateYaml("tls: {cert_file: '" + a->cert + "', key_file: '" + b->key + "'}\n" + inst);
  EXPECT_TRUE(Says(s, "tls.key_file")) << s.message();
  EXPECT_TRUE(Says(s, "tls.cert_file")) << s.message();  // "... matching the certificate in tls.cert_file"
  s = ValidateYaml("tls: {cert_file: /nonexistent.pem, key_file: '" + a->key + "'}\n" + inst);
  EXPECT_TRUE(Says(s, "tls.cert_file: '/nonexistent.pem': cannot open")) << s.message();
  s = ValidateYaml("tls: {cert_file: '" + a->key + "', key_file: '" + a->key + "'}\n" + inst);
  EXPECT_TRUE(Says(s, "tls.cert_file")) << s.message();  // a key is not a certificate
  s = ValidateYaml("tls: {cert: x}\n" + inst);
  EXPECT_TRUE(Says(s, "tls.cert: unknown field")) << s.message();
}

// authorization_env / authorization_file: at most one; an unset variable, a missing or empty
// file and a value that could split a header are refused naming the field, never the value.
TEST(TlsConfigTest, InstanceCredentials) {
  pt::TestPki dir("unused");
  ::setenv("PR_TLS_CONFIG_TEST_AUTH", "Bearer cfg-S3cret", 1);
  GatewayConfig c;
  Status s = ValidateYaml(Instance("http://127.0.0.1:1", ", authorization_env: PR_TLS_CONFIG_TEST_AUTH"), &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(c.instances[0].authorization.Matches("Bearer cfg-S3cret"));

  ASSERT_TRUE(pt::WriteFile(dir.Path("auth"), "Bearer from-file\n"));
  s = ValidateYaml(Instance("http://127.0.0.1:1", ", authorization_file: '" + dir.Path("auth") + "'"), &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(c.instances[0].authorization.Matches("Bearer from-file"));  // trailing newline trimmed

  s = ValidateYaml(Instance("http://127.0.0.1:1",
                            ", authorization_env: PR_TLS_CONFIG_TEST_AUTH, "
                            "authorization_file: '" +
                                dir.Path("auth") + "'"));
  EXPECT_TRUE(Says(s, "instances[0]: set authorization_file or authorization_env, not both")) << s.message();
  s = ValidateYaml(Instance("http://127.0.0.1:1", ", authorization_env: PR_TLS_CONFIG_TEST_UNSET"));
  EXPECT_TRUE(Says(s, "instances[0].authorization_env: the environment variable PR_TLS_CONFIG_TEST_UNSET"))
      << s.message();
  s = ValidateYaml(Instance("http://127.0.0.1:1", ", authorization_file: /nonexistent/auth"));
  EXPECT_TRUE(Says(s, "instances[0].authorization_file: '/nonexistent/auth': cannot open")) << s.message();
  ASSERT_TRUE(pt::WriteFile(dir.Path("empty"), "\n"));
  s = ValidateYaml(Instance("http://127.0.0.1:1", ", authorization_file: '" + dir.Path("empty") + "'"));
  EXPECT_TRUE(Says(s, "the file is empty")) << s.message();
  ASSERT_TRUE(pt::WriteFile(dir.Path("split"), "Bearer cfg-S3cret\r\nX-Injected: 1"));
  s = ValidateYaml(Instance("http://127.0.0.1:1", ", authorization_file: '" + dir.Path("split") + "'"));
  EXPECT_TRUE(Says(s, "instances[0].authorization_file: the value must be printable ASCII")) << s.message();
  EXPECT_FALSE(Says(s, "cfg-S3cret")) << s.message();
  ::unsetenv("PR_TLS_CONFIG_TEST_AUTH");
}

// Turning the listener's TLS on or off needs a restart; new file paths and upstream_tls do not.
TEST(TlsConfigTest, RestartRequiredOnlyForTurningTlsOnOrOff) {
  GatewayConfig a;
  GatewayConfig b;
  b.tls.enabled = true;
  EXPECT_EQ(RestartRequired(a, b), std::vector<std::string>{"tls"});
  a.tls = {true, "/a.pem", "/a.key"};
  b.tls = {true, "/b.pem", "/b.key"};
  b.upstream_tls = {"/ca.pem", false};
  EXPECT_TRUE(RestartRequired(a, b).empty());
}

}  // namespace
}  // namespace prefix_router::gateway
