// TLS on both sides of the gateway, and upstream credentials, on loopback: HTTPS clients to the
// listener (plain and streaming responses, keep-alive, failed handshakes, certificate reload),
// https instances (verification against a CA file, a wrong CA, a wrong host name, verify off),
// and the per-instance Authorization header (sent upstream, never shown). Every certificate is
// made by the test (testing/test_pki.h).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "gateway/admin.h"
#include "gateway/gateway_test_util.h"
#include "http/tls.h"
#include "testing/test_pki.h"
#include "testing/tls_client.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

namespace pt = prefix_router::testing;
namespace bhttp = http::bhttp;
using testing::ChatBody;
using testing::ConfigFor;
using testing::Fakes;
using testing::JsonRequest;
using testing::kChat;
using testing::LogCapture;
using testing::StartFakes;
using testing::StartGateway;

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// A gateway whose listener uses `cert` (its other settings as ConfigFor).
std::unique_ptr<Gateway> StartTlsGateway(const Fakes& fakes, const pt::CertFiles& cert) {
  GatewayConfig c = ConfigFor(fakes);
  c.tls.enabled = true;
  c.tls.cert_file = cert.cert;
  c.tls.key_file = cert.key;
  return StartGateway(std::move(c));
}

// A fake instance speaking HTTPS with `cert`.
std::unique_ptr<pt::FakeUpstream> StartTlsFake(const std::string& name, const pt::CertFiles& cert) {
  auto fake = std::make_unique<pt::FakeUpstream>(name);
  auto ctx = http::MakeServerTlsContext(cert.cert, cert.key);
  EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
  if (!ctx.ok()) return nullptr;
  EXPECT_TRUE(fake->Start(0, *ctx).ok());
  return fake;
}

void Copy(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

// ------------------------------------------------------------------------- client listener

// An HTTPS client gets whole and streamed (SSE) responses on one kept-alive TLS connection.
TEST(TlsListenerTest, ServesWholeAndStreamedResponsesOverOneConnection) {
  testing::QuietLogs();
  pt::TestPki pki("Listener CA");
  ASSERT_TRUE(pki.ok());
  auto cert = pki.Issue("gateway.test", 11);
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  Fakes fakes = StartFakes({"a"});
  auto g = StartTlsGateway(fakes, *cert);
  ASSERT_NE(g, nullptr);

  pt::TlsClient client(g->port(), pki.ca_file(), "localhost");
  const pt::ClientResponse whole = client.RoundTrip(JsonRequest(kChat, ChatBody("m", "hello")));
  ASSERT_FALSE(whole.error) << whole.error.message();
  EXPECT_EQ(whole.status(), 200) << whole.body();
  EXPECT_TRUE(Contains(whole.body(), "\"instance\":\"a\"")) << whole.body();
  EXPECT_EQ(client.peer_subject(), "/CN=gateway.test");
  EXPECT_EQ(client.peer_serial(), 11);

  fakes[0]->SetBehavior(testing::SseStream(5, std::chrono::milliseconds(5)));
  const pt::ClientResponse streamed = client.RoundTrip(JsonRequest(kChat, ChatBody("m", "stream", {}, true)));
  ASSERT_FALSE(streamed.error) << streamed.error.message();
  EXPECT_EQ(streamed.status(), 200);
  EXPECT_EQ(streamed.Header("content-type"), "text/event-stream");
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(Contains(streamed.body(), "data: {\"n\":" + std::to_string(i) + "}")) << streamed.body();
  }
  EXPECT_EQ(client.connects(), 1);  // keep-alive held over TLS
  EXPECT_EQ(fakes[0]->requests(), 2);
}

// A client that does not speak TLS fails its handshake, and one that never starts it is cut off
// after client_read: each is counted and closed, and other clients are served meanwhile; the
// server's own errors (431 here) still reach TLS clients.
TEST(TlsListenerTest, FailedHandshakeIsCountedAndAffectsNoOne) {
  testing::QuietLogs();
  pt::TestPki pki("Listener CA");
  auto cert = pki.Issue("gateway.test", 12);
  ASSERT_TRUE(cert.ok());
  Fakes fakes = StartFakes({"a"});
  GatewayConfig c = ConfigFor(fakes);
  c.tls = {true, cert->cert, cert->key};
  c.max_header_bytes = 1024;
  c.timeouts.client_read = 0.3;
  auto g = StartGateway(std::move(c));
  ASSERT_NE(g, nullptr);

  pt::TlsClient kept(g->port(), pki.ca_file());
  ASSERT_EQ(kept.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/health")).status(), 200);  // now idle
  const pt::ClientResponse plain = pt::Get(g->port(), "/health");                         // HTTP to an HTTPS port
  EXPECT_TRUE(plain.error || plain.status() != 200);
  pt::TlsClient wrong_ca(g->port(), pt::TestPki("Other CA").ca_file());
  EXPECT_TRUE(wrong_ca.Connect());  // the client refuses the server: the server sees a failure
  pt::HttpClient silent(g->port());
  ASSERT_FALSE(silent.Connect());
  EXPECT_TRUE(silent.Read().error);  // sends nothing: the server closes it after client_read

  const pt::ClientResponse ok = kept.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/health"));
  EXPECT_EQ(ok.status(), 200) << ok.error.message();
  EXPECT_EQ(kept.connects(), 1);  // the open connection lived through the others' failures
  pt::TlsClient big(g->port(), pki.ca_file());
  const pt::ClientResponse too_big =
      big.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/health", "", {{"x-filler", std::string(4000, 'x')}}));
  EXPECT_EQ(too_big.status(), 431) << too_big.error.message();

  std::string last;
  EXPECT_TRUE(pt::Eventually([&] {
    pt::TlsClient metrics(g->port(), pki.ca_file());
    last = metrics.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/metrics")).body();
    return Contains(last, "prefix_router_tls_handshake_failures_total 3");
  })) << last;
}

// Over TLS too, a connection beyond limits.max_connections gets a 503 it can read (after a
// handshake).
TEST(TlsListenerTest, ConnectionLimitAnswers503OverTls) {
  testing::QuietLogs();
  pt::TestPki pki("Listener CA");
  auto cert = pki.Issue("gateway.test", 13);
  ASSERT_TRUE(cert.ok());
  Fakes fakes = StartFakes({"a"});
  GatewayConfig c = ConfigFor(fakes);
  c.tls = {true, cert->cert, cert->key};
  c.max_connections = 1;
  auto g = StartGateway(std::move(c));
  ASSERT_NE(g, nullptr);

  pt::TlsClient first(g->port(), pki.ca_file());
  ASSERT_EQ(first.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/health")).status(), 200);
  pt::TlsClient second(g->port(), pki.ca_file());
  const pt::ClientResponse refused = second.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/health"));
  EXPECT_EQ(refused.status(), 503) << refused.error.message();
  EXPECT_EQ(testing::ErrorCode(refused.body()), "too_many_connections");
  first.Close();
  // The refusal held nothing: once the first client left, a new one is served.
  EXPECT_TRUE(pt::Eventually([&] {
    pt::TlsClient next(g->port(), pki.ca_file());
    return next.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/health")).status() == 200;
  }));
}

// A reload re-reads the certificate files: the next connection sees the new certificate, an
// open one keeps working; a broken pair is rejected naming the field, and the old pair stays.
TEST(TlsListenerTest, ReloadSwapsTheCertificateAndRejectsABrokenPair) {
  testing::QuietLogs();
  pt::TestPki pki("Listener CA");
  auto first = pki.Issue("first.test", 21);
  auto second = pki.Issue("second.test", 22);
  ASSERT_TRUE(first.ok() && second.ok());
  const pt::CertFiles live{pki.Path("live.pem"), pki.Path("live.key")};
  Copy(first->cert, live.cert);
  Copy(first->key, live.key);
  Fakes fakes = StartFakes({"a"});
  GatewayConfig c = ConfigFor(fakes);
  c.tls = {true, live.cert, live.key};
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  const ConfigLoader loader = [c]() -> Result<GatewayConfig> {
    GatewayConfig next = c;
    if (Status s = ValidateConfig(next); !s.ok()) return s;
    return next;
  };

  pt::TlsClient before(g->port(), pki.ca_file());
  ASSERT_FALSE(before.Connect());
  EXPECT_EQ(before.peer_serial(), 21);

  Copy(second->cert, live.cert);
  Copy(second->key, live.key);
  auto report = LoadAndReload(*g, loader, "test");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  pt::TlsClient after(g->port(), pki.ca_file());
  ASSERT_FALSE(after.Connect());
  EXPECT_EQ(after.peer_serial(), 22);
  EXPECT_EQ(after.peer_subject(), "/CN=second.test");
  EXPECT_EQ(before.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/health")).status(), 200);

  // A key that belongs to another certificate, then a certificate file that is not PEM.
  Copy(first->key, live.key);
  auto mismatched = LoadAndReload(*g, loader, "test");
  ASSERT_FALSE(mismatched.ok());
  EXPECT_TRUE(Contains(mismatched.status().message(), "tls.key_file")) << mismatched.status().message();
  Copy(second->key, live.key);
  ASSERT_TRUE(pt::WriteFile(live.cert, "not a certificate\n"));
  auto broken = LoadAndReload(*g, loader, "test");
  ASSERT_FALSE(broken.ok());
  EXPECT_TRUE(Contains(broken.status().message(), "tls.cert_file")) << broken.status().message();
  pt::TlsClient still(g->port(), pki.ca_file());
  ASSERT_FALSE(still.Connect());
  EXPECT_EQ(still.peer_serial(), 22);
  EXPECT_EQ(still.RoundTrip(JsonRequest(kChat, ChatBody("m", "x"))).status(), 200);
}

// ------------------------------------------------------------------------- https upstreams

struct HttpsFleet {
  pt::TestPki pki{"Fleet CA"};
  std::unique_ptr<pt::FakeUpstream> fake;
};

// One https fake with a certificate for `sans`, and a gateway config pointing at it.
GatewayConfig HttpsConfig(HttpsFleet& fleet, const std::string& sans = "IP:127.0.0.1,DNS:localhost") {
  auto cert = fleet.pki.Issue("upstream.test", 31, sans);
  EXPECT_TRUE(cert.ok()) << cert.status().ToString();
  fleet.fake = StartTlsFake("secure", *cert);
  GatewayConfig c;
  c.listen = "127.0.0.1:0";
  c.io_threads = 1;
  c.health.interval = 0;
  c.timeouts.drain = 1;
  c.max_retries = 0;
  c.instances.push_back(InstanceConfig{"secure", fleet.fake->url()});
  return c;
}

// With the fleet's CA the gateway verifies the instance and relays its answers, whole and
// streamed, reusing the connection.
TEST(HttpsUpstreamTest, VerifiedWithTheCaFile) {
  testing::QuietLogs();
  HttpsFleet fleet;
  GatewayConfig c = HttpsConfig(fleet);
  c.upstream_tls.ca_file = fleet.pki.ca_file();
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(fleet.fake->url().starts_with("https://"));
  pt::HttpClient client(g->port());
  const pt::ClientResponse r = client.RoundTrip(JsonRequest(kChat, ChatBody("m", "hi")));
  EXPECT_EQ(r.status(), 200) << r.body();
  EXPECT_TRUE(Contains(r.body(), "\"instance\":\"secure\"")) << r.body();
  fleet.fake->SetBehavior(testing::SseStream(3, std::chrono::milliseconds(1)));
  const pt::ClientResponse s = client.RoundTrip(JsonRequest(kChat, ChatBody("m", "hi", {}, true)));
  EXPECT_EQ(s.status(), 200);
  EXPECT_TRUE(Contains(s.body(), "data: {\"n\":2}")) << s.body();
  EXPECT_EQ(fleet.fake->requests(), 2);
  // Pooled: one TLS connection for both requests (model discovery's polls, on by default, each
  // open one of their own).
  EXPECT_EQ(fleet.fake->connections(), 1 + fleet.fake->models_requests());
}

// Verification failures are connect failures: 502 to the client, and the log says why.
TEST(HttpsUpstreamTest, WrongCaOrWrongHostNameIsA502ThatSaysWhy) {
  testing::QuietLogs();
  {
    HttpsFleet fleet;
    pt::TestPki other("Other CA");
    GatewayConfig c = HttpsConfig(fleet);
    c.upstream_tls.ca_file = other.ca_file();
    auto g = StartGateway(c);
    ASSERT_NE(g, nullptr);
    LogCapture log(spdlog::level::debug);
    const pt::ClientResponse r = pt::Fetch(g->port(), JsonRequest(kChat, ChatBody("m", "hi")));
    EXPECT_EQ(r.status(), 502) << r.body();
    EXPECT_EQ(testing::ErrorCode(r.body()), "upstream_failed");
    EXPECT_TRUE(Contains(r.body(), "certificate verify failed")) << r.body();
    EXPECT_TRUE(Contains(log.text(), "certificate verify failed")) << log.text();
    EXPECT_EQ(fleet.fake->requests(), 0);
  }
  {
    HttpsFleet fleet;
    GatewayConfig c = HttpsConfig(fleet, "DNS:elsewhere.test");  // not 127.0.0.1
    c.upstream_tls.ca_file = fleet.pki.ca_file();
    auto g = StartGateway(c);
    ASSERT_NE(g, nullptr);
    LogCapture log(spdlog::level::debug);
    const pt::ClientResponse r = pt::Fetch(g->port(), JsonRequest(kChat, ChatBody("m", "hi")));
    EXPECT_EQ(r.status(), 502) << r.body();
    EXPECT_TRUE(Contains(r.body(), "IP address mismatch")) << r.body();
    EXPECT_TRUE(Contains(log.text(), "certificate verify failed")) << log.text();
    EXPECT_EQ(fleet.fake->requests(), 0);
  }
}

// verify: false connects to an instance whose certificate no configured CA vouches for, and
// says so at start.
TEST(HttpsUpstreamTest, VerifyOffAcceptsAnUnknownCaWithAWarning) {
  testing::QuietLogs();
  HttpsFleet fleet;
  pt::TestPki other("Other CA");
  GatewayConfig c = HttpsConfig(fleet, "DNS:elsewhere.test");
  c.upstream_tls.ca_file = other.ca_file();
  c.upstream_tls.verify = false;
  LogCapture log(spdlog::level::debug);
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Contains(log.text(), "upstream TLS verification is off")) << log.text();
  const pt::ClientResponse r = pt::Fetch(g->port(), JsonRequest(kChat, ChatBody("m", "hi")));
  EXPECT_EQ(r.status(), 200) << r.body();
}

// An instance's upstream_tls overrides the global one: the global CA is wrong, the instance's
// right. Health checks go over https too (and eject an instance they cannot verify).
TEST(HttpsUpstreamTest, PerInstanceCaAndHealthChecksOverHttps) {
  testing::QuietLogs();
  HttpsFleet fleet;
  pt::TestPki other("Other CA");
  GatewayConfig c = HttpsConfig(fleet);
  c.upstream_tls.ca_file = other.ca_file();
  c.instances[0].tls_ca_file = fleet.pki.ca_file();
  c.health.interval = 0.05;
  c.health.unhealthy_threshold = 1;
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(pt::Fetch(g->port(), JsonRequest(kChat, ChatBody("m", "hi"))).status(), 200);
  EXPECT_TRUE(pt::Eventually([&] {
    for (const auto& r : fleet.fake->received()) {
      if (r.target == "/health") return true;
    }
    return false;
  }));
  EXPECT_EQ(testing::InstanceHealth(g->port(), "secure"), "up");
}

// ------------------------------------------------------------------------------ credentials

constexpr std::string_view kUpstreamSecret = "Bearer upstr3am-S3cret-91c4";  // distinctive

// The instance's credential replaces the client's Authorization on requests and health checks;
// the client never sees it, and neither do logs, errors, /status.json or the admin API.
TEST(UpstreamCredentialsTest, SentUpstreamOnlyAndNeverShown) {
  testing::QuietLogs();
  ::setenv("PR_TLS_TEST_UPSTREAM_AUTH", std::string(kUpstreamSecret).c_str(), 1);
  Fakes fakes = StartFakes({"a"});
  GatewayConfig c = ConfigFor(fakes);
  c.instances[0].authorization_env = "PR_TLS_TEST_UPSTREAM_AUTH";
  c.health.interval = 0.05;
  c.log.access_log = true;
  c.max_retries = 0;
  LogCapture log(spdlog::level::debug);
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  AdminConfig ac;
  ac.enabled = true;
  ac.listen_host = "127.0.0.1";
  AdminServer admin(ac, TimeoutsConfig{}, *g, {});
  ASSERT_TRUE(admin.Start().ok());

  const pt::ClientResponse ok =
      pt::Fetch(g->port(), JsonRequest(kChat, ChatBody("m", "hi"), {{"Authorization", "Bearer client-token"}}));
  EXPECT_EQ(ok.status(), 200);
  ASSERT_TRUE(pt::Eventually([&] { return fakes[0]->received().size() >= 2; }));
  bool saw_health = false;
  for (const auto& r : fakes[0]->received()) {
    int count = 0;
    for (const auto& [name, value] : r.headers) count += http::beast::iequals(name, "authorization");
    EXPECT_EQ(count, 1) << r.target;
    EXPECT_EQ(r.Header("authorization"), kUpstreamSecret) << r.target;
    saw_health |= r.target == "/health";
  }
  EXPECT_TRUE(saw_health);

  fakes[0]->SetBehavior(pt::Behavior{.fault = pt::Behavior::Fault::kCloseBeforeResponse});
  const pt::ClientResponse failed = pt::Fetch(g->port(), JsonRequest(kChat, ChatBody("m", "hi")));
  EXPECT_GE(failed.status(), 502) << failed.body();  // 502, or 503 once health checks ejected it
  std::string shown;
  for (const pt::ClientResponse& r :
       {ok, failed, pt::Get(admin.port(), "/status.json"), pt::Get(admin.port(), "/admin/instances"),
        pt::Get(admin.port(), "/admin/instances/a"), pt::Get(g->port(), "/metrics")}) {
    shown += r.body();
    for (const auto& f : r.message) shown += std::string(f.name_string()) + ": " + std::string(f.value()) + "\n";
  }
  EXPECT_TRUE(Contains(shown, "\"instance\":\"a\""));  // the capture did capture something
  EXPECT_FALSE(Contains(shown, "upstr3am-S3cret")) << shown;
  EXPECT_TRUE(Contains(log.text(), "request")) << log.text();
  EXPECT_FALSE(Contains(log.text(), "upstr3am-S3cret")) << log.text();
  ::unsetenv("PR_TLS_TEST_UPSTREAM_AUTH");
}

// A reload reads the credential again: requests after it carry the new value.
TEST(UpstreamCredentialsTest, ReloadRereadsTheCredentialFile) {
  testing::QuietLogs();
  pt::TestPki dir("unused");
  const std::string file = dir.Path("upstream-auth");
  ASSERT_TRUE(pt::WriteFile(file, "Bearer first-value\n"));
  Fakes fakes = StartFakes({"a"});
  GatewayConfig c = ConfigFor(fakes);
  c.instances[0].authorization_file = file;
  auto g = StartGateway(c);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(pt::Fetch(g->port(), JsonRequest(kChat, ChatBody("m", "1"))).status(), 200);
  ASSERT_TRUE(pt::WriteFile(file, "Bearer second-value\n"));
  const ConfigLoader loader = [c]() -> Result<GatewayConfig> {
    GatewayConfig next = c;
    if (Status s = ValidateConfig(next); !s.ok()) return s;
    return next;
  };
  auto report = LoadAndReload(*g, loader, "test");
  ASSERT_TRUE(report.ok());
  bool reported = false;
  for (const auto& line : report->changes) {
    reported |= Contains(line, "authorization changed");
    EXPECT_FALSE(Contains(line, "value")) << line;
  }
  EXPECT_TRUE(reported);
  EXPECT_EQ(pt::Fetch(g->port(), JsonRequest(kChat, ChatBody("m", "2"))).status(), 200);
  const auto received = fakes[0]->received();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].Header("authorization"), "Bearer first-value");
  EXPECT_EQ(received[1].Header("authorization"), "Bearer second-value");
}

// Without a credential the client's Authorization passes through unchanged.
TEST(UpstreamCredentialsTest, ClientAuthorizationPassesWithoutOne) {
  testing::QuietLogs();
  Fakes fakes = StartFakes({"a"});
  auto g = StartGateway(ConfigFor(fakes));
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(
      pt::Fetch(g->port(), JsonRequest(kChat, ChatBody("m", "hi"), {{"Authorization", "Bearer client"}})).status(),
      200);
  ASSERT_EQ(fakes[0]->received().size(), 1u);
  EXPECT_EQ(fakes[0]->received()[0].Header("authorization"), "Bearer client");
}

}  // namespace
}  // namespace prefix_router::gateway
