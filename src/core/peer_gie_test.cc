// Tests of our re-implementation of llm-d / GIE's prefix-cache, queue and KV-utilisation scorers
// and max-score picker: the worked examples of docs/research/peers.md section 2 (the first from
// GIE's TestPrefixPluginCompletion at the commit named in core/peer_gie.h), then the contract.
#include "core/peer_gie.h"

#include <gtest/gtest.h>

#include <xxhash.h>

#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/fleet.h"
#include "core/peer_policies.h"
#include "core/rng.h"

namespace prefix_router {
namespace {

std::shared_ptr<const FleetSnapshot> Fleet(std::vector<std::string> names) {
  std::vector<InstanceSpec> specs;
  for (auto& n : names) specs.push_back(InstanceSpec{n, "", 1, {}});
  auto r = FleetSnapshot::Create(std::move(specs));
  EXPECT_TRUE(r.ok());
  return std::move(r).value();
}

RouteRequest Req(std::string_view model, std::string_view text) {
  RouteRequest r;
  r.served_name = model;
  r.text = text;
  return r;
}

GieOptions BlockSize4() {
  GieOptions o;
  o.block_size = 4;
  return o;
}

// Example 1 (TestPrefixPluginCompletion): block size 4; the model seeds the chain; a pod scores
// its share of the request's blocks it was sent before.
TEST(GiePrefixScorerTest, PluginCompletionExample) {
  GieSchedulerPolicy p(BlockSize4(), "llm-d-prefix");
  auto f = Fleet({"pod1", "pod2"});
  auto prefix = [&](std::string_view model, std::string_view text) { return p.Score(Req(model, text), *f).prefix; };
  RouteRequest req1 = Req("model1", "aaaaaa");
  EXPECT_EQ(prefix("model1", "aaaaaa"), (std::vector<double>{0, 0}));
  p.OnDispatched(req1, Decision{0}, *f);
  RouteRequest req2 = Req("model2", "bbbbbb");
  EXPECT_EQ(prefix("model2", "bbbbbb"), (std::vector<double>{0, 0}));
  p.OnDispatched(req2, Decision{1}, *f);
  RouteRequest req3 = Req("model1", "aaaabbbb");
  EXPECT_EQ(prefix("model1", "aaaabbbb"), (std::vector<double>{0.5, 0}));
  p.OnDispatched(req3, Decision{0}, *f);
  EXPECT_EQ(prefix("test-model-new", "aaaabbbb"), (std::vector<double>{0, 0}));
  const auto five = prefix("model1", "aaaabbbbcccc");
  EXPECT_DOUBLE_EQ(five[0], 2.0 / 3.0);
  EXPECT_EQ(five[1], 0);
}

// Example 2 (derived): queue 0/5/10, KV usage 0.2/0.5/0.9, prefix 0/1/0.5 at weights 2/2/3 give
// totals 3.6 / 5.0 / 1.7, and the picker takes B.
TEST(GieSchedulerTest, CombinedDecisionAtDefaultWeights) {
  GieSchedulerPolicy p(BlockSize4(), "llm-d-prefix");
  auto f = Fleet({"A", "B", "C"});
  const int waiting[] = {0, 5, 10};
  const double usage[] = {0.2, 0.5, 0.9};
  for (uint32_t i = 0; i < 3; ++i) {
    f->state(i).engine_waiting = waiting[i];
    f->state(i).engine_kv_usage = usage[i];
  }
  p.OnDispatched(Req("m", "aaaabbbb"), Decision{1}, *f);  // B holds both blocks
  p.OnDispatched(Req("m", "aaaacccc"), Decision{2}, *f);  // C holds the first
  const auto s = p.Score(Req("m", "aaaabbbb"), *f);
  ASSERT_EQ(s.instances.size(), 3u);
  EXPECT_EQ(s.prefix, (std::vector<double>{0, 1, 0.5}));
  EXPECT_EQ(s.queue, (std::vector<double>{1, 0.5, 0}));
  EXPECT_NEAR(s.total[0], 3.6, 1e-12);
  EXPECT_NEAR(s.total[1], 5.0, 1e-12);
  EXPECT_NEAR(s.total[2], 1.7, 1e-12);
  Rng rng(1);
  auto d = p.Pick(Req("m", "aaaabbbb"), *f, rng);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->instance, 1u);
  EXPECT_EQ(d->kind, DecisionKind::kAffinity);
}

// Example 3: equal queues all score 1; otherwise (max - q) / (max - min).
TEST(GieSchedulerTest, QueueScorer) {
  EXPECT_EQ(GieQueueScores({3, 3, 3}), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(GieQueueScores({0, 10}), (std::vector<double>{1, 0}));
}

// Without engine metrics the queue is the gateway's in-flight count and the KV score is neutral.
TEST(GieSchedulerTest, UnknownMetricsFallBack) {
  GieSchedulerPolicy p(GieOptions{}, "llm-d-prefix");
  auto f = Fleet({"A", "B"});
  f->state(0).in_flight = 4;
  const auto s = p.Score(Req("m", "short"), *f);
  EXPECT_EQ(s.queue, (std::vector<double>{0, 1}));
  EXPECT_EQ(s.kv_cache, (std::vector<double>{1, 1}));
  Rng rng(1);
  auto d = p.Pick(Req("m", "short"), *f, rng);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->instance, 1u);
  EXPECT_EQ(d->kind, DecisionKind::kLeastOutstanding);
}

// Ties go uniformly at random, from the caller's Rng.
TEST(GieSchedulerTest, TiesAreRandom) {
  GieSchedulerPolicy p(GieOptions{}, "llm-d-prefix");
  auto f = Fleet({"A", "B", "C"});
  Rng rng(7);
  std::vector<int> count(3);
  for (int k = 0; k < 3000; ++k) {
    auto d = p.Pick(Req("m", "x"), *f, rng);
    ASSERT_TRUE(d.ok());
    ++count[d->instance];
  }
  for (int c : count) EXPECT_NEAR(c, 1000, 120);
}

// Hashes: whole blocks only, chained, seeded by the model, truncated at max blocks.
TEST(GiePrefixScorerTest, HashPrompt) {
  EXPECT_TRUE(GieHashPrompt("m", "abc", 4, 256).empty());
  const auto h = GieHashPrompt("m", "aaaabbbbcc", 4, 256);
  ASSERT_EQ(h.size(), 2u);
  // Block 0: XXH64(bytes || seed as 8 little-endian bytes), the seed XXH64 of the model name.
  const uint64_t seed = XXH64("m", 1, 0);
  std::string in = "aaaa";
  for (int k = 0; k < 8; ++k) in.push_back(static_cast<char>(seed >> (8 * k)));
  EXPECT_EQ(h[0], XXH64(in.data(), in.size(), 0));
  EXPECT_EQ(GieHashPrompt("m", "aaaabbbb", 4, 256), h);
  EXPECT_NE(GieHashPrompt("n", "aaaabbbb", 4, 256)[0], h[0]);
  EXPECT_NE(GieHashPrompt("m", "bbbbbbbb", 4, 256)[1], h[1]);  // the chain carries block 0
  EXPECT_EQ(GieHashPrompt("m", std::string(100, 'a'), 4, 3).size(), 3u);
}

// The per-pod LRU: adds refresh, lookups do not; an evicted hash stops matching for that pod,
// and matching stops at the first hash nobody holds.
TEST(GiePrefixScorerTest, IndexerLru) {
  GiePrefixIndexer idx(2);
  idx.Add({1, 2}, 10);
  idx.MatchLongestPrefix({1});  // no refresh
  idx.Add({3}, 10);             // evicts 1
  EXPECT_TRUE(idx.MatchLongestPrefix({1, 2}).empty());
  idx.Add({2}, 10);  // refresh 2
  idx.Add({4}, 10);  // evicts 3
  EXPECT_EQ(idx.PodEntries(10), 2u);
  EXPECT_EQ(idx.MatchLongestPrefix({2, 4, 3}).at(10), 2u);
  idx.Add({2, 9}, 20);
  auto hits = idx.MatchLongestPrefix({2, 9, 4});
  EXPECT_EQ(hits.at(10), 2u);  // 2 and 4 (9 is someone's, so the walk goes on)
  EXPECT_EQ(hits.at(20), 2u);
  idx.RemovePod(10);
  hits = idx.MatchLongestPrefix({2, 9, 4});
  EXPECT_EQ(hits.count(10), 0u);
  EXPECT_EQ(hits.at(20), 2u);
}

// AutoTune (GIE's default): blocks of the engine's block size x 4 characters, and an LRU per
// instance as large as the engine's GPU block count; GIE's own defaults when the engines report
// neither, or when AutoTune is off.
TEST(GieSchedulerTest, AutoTuneFollowsTheEngine) {
  GieOptions o;
  EXPECT_EQ(o.HashBlockSize(), 64u);
  EXPECT_EQ(o.LruCapacity(), 31250u);
  o.engine_block_size = 16;
  o.engine_gpu_blocks = 86000;
  EXPECT_EQ(o.HashBlockSize(), 64u);
  EXPECT_EQ(o.LruCapacity(), 86000u);
  o.engine_block_size = 32;
  EXPECT_EQ(o.HashBlockSize(), 128u);
  o.auto_tune = false;
  EXPECT_EQ(o.HashBlockSize(), 64u);
  EXPECT_EQ(o.LruCapacity(), 31250u);
  EXPECT_EQ(PeerTextLength("llm-d-prefix"), 64u * 256);
  EXPECT_EQ(PeerTextLength("llm-d-prefix", PeerEngineCache{32, 1000}), 128u * 256);
}

// The LRU capacity follows the engine's block count: an instance sent 6 blocks forgets the first
// (and so matches nothing: the walk stops at block 0) when its engine holds 4 blocks, and keeps
// them all when it holds 6.
TEST(GieSchedulerTest, LruCapacityFollowsTheEngine) {
  auto f = Fleet({"A", "B"});
  const std::string text = std::string(64, 'a') + std::string(64, 'b') + std::string(64, 'c') + std::string(64, 'd') +
                           std::string(64, 'e') + std::string(64, 'f');
  for (uint32_t blocks : {4u, 6u}) {
    GieOptions o;
    o.engine_block_size = 16;
    o.engine_gpu_blocks = blocks;
    GieSchedulerPolicy p(o, "llm-d-prefix");
    p.OnDispatched(Req("m", text), Decision{0, DecisionKind::kRandom, 0}, *f);
    const auto s = p.Score(Req("m", text), *f);
    ASSERT_EQ(s.instances.size(), 2u);
    EXPECT_DOUBLE_EQ(s.prefix[0], blocks == 6 ? 1.0 : 0.0) << blocks << " engine blocks";
  }
  // Through the factory, as the simulator builds it from the engine profile.
  auto p = MakePeerPolicy("llm-d-prefix", RoutingOptions{}, PeerEngineCache{16, 4});
  ASSERT_TRUE(p.ok());
  (*p)->OnDispatched(Req("m", text), Decision{1, DecisionKind::kRandom, 0}, *f);
  Rng rng(1);
  EXPECT_EQ((*p)->Pick(Req("m", text), *f, rng)->kind, DecisionKind::kLeastOutstanding);  // forgot
}

// A pod's LRU is sized when it is first added to, and keeps that size (GIE's indexer).
TEST(GiePrefixScorerTest, PodCapacityIsSetAtFirstAdd) {
  GiePrefixIndexer idx(31250);
  idx.Add({1}, 10, 3);
  idx.Add({2}, 11);
  idx.Add({3, 4, 5}, 10, 100);
  EXPECT_EQ(idx.PodCapacity(10), 3u);
  EXPECT_EQ(idx.PodCapacity(11), 31250u);
  EXPECT_EQ(idx.PodEntries(10), 3u);
  EXPECT_TRUE(idx.MatchLongestPrefix({1}).empty());
}

// No candidate: Unavailable, as the other policies.
TEST(GieSchedulerTest, NoCandidate) {
  GieSchedulerPolicy p(GieOptions{}, "llm-d-prefix");
  auto f = Fleet({"A"});
  f->state(0).available = false;
  Rng rng(1);
  EXPECT_FALSE(p.Pick(Req("m", "x"), *f, rng).ok());
}

}  // namespace
}  // namespace prefix_router
