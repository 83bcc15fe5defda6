// Engine-reported load end to end: the gateway scrapes each instance's /metrics and
// load_measure: engine routes by what the engines report (gateway/engine_metrics.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gateway/clock.h"
#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"
#include "gateway/status.h"
#include "testing/fake_upstream.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::gateway::testing {
namespace {

using pt::Eventually;

std::string VllmMetrics(int running, int waiting, double usage) {
  return "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} " +
         std::to_string(running) + "\nvllm:num_requests_waiting{model_name=\"m\"} " + std::to_string(waiting) +
         "\nvllm:kv_cache_usage_perc{model_name=\"m\"} " + std::to_string(usage) + "\n";
}

GatewayConfig EngineLoadConfig(const Fakes& fakes) {
  GatewayConfig config = ConfigFor(fakes);
  config.routing.strategy = Strategy::kLeastOutstanding;
  config.routing.load_measure = LoadMeasure::kEngine;
  config.engine_metrics.interval = 0.05;
  return config;
}

// The engines' reports decide: the busy engine (as its /metrics says, though this gateway sent
// it nothing) gets no request; requests sent since a report count on top of it, so a burst
// between two scrapes spreads instead of herding; a new report moves traffic.
TEST(EngineLoadTest, RoutesByTheEnginesReportedQueues) {
  QuietLogs();
  Fakes fakes = StartFakes({"a", "b"});
  fakes[0]->SetMetrics(VllmMetrics(10, 5, 0.9));
  fakes[1]->SetMetrics(VllmMetrics(2, 0, 0.1));
  auto gw = StartGateway(EngineLoadConfig(fakes));
  ASSERT_NE(gw, nullptr);
  const auto fleet = gw->routing()->fleet;
  ASSERT_TRUE(Eventually(
      [&] { return fleet->state(0).engine_running.load() == 10 && fleet->state(1).engine_running.load() == 2; }));
  EXPECT_EQ(fleet->state(0).engine_waiting.load(), 5);
  EXPECT_DOUBLE_EQ(fleet->state(1).engine_kv_usage.load(), 0.1);

  // b reports 2; each request sent counts until the next report: b reaches a's 15 only after 13.
  // The fakes keep reporting the same numbers, so some scrapes land in between; either way a is
  // never chosen while b's total stays below it.
  for (int n = 0; n < 5; ++n) {
    const auto r = pt::Post(gw->port(), kChat, ChatBody("m", "q" + std::to_string(n)));
    ASSERT_EQ(r.status(), 200) << r.body();
    EXPECT_EQ(r.Header(kInstance), "b");
  }
  fakes[1]->SetMetrics(VllmMetrics(40, 3, 0.95));
  ASSERT_TRUE(Eventually([&] { return fleet->state(1).engine_running.load() == 40; }));
  const auto r = pt::Post(gw->port(), kChat, ChatBody("m", "after"));
  ASSERT_EQ(r.status(), 200);
  EXPECT_EQ(r.Header(kInstance), "a");
  EXPECT_EQ(fakes[0]->requests(), 1);
  // The status document shows each engine's last report.
  const boost::json::object status = StatusJson(*gw, StatusClock::now());
  const auto& b = status.at("instances").as_array().at(1).as_object();
  EXPECT_EQ(b.at("name").as_string(), "b");
  EXPECT_EQ(b.at("engine").at("running").as_int64(), 40);
  EXPECT_EQ(b.at("engine").at("waiting").as_int64(), 3);
  EXPECT_DOUBLE_EQ(b.at("engine").at("kv_usage").as_double(), 0.95);
}

// An instance whose /metrics cannot be read is counted by the gateway's own in-flight requests
// (its report is forgotten), and the failure is logged once, not at every scrape.
TEST(EngineLoadTest, UnreadableMetricsFallBackToTheGatewaysCount) {
  LogCapture log(spdlog::level::warn);
  Fakes fakes = StartFakes({"a", "b"});
  fakes[0]->SetMetrics("not_vllm 1\n");
  fakes[1]->SetMetrics(VllmMetrics(3, 0, 0.5));
  auto gw = StartGateway(EngineLoadConfig(fakes));
  ASSERT_NE(gw, nullptr);
  const auto fleet = gw->routing()->fleet;
  ASSERT_TRUE(
      Eventually([&] { return fleet->state(1).engine_running.load() == 3 && fakes[0]->metrics_requests() >= 3; }));
  EXPECT_EQ(fleet->state(0).engine_running.load(), -1);
  EXPECT_TRUE(std::isnan(fleet->state(0).engine_kv_usage.load()));
  // a counts 0 in flight, b its report of 3: a takes the request.
  const auto r = pt::Post(gw->port(), kChat, ChatBody("m", "q"));
  ASSERT_EQ(r.status(), 200);
  EXPECT_EQ(r.Header(kInstance), "a");
  const std::string text = log.text();
  size_t count = 0;
  for (size_t at = text.find("engine metrics scrape failed"); at != std::string::npos;
       at = text.find("engine metrics scrape failed", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << text;
  EXPECT_NE(text.find("no vllm:num_requests_running"), std::string::npos) << text;
}

// Scraping is off unless asked: the loop's turns pass (the clock stepped by six intervals) and
// no /metrics request reaches an instance.
TEST(EngineLoadTest, NoScrapesWithoutEngineLoad) {
  QuietLogs();
  ManualGatewayClock clock;
  Fakes fakes = StartFakes({"a"});
  fakes[0]->SetMetrics(VllmMetrics(1, 1, 0.5));
  GatewayConfig config = ConfigFor(fakes);
  config.engine_metrics.interval = 0.05;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  ASSERT_TRUE(Eventually([&] { return gw->engine_metrics_turns() >= 1; }));
  const uint64_t first = gw->engine_metrics_turns();
  for (uint64_t n = 1; n <= 6; ++n) {
    clock.Advance(std::chrono::milliseconds(50));
    ASSERT_TRUE(Eventually([&] { return gw->engine_metrics_turns() >= first + n; })) << n;
  }
  EXPECT_EQ(gw->engine_metrics_turns(), first + 6);  // one turn per interval, no more
  EXPECT_EQ(fakes[0]->metrics_requests(), 0);
  EXPECT_EQ(gw->routing()->fleet->state(0).engine_running.load(), -1);
  const boost::json::object status = StatusJson(*gw, StatusClock::now());
  EXPECT_TRUE(status.at("instances").as_array().at(0).as_object().at("engine").is_null());
}

// The engine_metrics section: present turns scraping on; interval and path are checked with
// the field named.
TEST(EngineLoadTest, ConfigSection) {
  auto on = ParseConfigYaml(
      "engine_metrics: {interval: 0.5, path: /vllm/metrics}\n"
      "instances: [{url: http://127.0.0.1:8000}]\n");
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->engine_metrics.enabled);
  EXPECT_DOUBLE_EQ(on->engine_metrics.interval, 0.5);
  EXPECT_EQ(on->engine_metrics.path, "/vllm/metrics");
  EXPECT_TRUE(ValidateConfig(*on).ok());
  auto off = ParseConfigYaml("instances: [{url: http://127.0.0.1:8000}]\nrouting: {load_measure: engine}\n");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->engine_metrics.enabled);
  EXPECT_EQ(off->routing.load_measure, LoadMeasure::kEngine);
  for (const auto& [yaml, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"engine_metrics: {interval: 0.01}\n", "engine_metrics.interval"},
           {"engine_metrics: {path: metrics}\n", "engine_metrics.path: 'metrics' must be an absolute path"},
           {"engine_metrics: {path: \"/m?x=1\"}\n", "engine_metrics.path"}}) {
    auto c = ParseConfigYaml(yaml + "instances: [{url: http://127.0.0.1:8000}]\n");
    Status s = c.ok() ? ValidateConfig(*c) : c.status();
    ASSERT_FALSE(s.ok()) << yaml;
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  }
  auto bad = ParseConfigYaml("engine_metrics: {intervl: 1}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("engine_metrics.intervl: unknown field"), std::string::npos);
}

}  // namespace
}  // namespace prefix_router::gateway::testing
