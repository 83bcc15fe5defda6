// Hung upstreams and local resource errors (issue 21): timeouts.per_try_first_byte moves a
// request whose instance sends nothing on to the next instance; an instance ejected while
// requests wait on it moves them on; a connect or health check that fails for want of a local
// resource (descriptors) answers 503 and ejects nothing. Retries are counted by reason.
#include <gtest/gtest.h>


#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gateway/connection_limit.h"
#include "gateway/ejection_signal.h"
#include "gateway/gateway_test_util.h"
#include "gateway/upstream.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

using namespace std::chrono_literals;
using namespace prefix_router::gateway::testing;
using pt::Behavior;
using pt::ClientResponse;
using pt::Eventually;
using pt::Metric;
using pt::Post;

const bool kQuiet = [] {
  QuietLogs();
  return true;
}();

// A routing group whose first choice is `instance` under plain prefix-aware placement.
std::string GroupPreferring(uint16_t port, std::string_view instance) {
  for (int i = 0; i < 200; ++i) {
    const std::string group = "group-" + std::to_string(i);
    const ClientResponse r = Post(port, kChat, ChatBody("m1", "probe", group));
    if (r.status() == 200 && r.Header(kInstance) == instance && r.Header("x-prefix-router-rank") == "0") {
      return group;
    }
  }
  ADD_FAILURE() << "no routing group prefers " << instance;
  return "";
}

Behavior Hang() {
  Behavior hang;
  hang.fault = Behavior::Fault::kHang;
  hang.hang_for = 20'000ms;
  return hang;
}

TEST(PerTryTimeoutTest, HungInstanceIsLeftForTheNextInstance) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PlainPrefixAware();
  config.timeouts.first_byte = 60;
  config.timeouts.per_try_first_byte = 0.3;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const std::string group = GroupPreferring(gw->port(), "a");
  fakes[0]->SetBehavior(Hang());
  const auto start = std::chrono::steady_clock::now();
  const ClientResponse r = Post(gw->port(), kChat, ChatBody("m1", "hi", group));
  EXPECT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(r.Header(kInstance), "b");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);  // far from first_byte's 60 s
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_retries_total{model="other",reason="timeout"})"), 1);
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_upstream_errors_total{instance="a",kind="timeout"})"), 1);
  // Giving up closed the upstream connection: the hung instance saw the abort.
  EXPECT_TRUE(Eventually([&] { return fakes[0]->aborted() == 1 && fakes[0]->in_progress() == 0; }, 5000ms));
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; }));
}

// The last attempt has nowhere to go: it ends with 504 at the per-try deadline.
TEST(PerTryTimeoutTest, LastAttemptEndsWith504) {
  Fakes fakes = StartFakes({"a"});
  fakes[0]->SetBehavior(Hang());
  GatewayConfig config = ConfigFor(fakes);
  config.timeouts.first_byte = 60;
  config.timeouts.per_try_first_byte = 0.3;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const ClientResponse r = Post(gw->port(), kChat, ChatBody("m1", "hi"));
  EXPECT_EQ(r.status(), 504) << r.body();
  EXPECT_NE(r.body().find("per-try timeout"), std::string::npos) << r.body();
  EXPECT_EQ(pt::MetricSum(gw->port(), R"(prefix_router_retries_total{model="other",)"), 0);
}

// Off by default: a hung instance holds the request for first_byte, then 504 without a retry.
TEST(PerTryTimeoutTest, OffByDefault) {
  GatewayConfig defaults;
  EXPECT_EQ(defaults.timeouts.per_try_first_byte, 0);
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PlainPrefixAware();
  config.timeouts.first_byte = 0.5;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const std::string group = GroupPreferring(gw->port(), "a");
  fakes[0]->SetBehavior(Hang());
  const int b_before = fakes[1]->requests();
  EXPECT_EQ(Post(gw->port(), kChat, ChatBody("m1", "hi", group)).status(), 504);
  EXPECT_EQ(fakes[1]->requests(), b_before);  // not repeated on b
  EXPECT_EQ(pt::MetricSum(gw->port(), R"(prefix_router_retries_total{model="other",)"), 0);
}

// Health checks eject a hung instance while a request waits on it (per-try off): the request
// moves to the next instance at the ejection, counted as an `ejected` retry.
TEST(EjectionTest, EjectionMovesWaitingRequests) {
  Fakes fakes = StartFakes({"a", "b"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PlainPrefixAware();
  config.timeouts.first_byte = 60;
  config.health.interval = 0.2;
  config.health.timeout = 0.3;
  config.health.unhealthy_threshold = 2;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const std::string group = GroupPreferring(gw->port(), "a");
  fakes[0]->SetBehavior(Hang());  // its health checks hang too
  const auto start = std::chrono::steady_clock::now();
  const ClientResponse r = Post(gw->port(), kChat, ChatBody("m1", "hi", group));
  EXPECT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(r.Header(kInstance), "b");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_EQ(InstanceHealth(gw->port(), "a"), "ejected");
  EXPECT_EQ(Metric(gw->port(), R"(prefix_router_retries_total{model="other",reason="ejected"})"), 1);
  EXPECT_TRUE(Eventually([&] { return TotalInFlight(*gw) == 0; }));
}

// --------------------------------------------------------------------- local resource errors

TEST(LocalResourceTest, ClassifiesDescriptorAndBufferErrors) {
  EXPECT_TRUE(IsLocalResourceError(beast::error_code(EMFILE, boost::system::system_category())));
  EXPECT_TRUE(IsLocalResourceError(beast::error_code(ENFILE, boost::system::system_category())));
  EXPECT_TRUE(IsLocalResourceError(beast::error_code(ENOBUFS, boost::system::system_category())));
  EXPECT_TRUE(IsLocalResourceError(beast::error_code(EADDRNOTAVAIL, boost::system::system_category())));
  EXPECT_FALSE(IsLocalResourceError(beast::error_code(ECONNREFUSED, boost::system::system_category())));
  EXPECT_FALSE(IsLocalResourceError(beast::error_code(ETIMEDOUT, boost::system::system_category())));
  EXPECT_FALSE(IsLocalResourceError(beast::error_code()));
}

// Running out of descriptors for real (health checks and upstream connects failing with EMFILE,
// no instance ejected) is tested in a child process with a low RLIMIT_NOFILE: cli.hostile
// (src/cli/hostile_cli_test.sh). In this process the fake instances would starve too.

// ------------------------------------------------------------------------- connection limit

TEST(ConnectionLimitTest, AutoIsHalfOfWhatTheReserveLeaves) {
  const ConnectionLimitPlan p = AutoMaxConnections(20'000, 3);
  EXPECT_EQ(p.reserve, kFixedReserve + http::Server::kMaxLingeringRejections + 3 * kPerInstanceReserve);
  EXPECT_EQ(p.limit, (20'000 - p.reserve) / 2);
  EXPECT_FALSE(p.starved);
  EXPECT_EQ(AutoMaxConnections(256, 3).limit, (256 - 152) / 2);
  // Too few descriptors for any client: one connection, flagged.
  const ConnectionLimitPlan starved = AutoMaxConnections(100, 3);
  EXPECT_TRUE(starved.starved);
  EXPECT_EQ(starved.limit, 1u);
  // More instances, a larger reserve.
  EXPECT_LT(AutoMaxConnections(20'000, 1000).limit, p.limit);
  EXPECT_EQ(AutoMaxConnections(1ull << 40, 1).limit, 1'000'000u);
}

TEST(ConnectionLimitTest, DefaultIsAutoAndAppliedAtStart) {
  GatewayConfig defaults;
  EXPECT_EQ(defaults.max_connections, kAutoMaxConnections);
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  const ConnectionLimitPlan plan = AutoMaxConnections(CurrentDescriptorLimit().soft, 1);
  EXPECT_EQ(Metric(gw->port(), "prefix_router_max_client_connections"), plan.limit);
}

// --------------------------------------------------------------------------- EjectionSignal

TEST(EjectionSignalTest, FireRunsSubscribersOnTheirExecutorAndCancelUnregisters) {
  namespace net = boost::asio;
  net::io_context io;
  EjectionSignal signal;
  int fired = 0;
  std::vector<EjectionSignal::Subscription> subscriptions;
  for (int i = 0; i < 3; ++i) subscriptions.push_back(signal.Subscribe(io.get_executor(), [&] { ++fired; }));
  // A subscription cancelled before the ejection is not called, and leaves at once.
  auto cancelled = signal.Subscribe(io.get_executor(), [&] { fired += 100; });
  EXPECT_EQ(signal.waiting(), 4u);
  cancelled.Cancel();
  EXPECT_EQ(signal.waiting(), 3u);
  // Fire posts: nothing runs on the firing thread.
  std::thread([&] { signal.Fire(); }).join();
  EXPECT_EQ(fired, 0);
  io.run_for(100ms);
  EXPECT_EQ(fired, 3);
  // A second Fire does not call them again, and a subscription cancelled after a Fire was
  // posted but before it ran is not called.
  auto late = signal.Subscribe(io.get_executor(), [&] { fired += 100; });
  signal.Fire();
  late.Cancel();
  io.restart();
  io.run_for(100ms);
  EXPECT_EQ(fired, 3);
  // The destructor cancels.
  subscriptions.clear();
  EXPECT_EQ(signal.waiting(), 0u);
  {
    auto scoped = signal.Subscribe(io.get_executor(), [&] { fired += 100; });
    EXPECT_EQ(signal.waiting(), 1u);
  }
  EXPECT_EQ(signal.waiting(), 0u);
}

}  // namespace
}  // namespace prefix_router::gateway
