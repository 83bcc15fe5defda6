// The peers' re-implemented policies (core/peer_policies.h) inside the simulator: every name
// runs through the sweep, routes every request, and the cache-following ones find the cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "core/peer_policies.h"
#include "sim/simulator.h"
#include "sim/sweep.h"

namespace prefix_router::sim {
namespace {

SweepSpec SmallLongContext(std::vector<std::string> strategies) {
  SweepSpec spec;
  auto profile = engine_model::FindProfile("tiny-test");
  EXPECT_TRUE(profile.ok());
  spec.base.profile = *profile;
  spec.base.params = {{"documents", "24"},
                      {"prefix_tokens", "300"},
                      {"preamble_tokens", "40"},
                      {"output_tokens_min", "4"},
                      {"output_tokens_max", "16"}};
  spec.base.duration_s = 120;
  spec.base.warmup_s = 20;
  spec.base.series_window_s = 0;
  spec.base.routing.prefix_length = 1024;
  spec.workloads = {"long-context"};
  spec.strategies = std::move(strategies);
  spec.instances = {4};
  spec.seeds = {3};
  spec.load_kind = LoadKind::kRate;
  spec.loads = {4};
  return spec;
}

// Every peer name is a strategy the simulator knows, and each routes every request it is sent.
TEST(PeersSimTest, EveryPeerRoutesEveryRequest) {
  std::vector<std::string> names{"random"};
  for (std::string_view n : PeerStrategyNames()) {
    names.emplace_back(n);
    EXPECT_TRUE(ParseStrategyName(n, RoutingOptions{}).ok()) << n;
    bool listed = false;
    for (std::string_view s : StrategyNames()) listed = listed || s == n;
    EXPECT_TRUE(listed) << n;
  }
  names.emplace_back("haproxy-chash-bl-f0");
  auto results = RunSweep(SmallLongContext(names), 2);
  ASSERT_TRUE(results.ok()) << results.status().message();
  ASSERT_EQ(results->size(), names.size());
  std::map<std::string, double> hit_rate;
  for (const report::RunResult& r : *results) {
    EXPECT_GT(r.requests, 100u) << r.strategy;
    EXPECT_EQ(r.errors, 0u) << r.strategy;
    double share = 0;
    for (double s : r.share) share += s;
    EXPECT_NEAR(share, 1.0, 1e-9) << r.strategy;  // every counted request went to an instance
    hit_rate[r.strategy] = r.hit_rate;
  }
  // With 24 shared documents on 4 small caches (about 12 fit in each), following the text or the
  // key beats random. (Not claimed for llm-d-prefix: at this light load every queue is empty and
  // every KV usage low, so the blocks of the shared preamble outscore them and herd requests on
  // the pods that hold them, as GIE's default weights do; with AutoTune its LRU is as small as
  // these engines' caches, so how far that goes depends on what it forgets.)
  for (const char* peer :
       {"sglang-cache-aware", "sglang-cache-aware-min-load", "haproxy-chash-bl", "haproxy-chash-bl-f0"}) {
    EXPECT_GT(hit_rate[peer], hit_rate["random"]) << peer;
  }
}

// A peer's result is labelled with its name, and one Simulate call without a label says so too.
TEST(PeersSimTest, RunsAreLabelledWithThePeer) {
  SweepSpec spec = SmallLongContext({"llm-d-prefix"});
  SimOptions o = spec.base;
  o.workload = "long-context";
  o.instances = 4;
  o.rate_rps = 4;
  o.duration_s = 30;
  o.warmup_s = 0;
  o.peer = "llm-d-prefix";
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->result.strategy, "llm-d-prefix");
  o.peer = "no-such-peer";
  EXPECT_FALSE(Simulate(o).ok());
}

}  // namespace
}  // namespace prefix_router::sim
