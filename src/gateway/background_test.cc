// SpawnBackground and AllOf: an exception escaping a gateway loop is logged with the loop's
// name and counted, never silently dropped.
#include "gateway/background.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "gateway/all_of.h"
#include "gateway/gateway_test_util.h"

namespace prefix_router::gateway {
namespace {

namespace net = http::net;

// A loop that throws is logged at error level with its task name and counted once.
TEST(BackgroundTest, ThrowingLoopIsLoggedAndCounted) {
  testing::LogCapture log(spdlog::level::warn);
  metrics::Registry registry;
  metrics::Family<metrics::Counter>& family = BackgroundFailuresFamily(registry);
  net::io_context ctx;
  SpawnBackground(
      ctx.get_executor(), "health",
      []() -> net::awaitable<void> {
        co_await net::post(co_await net::this_coro::executor, net::use_awaitable);
        throw std::runtime_error("boom in the loop");
      }(),
      family.WithLabels({"health"}));
  ctx.run();
  EXPECT_EQ(family.WithLabels({"health"}).Value(), 1u);
  const std::string text = log.text();
  EXPECT_NE(text.find("background task failed"), std::string::npos) << text;
  EXPECT_NE(text.find("health"), std::string::npos) << text;
  EXPECT_NE(text.find("boom in the loop"), std::string::npos) << text;
  EXPECT_NE(registry.Render().find("prefix_router_background_task_failures_total{task=\"health\"} 1"),
            std::string::npos)
      << registry.Render();
}

// A loop that ends normally is neither logged nor counted.
TEST(BackgroundTest, CleanEndIsSilent) {
  testing::LogCapture log(spdlog::level::warn);
  metrics::Registry registry;
  metrics::Counter& failures = BackgroundFailuresFamily(registry).WithLabels({"sample"});
  net::io_context ctx;
  bool ran = false;
  SpawnBackground(
      ctx.get_executor(), "sample",
      [](bool& r) -> net::awaitable<void> {
        r = true;
        co_return;
      }(ran),
      failures);
  ctx.run();
  EXPECT_TRUE(ran);
  EXPECT_EQ(failures.Value(), 0u);
  EXPECT_EQ(log.text().find("background task failed"), std::string::npos);
}

// A task of a round that throws lets the others finish, and the round rethrows it: its loop's
// handler sees it instead of the round hanging.
TEST(BackgroundTest, AllOfRethrowsAfterEveryTaskEnded) {
  metrics::Registry registry;
  metrics::Counter& failures = BackgroundFailuresFamily(registry).WithLabels({"discovery"});
  net::io_context ctx;
  int finished = 0;
  const auto task = [&finished](size_t k) -> net::awaitable<void> {
    co_await net::post(co_await net::this_coro::executor, net::use_awaitable);
    if (k == 1) throw std::runtime_error("one instance's poll failed");
    ++finished;
  };
  SpawnBackground(
      ctx.get_executor(), "discovery",
      [](const decltype(task)& t) -> net::awaitable<void> { co_await AllOf(3, t); }(task), failures);
  ctx.run();
  EXPECT_EQ(finished, 2);
  EXPECT_EQ(failures.Value(), 1u);
}

}  // namespace
}  // namespace prefix_router::gateway
