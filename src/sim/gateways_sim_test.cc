// simulate --gateways: K gateway replicas, each with its own policy and in-flight counts, in front
// of one fleet whose engines, caches and KV events they share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/peer_policies.h"
#include "report/report.h"
#include "sim/sim_test_workload.h"
#include "sim/simulator.h"
#include "sim/sweep.h"

namespace prefix_router::sim {
namespace {

using test_traffic::DocWorkload;

// 12 documents of ~600 tokens on 4 tiny-test instances: more than one instance's cache holds,
// less than the fleet's, so routing decides the hit rate.
SimOptions Options(std::string_view strategy, uint32_t gateways, uint32_t turns = 1) {
  SimOptions o;
  o.workload = "docs";
  o.make_workload = [=](uint64_t seed) -> Result<std::unique_ptr<workload::Workload>> {
    return std::unique_ptr<workload::Workload>(new DocWorkload(seed, 12, 600, turns));
  };
  auto profile = engine_model::FindProfile("tiny-test");
  EXPECT_TRUE(profile.ok());
  o.profile = *profile;
  o.instances = 4;
  o.gateways = gateways;
  o.arrivals = Arrivals::kOpen;
  o.rate_rps = 20;
  o.duration_s = 60;
  o.warmup_s = 10;
  o.series_window_s = 10;
  o.routing.prefix_length = 1024;
  auto routing = ParseStrategyName(strategy, o.routing);
  EXPECT_TRUE(routing.ok()) << strategy;
  o.routing = *routing;
  o.strategy_label = std::string(strategy);
  return o;
}

// A closed loop of `users` sending at once at t = 0: the first `users` records are one burst.
SimOptions Burst(std::string_view strategy, uint32_t gateways, uint32_t users, uint64_t seed) {
  SimOptions o = Options(strategy, gateways);
  o.arrivals = Arrivals::kClosed;
  o.concurrency = users;
  o.max_requests = users;
  o.seed = seed;
  return o;
}

// Each gateway has its own round-robin turn: the first request of each of 2 gateways goes to
// the same (first) instance, where one gateway sends its first two to two instances.
TEST(GatewaysSimTest, EachGatewayHasItsOwnPolicyState) {
  auto one = Simulate(Burst("round-robin", 1, 2, 1));
  auto two = Simulate(Burst("round-robin", 2, 2, 1));
  ASSERT_TRUE(one.ok()) << one.status().message();
  ASSERT_TRUE(two.ok()) << two.status().message();
  ASSERT_EQ(one->records.size(), 2u);
  ASSERT_EQ(two->records.size(), 2u);
  EXPECT_NE(one->records[0].instance, one->records[1].instance);
  EXPECT_EQ(two->records[0].instance, two->records[1].instance);
}

// A gateway counts only the requests it sent: least-outstanding-requests spreads a burst of 8 on
// 4 instances exactly 2 per instance with one gateway; with 4 gateways (requests i and i + 4 from
// gateway i) each gateway still spreads its own two, but together they pile up on some seeds.
TEST(GatewaysSimTest, EachGatewaySeesOnlyItsOwnInFlight) {
  int uneven = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto one = Simulate(Burst("least-outstanding-requests", 1, 8, seed));
    auto four = Simulate(Burst("least-outstanding-requests", 4, 8, seed));
    ASSERT_TRUE(one.ok()) << one.status().message();
    ASSERT_TRUE(four.ok()) << four.status().message();
    ASSERT_EQ(one->records.size(), 8u);
    ASSERT_EQ(four->records.size(), 8u);
    std::map<int32_t, int> per_one, per_four;
    for (const auto& r : one->records) ++per_one[r.instance];
    for (const auto& r : four->records) ++per_four[r.instance];
    for (const auto& [instance, n] : per_one) EXPECT_EQ(n, 2) << "seed " << seed;
    for (uint32_t g = 0; g < 4; ++g) {
      EXPECT_NE(four->records[g].instance, four->records[g + 4].instance) << "seed " << seed;
    }
    int most = 0;
    for (const auto& [instance, n] : per_four) most = std::max(most, n);
    uneven += most > 2;
  }
  EXPECT_GE(uneven, 10);
}

// Random routing reads no state and the gateways share one random stream: any K routes every
// request as one gateway does.
TEST(GatewaysSimTest, RandomIsTheSameForAnyGatewayCount) {
  auto one = Simulate(Options("random", 1));
  auto four = Simulate(Options("random", 4));
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(four.ok());
  ASSERT_EQ(one->records.size(), four->records.size());
  for (size_t i = 0; i < one->records.size(); ++i) {
    EXPECT_EQ(one->records[i].instance, four->records[i].instance);
    EXPECT_EQ(one->records[i].ttft_s, four->records[i].ttft_s);
  }
}

// Prefix-aware without spill (threshold never reached, no bounded load) is stateless
// rendezvous hashing: 4 gateways agree on every key's home, request for request.
TEST(GatewaysSimTest, StatelessPrefixAwareGatewaysAgree) {
  SimOptions o1 = Options("prefix-aware-b0", 1);
  o1.routing.concurrency_threshold = 1024;
  SimOptions o4 = o1;
  o4.gateways = 4;
  auto one = Simulate(o1);
  auto four = Simulate(o4);
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(four.ok());
  ASSERT_EQ(one->records.size(), four->records.size());
  for (size_t i = 0; i < one->records.size(); ++i) {
    EXPECT_EQ(one->records[i].instance, four->records[i].instance) << "request " << i;
  }
  EXPECT_EQ(one->result.hit_rate, four->result.hit_rate);
}

// With its defaults (bounded loads, share meter and key homes per gateway), prefix-aware on 4
// gateways still sends each document home: the hit rate stays within a few points of one
// gateway's.
TEST(GatewaysSimTest, PrefixAwareHitRateHoldsWithGateways) {
  auto one = Simulate(Options("prefix-aware", 1));
  auto four = Simulate(Options("prefix-aware", 4));
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(four.ok());
  EXPECT_GT(one->result.hit_rate, 0.85);
  EXPECT_NEAR(four->result.hit_rate, one->result.hit_rate, 0.05);
}

// cache-aware learns from what it sent: each of 4 gateways' indexes holds a quarter of the
// traffic, so documents are cached in more places and the hit rate falls well below one
// gateway's.
TEST(GatewaysSimTest, CacheAwareLearnsOnlyItsOwnDispatches) {
  auto one = Simulate(Options("cache-aware", 1));
  auto four = Simulate(Options("cache-aware", 4));
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(four.ok());
  EXPECT_GT(one->result.hit_rate, 0.85);
  EXPECT_LT(four->result.hit_rate, one->result.hit_rate - 0.1);
}

// Every gateway learns the engines' caches from their KV events (each subscribes): kv-aware on 4
// gateways keeps one gateway's hit rate. With batches lost (per gateway), an instance with a gap
// is judged on the gateway's own sent view, a quarter of the traffic: the hit rate falls towards
// cache-aware's with 4 gateways, and every request is still answered.
TEST(GatewaysSimTest, KvAwareGatewaysEachReceiveTheEvents) {
  auto one = Simulate(Options("kv-aware", 1));
  auto four = Simulate(Options("kv-aware", 4));
  ASSERT_TRUE(one.ok()) << one.status().message();
  ASSERT_TRUE(four.ok()) << four.status().message();
  EXPECT_GT(one->result.hit_rate, 0.85);
  EXPECT_NEAR(four->result.hit_rate, one->result.hit_rate, 0.02);
  EXPECT_EQ(four->result.settings.at("gateways"), 4);
  EXPECT_FALSE(one->result.settings.contains("gateways"));

  SimOptions lossy = Options("kv-aware", 4);
  lossy.kv_events.loss = 0.1;
  auto lost = Simulate(lossy);
  ASSERT_TRUE(lost.ok());
  EXPECT_LT(lost->result.hit_rate, four->result.hit_rate);
  EXPECT_EQ(lost->result.errors, 0u);
}

// Every request of every gateway is answered, across multi-turn sessions and a replaced and an
// added instance, for each kind of policy (stateless, load-reading, learning, KV events, peer).
TEST(GatewaysSimTest, EveryRequestIsAnswered) {
  for (std::string_view strategy :
       {"least-outstanding-requests", "prefix-aware", "cache-aware", "kv-aware", "dynamo-kv", "sglang-cache-aware"}) {
    SimOptions o = Options(strategy, 3, /*turns=*/3);
    if (IsPeerStrategy(strategy)) o.peer = std::string(strategy);
    o.kv_events.loss = 0.05;
    o.events.push_back(*ParseScaleEvent("replace:instance-2@20"));
    o.events.push_back(*ParseScaleEvent("add@40"));
    auto run = Simulate(o);
    ASSERT_TRUE(run.ok()) << strategy << ": " << run.status().message();
    ASSERT_GT(run->records.size(), 500u) << strategy;
    for (const auto& r : run->records) {
      ASSERT_FALSE(r.error) << strategy;
      EXPECT_GT(r.ttft_s, 0) << strategy;
      EXPECT_GE(r.e2e_s, r.ttft_s) << strategy;
    }
    EXPECT_EQ(run->result.errors, 0u) << strategy;
  }
}

// A gateway count outside 1..64 is rejected with the allowed range, by a run and by a sweep.
TEST(GatewaysSimTest, RejectsBadGatewayCounts) {
  for (uint32_t k : {0u, 65u}) {
    auto run = Simulate(Options("random", k));
    ASSERT_FALSE(run.ok()) << k;
    EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(run.status().message().find("gateways: " + std::to_string(k) + " is outside the allowed range 1..64"),
              std::string::npos)
        << run.status().message();
    SweepSpec spec;
    spec.base = Options("random", 1);
    spec.workloads = {"docs"};
    spec.gateways = {1, k};
    EXPECT_FALSE(RunSweep(spec, 1).ok());
  }
  EXPECT_TRUE(Simulate(Options("random", 64)).ok());
}

// A sweep over gateway counts records the count in every run (1 too) and labels the table's rows
// with it, also when another coordinate (here the prefix length) varies.
TEST(GatewaysSimTest, SweepLabelsRowsByGatewayCount) {
  SweepSpec spec;
  spec.base = Options("random", 1);
  spec.base.duration_s = 20;
  spec.base.warmup_s = 5;
  spec.workloads = {"docs"};
  spec.strategies = {"random", "prefix-aware"};
  spec.prefix_lengths = {1024, 2048};
  spec.gateways = {1, 2};
  spec.load_kind = LoadKind::kRate;
  spec.loads = {10};
  ASSERT_EQ(SweepSize(spec), 8u);
  auto results = RunSweep(spec, 2);
  ASSERT_TRUE(results.ok()) << results.status().message();
  ASSERT_EQ(results->size(), 8u);
  for (const auto& r : *results) ASSERT_TRUE(r.settings.contains("gateways"));
  const std::string table = report::ComparisonTable(*results);
  for (const char* strategy : {"random", "prefix-aware"}) {
    for (const char* k : {"1", "2"}) {
      for (const char* length : {"1024", "2048"}) {
        const std::string row = std::string(strategy) + " gateways=" + k + " prefix_length=" + length;
        EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
      }
    }
  }
}

}  // namespace
}  // namespace prefix_router::sim
