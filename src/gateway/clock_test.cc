// GatewayClock: the real steady time unless a test installs a ManualGatewayClock, whose
// advances wake pending GatewayTimers promptly; no real hour passes in these tests.
#include "gateway/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "http/server.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

namespace net = http::net;
using namespace std::chrono_literals;

// Without a manual clock, now() reads the steady clock.
TEST(GatewayClockTest, RealByDefault) {
  EXPECT_FALSE(GatewayClock::manual());
  const auto before = std::chrono::steady_clock::now().time_since_epoch();
  const auto now = GatewayClock::now().time_since_epoch();
  const auto after = std::chrono::steady_clock::now().time_since_epoch();
  EXPECT_LE(before, now);
  EXPECT_LE(now, after);
}

// A timer an hour away fires once the manual clock is advanced by an hour, and not before.
TEST(GatewayClockTest, ManualAdvanceWakesATimer) {
  ManualGatewayClock clock;
  ASSERT_TRUE(GatewayClock::manual());
  const auto start = clock.Now();
  net::io_context ctx;
  GatewayTimer timer(ctx);
  timer.expires_after(1h);
  std::atomic<bool> fired{false};
  timer.async_wait([&](const boost::system::error_code& ec) { fired = !ec; });
  std::thread runner([&] { ctx.run(); });
  clock.Advance(59min);
  // Nothing fires short of the deadline (the queue re-reads now() every millisecond or so).
  EXPECT_FALSE(prefix_router::testing::Eventually([&] { return fired.load(); }, 20ms, 1ms));
  clock.Advance(1min);
  EXPECT_TRUE(prefix_router::testing::Eventually([&] { return fired.load(); }));
  runner.join();
  EXPECT_EQ(clock.Now() - start, 1h);
}

}  // namespace
}  // namespace prefix_router::gateway
