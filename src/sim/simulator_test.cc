#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "engine_model/tokenizer.h"
#include "sim/sim_test_workload.h"
#include "sim/sweep.h"

namespace prefix_router::sim {
namespace {

using test_traffic::DocWorkload;

SimOptions TinyOptions(uint32_t documents = 12, uint32_t doc_words = 600, uint32_t turns = 1) {
  SimOptions o;
  o.workload = "docs";
  o.make_workload = [=](uint64_t seed) -> Result<std::unique_ptr<workload::Workload>> {
    return std::unique_ptr<workload::Workload>(new DocWorkload(seed, documents, doc_words, turns));
  };
  auto profile = engine_model::FindProfile("tiny-test");
  EXPECT_TRUE(profile.ok());
  o.profile = *profile;
  o.instances = 4;
  o.arrivals = Arrivals::kOpen;
  o.rate_rps = 20;
  o.duration_s = 60;
  o.warmup_s = 10;
  o.series_window_s = 10;
  o.routing.prefix_length = 1024;
  return o;
}

SimOptions WithStrategy(SimOptions o, std::string_view name) {
  auto r = ParseStrategyName(name, o.routing);
  EXPECT_TRUE(r.ok()) << name;
  o.routing = *r;
  o.strategy_label = std::string(name);
  return o;
}

// The same options give the same run, request for request.
TEST(SimulatorTest, DeterministicForASeed) {
  auto a = Simulate(WithStrategy(TinyOptions(), "prefix-aware"));
  auto b = Simulate(WithStrategy(TinyOptions(), "prefix-aware"));
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->records.size(), b->records.size());
  for (size_t i = 0; i < a->records.size(); ++i) {
    EXPECT_EQ(a->records[i].instance, b->records[i].instance);
    EXPECT_EQ(a->records[i].ttft_s, b->records[i].ttft_s);
    EXPECT_EQ(a->records[i].cached_tokens, b->records[i].cached_tokens);
  }
  SimOptions other = WithStrategy(TinyOptions(), "prefix-aware");
  other.seed = 2;
  auto c = Simulate(other);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->records.size() == c->records.size() && a->records[5].start_s == c->records[5].start_s, true);
}

// Every request is recorded and finishes; in-flight counts return to zero.
TEST(SimulatorTest, EveryRequestCompletes) {
  auto run = Simulate(WithStrategy(TinyOptions(), "random"));
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_GT(run->records.size(), 500u);
  for (const auto& r : run->records) {
    EXPECT_FALSE(r.error);
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_GE(r.e2e_s, r.ttft_s);
    EXPECT_EQ(r.output_tokens, 8u);
    EXPECT_LT(r.start_s, 60);
  }
  EXPECT_EQ(run->result.errors, 0u);
}

// An open loop sends about rate x duration requests (Poisson: within 5 standard deviations).
TEST(SimulatorTest, OpenLoopRate) {
  auto run = Simulate(WithStrategy(TinyOptions(), "random"));
  ASSERT_TRUE(run.ok());
  const double expected = 20 * 60;
  EXPECT_NEAR(static_cast<double>(run->records.size()), expected, 5 * std::sqrt(expected));
}

// A closed loop never has more requests in flight than users, and keeps them all busy.
TEST(SimulatorTest, ClosedLoopConcurrency) {
  SimOptions o = WithStrategy(TinyOptions(), "least-outstanding-requests");
  o.arrivals = Arrivals::kClosed;
  o.concurrency = 5;
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok());
  // Sweep over request intervals: at any send time, at most 5 requests are open.
  std::vector<std::pair<double, int>> edges;
  for (const auto& r : run->records) {
    edges.push_back({r.start_s, +1});
    edges.push_back({r.start_s + r.e2e_s, -1});
  }
  std::sort(edges.begin(), edges.end());
  int open = 0, peak = 0;
  for (auto [t, d] : edges) {
    open += d;
    peak = std::max(peak, open);
  }
  EXPECT_EQ(peak, 5);
}

// TTFT on an idle instance is the profile's request overhead plus the first step.
TEST(SimulatorTest, TtftIncludesRequestOverhead) {
  SimOptions o = WithStrategy(TinyOptions(), "random");
  o.max_requests = 1;
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(run->records.size(), 1u);
  EXPECT_GT(run->records[0].ttft_s, o.profile.config.cost.request_overhead);
  EXPECT_LT(run->records[0].ttft_s, o.profile.config.cost.request_overhead + 0.5);
}

// Prefix-aware routing keeps each document on one instance and beats random on hit rate when
// the documents fit the fleet's cache but not one instance's.
TEST(SimulatorTest, PrefixAwareRaisesHitRate) {
  // 12 documents of ~600 tokens = ~7,200 tokens: more than one tiny-test instance (4,096),
  // less than four.
  auto random = Simulate(WithStrategy(TinyOptions(), "random"));
  auto prefix = Simulate(WithStrategy(TinyOptions(), "prefix-aware"));
  ASSERT_TRUE(random.ok());
  ASSERT_TRUE(prefix.ok());
  EXPECT_GT(prefix->result.hit_rate, 0.85);
  EXPECT_LT(random->result.hit_rate, 0.75);
  EXPECT_LT(prefix->result.ttft_p50_s, random->result.ttft_p50_s);
}

// The bounds: the infinite cache's hit rate is at least the fleet-sized LRU's.
TEST(SimulatorTest, BoundsAreOrdered) {
  SimOptions o = WithStrategy(TinyOptions(), "random");
  o.bounds = true;
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok());
  const auto& extra = run->result.extra;
  ASSERT_TRUE(extra.contains("lru_bound_hit_rate"));
  ASSERT_TRUE(extra.contains("infinite_bound_hit_rate"));
  EXPECT_GE(extra.at("infinite_bound_hit_rate"), extra.at("lru_bound_hit_rate"));
  EXPECT_GT(extra.at("lru_bound_hit_rate"), run->result.hit_rate);
  EXPECT_LE(extra.at("infinite_bound_hit_rate"), 1.0);
}

// A later turn resends the reply the engine generated, so it hits the blocks cached while
// decoding: its cached tokens cover the whole previous turn, rounded down to blocks.
TEST(SimulatorTest, MultiTurnHitsPreviousReply) {
  // Documents longer than the prefix length, so both turns have the same key.
  SimOptions o = WithStrategy(TinyOptions(4, 300, 2), "prefix-aware");
  o.arrivals = Arrivals::kClosed;
  o.concurrency = 1;
  o.max_requests = 2;  // one user: turn 1, then turn 2 of the same conversation
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(run->records.size(), 2u);
  const auto& first = run->records[0];
  const auto& second = run->records[1];
  EXPECT_EQ(first.instance, second.instance);
  EXPECT_GT(second.prompt_tokens, first.prompt_tokens + first.output_tokens);
  // The first turn's prompt and all but its last generated token are in the cache, in full
  // 16-token blocks.
  const uint32_t reusable = first.prompt_tokens + first.output_tokens - 1;
  EXPECT_GE(second.cached_tokens, reusable / 16 * 16);
}

// Removing an instance stops traffic to it; adding one gives it traffic from then on.
TEST(SimulatorTest, ScaleEventsChangeTheFleet) {
  SimOptions o = WithStrategy(TinyOptions(), "prefix-aware");
  o.events.push_back(*ParseScaleEvent("remove:instance-2@20"));
  o.events.push_back(*ParseScaleEvent("add@40"));
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok()) << run->result.workload;
  ASSERT_EQ(run->instance_names.size(), 5u);
  EXPECT_EQ(run->instance_names[4], "instance-5");
  for (const auto& r : run->records) {
    if (r.instance == 1) {
      EXPECT_LT(r.start_s, 20.0);
    }
    if (r.instance == 4) {
      EXPECT_GE(r.start_s, 40.0);
    }
  }
  size_t to_new = 0;
  for (const auto& r : run->records) to_new += r.instance == 4;
  EXPECT_GT(to_new, 10u);
}

// Replacing an instance keeps its keys but loses its cache: its requests miss right after.
TEST(SimulatorTest, ReplaceLosesTheCache) {
  SimOptions o = WithStrategy(TinyOptions(), "prefix-aware");
  o.events.push_back(*ParseScaleEvent("replace:instance-1@30"));
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(run->instance_names.size(), 4u);
  uint32_t cold_after = 0, before = 0, after = 0;
  for (const auto& r : run->records) {
    if (r.instance != 0) continue;
    if (r.start_s < 30) ++before;
    if (r.start_s >= 30) {
      ++after;
      if (r.start_s < 33 && r.cached_tokens < r.prompt_tokens / 2) ++cold_after;
    }
  }
  EXPECT_GT(before, 0u);
  EXPECT_GT(after, 0u);
  EXPECT_GT(cold_after, 0u);
}

// A low concurrency threshold makes prefix-aware overflow, and overflowed requests are counted.
TEST(SimulatorTest, ThresholdOverflows) {
  SimOptions o = WithStrategy(TinyOptions(2, 300), "prefix-aware");
  o.routing.concurrency_threshold = 1;
  o.rate_rps = 40;
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok());
  EXPECT_GT(run->result.overflow_rate, 0.05);
  size_t overflowed = 0;
  for (const auto& r : run->records) overflowed += r.overflow;
  EXPECT_GT(overflowed, 0u);
}

// Scale events and strategies parse, and bad ones are rejected with a reason.
TEST(SimulatorTest, ParsesNames) {
  auto e = ParseScaleEvent("replace:instance-2@1800");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, ScaleEvent::Kind::kReplace);
  EXPECT_EQ(e->instance, "instance-2");
  EXPECT_EQ(e->at_s, 1800);
  EXPECT_FALSE(ParseScaleEvent("remove@10").ok());
  EXPECT_FALSE(ParseScaleEvent("grow@10").ok());
  EXPECT_FALSE(ParseScaleEvent("add@soon").ok());
  auto s = ParseStrategyName("prefix-aware-least-loaded", RoutingOptions{});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->strategy, Strategy::kPrefixAware);
  EXPECT_EQ(s->spill, SpillMode::kLeastLoaded);
  EXPECT_EQ(s->load_measure, LoadMeasure::kRequests);
  s = ParseStrategyName("least-outstanding-requests+tokens", RoutingOptions{});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->strategy, Strategy::kLeastOutstanding);
  EXPECT_EQ(s->load_measure, LoadMeasure::kPromptTokens);
  s = ParseStrategyName("prefix-aware-least-loaded-b0+tokens", RoutingOptions{});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->spill, SpillMode::kLeastLoaded);
  EXPECT_EQ(s->balance_factor, 0);
  EXPECT_EQ(s->load_measure, LoadMeasure::kPromptTokens);
  EXPECT_FALSE(ParseStrategyName("fastest+tokens", RoutingOptions{}).ok());
  EXPECT_FALSE(ParseStrategyName("prefix-aware-sideways", RoutingOptions{}).ok());
  EXPECT_FALSE(ParseStrategyName("fastest", RoutingOptions{}).ok());
}

// The simulator's labels start from core's registry: every registry name is a label it accepts,
// for that strategy, and is listed by StrategyNames(); an unknown label is refused with a message
// that lists every registry name.
TEST(SimulatorTest, LabelsAreTheRegistryNames) {
  const std::vector<std::string_view> listed = StrategyNames();
  for (const StrategyInfo& e : StrategyRegistry()) {
    auto s = ParseStrategyName(e.name, RoutingOptions{});
    ASSERT_TRUE(s.ok()) << e.name << ": " << s.status().message();
    EXPECT_EQ(s->strategy, e.strategy) << e.name;
    EXPECT_NE(std::find(listed.begin(), listed.end(), e.name), listed.end()) << e.name;
  }
  auto bad = ParseStrategyName("fastest", RoutingOptions{});
  ASSERT_FALSE(bad.ok());
  for (const StrategyInfo& e : StrategyRegistry()) {
    EXPECT_NE(bad.status().message().find(e.name), std::string::npos) << e.name;
  }
  // The default comparison names only strategies the parser accepts.
  for (const std::string& label : DefaultComparison()) {
    EXPECT_TRUE(ParseStrategyName(label, RoutingOptions{}).ok()) << label;
  }
}

// A finite trace that ends before the saturation run's warm-up does (30 long prompts, all sent at
// once by the closed loop, all done in seconds) is measured over the whole run instead of
// reporting no throughput; the prompts, past one tiny-test engine's KV cache together, complete.
TEST(SimulatorTest, SaturationOfAShortTraceIsMeasured) {
  const std::string path = ::testing::TempDir() + "/short-trace.jsonl";
  {
    std::ofstream f(path);
    Rng rng(3);
    for (int i = 0; i < 30; ++i) {
      std::string text;
      for (int w = 0; w < 300; ++w) text += "w" + std::to_string(rng.Uniform(1000000)) + " ";
      f << R"({"messages": [{"role": "user", "content": ")" << text << R"("}], "max_tokens": 32})"
        << "\n";
    }
  }
  SimOptions o = WithStrategy(TinyOptions(), "random");
  o.workload = "trace";
  o.make_workload = nullptr;
  o.params["file"] = path;
  o.instances = 1;
  Result<double> rps = SaturationThroughput(o, 32, 900, 300);
  ASSERT_TRUE(rps.ok()) << rps.status().ToString();
  EXPECT_GT(*rps, 0.0);
  o.arrivals = Arrivals::kClosed;
  o.concurrency = 30;
  o.warmup_s = 0;
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->result.requests, 30u);
  EXPECT_EQ(run->result.errors, 0u);
}

// A sweep runs the product of its dimensions and records each run's coordinates.
TEST(SweepTest, RunsTheProduct) {
  SweepSpec spec;
  spec.base = TinyOptions();
  spec.base.duration_s = 20;
  spec.base.warmup_s = 5;
  spec.workloads = {"docs"};
  spec.strategies = {"random", "prefix-aware"};
  spec.prefix_lengths = {1024, 4096};
  spec.seeds = {1, 2};
  spec.load_kind = LoadKind::kPercentOfSaturation;
  spec.loads = {50};
  spec.saturation_duration_s = 20;
  spec.saturation_warmup_s = 5;
  spec.saturation_users_per_instance = 4;
  ASSERT_EQ(SweepSize(spec), 8u);
  auto results = RunSweep(spec, 2);
  ASSERT_TRUE(results.ok()) << results.status().message();
  ASSERT_EQ(results->size(), 8u);
  std::set<std::tuple<std::string, double, uint64_t>> seen;
  for (const auto& r : *results) {
    seen.insert({r.strategy, r.settings.at("prefix_length"), r.seed});
    EXPECT_EQ(r.settings.at("load_pct"), 50);
    EXPECT_NEAR(r.settings.at("rate_rps"), r.settings.at("saturation_rps") / 2, 1e-9);
  }
  EXPECT_EQ(seen.size(), 8u);
  spec.strategies = {"nope"};
  EXPECT_FALSE(RunSweep(spec, 1).ok());
}

}  // namespace
}  // namespace prefix_router::sim
