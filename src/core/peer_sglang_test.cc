// Tests of our re-implementation of SGLang's cache-aware policy: the worked examples of
// docs/research/peers.md section 1 (from SGLang's own tests at the commits named in
// core/peer_sglang.h), then the contract around them.
#include "core/peer_sglang.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/fleet.h"
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

RouteRequest Text(std::string_view text) {
  RouteRequest r;
  r.text = text;
  return r;
}

uint32_t PickOk(const Policy& p, std::string_view text, const FleetSnapshot& f, Rng& rng) {
  auto d = p.Pick(Text(text), f, rng);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? d->instance : UINT32_MAX;
}

SglangCacheAwareOptions RustDefaults() {  // CacheAwareConfig::default, used by SGLang's tests
  SglangCacheAwareOptions o;
  o.cache_threshold = 0.5;
  o.balance_abs_threshold = 32;
  o.balance_rel_threshold = 1.1f;
  o.eviction_interval_requests = 0;
  o.max_tree_size = 10000;
  return o;
}

// Example 1 (test_cache_aware_with_imbalanced_load): 20 vs 0 in flight is imbalanced at abs 5 /
// rel 2, so every pick goes to the idle worker.
TEST(SglangCacheAwareTest, ImbalancedLoadPicksTheLeastLoaded) {
  SglangCacheAwareOptions o = RustDefaults();
  o.balance_abs_threshold = 5;
  o.balance_rel_threshold = 2.0f;
  SglangCacheAwarePolicy p(o, "sglang-cache-aware");
  auto f = Fleet({"w1", "w2"});
  f->state(0).in_flight = 20;
  Rng rng(1);
  for (int k = 0; k < 5; ++k) {
    auto d = p.Pick(Text("test"), *f, rng);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->instance, 1u);
    EXPECT_EQ(d->kind, DecisionKind::kOverflow);
  }
  // The text is still inserted for the chosen worker.
  EXPECT_EQ(p.TenantChars("", f->placement_seed(1)), 4u);
}

// Example 2 (test_cache_aware_with_balanced_load): a text's first pick (a miss, tie-broken
// deterministically) is where it and its prefixes go afterwards.
TEST(SglangCacheAwareTest, BalancedLoadFollowsTheCache) {
  SglangCacheAwarePolicy p(RustDefaults(), "sglang-cache-aware");
  auto f = Fleet({"w1", "w2"});
  Rng rng(1);
  const uint32_t x = PickOk(p, "hello world", *f, rng);
  ASSERT_LT(x, 2u);
  auto again = p.Pick(Text("hello world"), *f, rng);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->instance, x);
  EXPECT_EQ(again->kind, DecisionKind::kAffinity);
  EXPECT_EQ(PickOk(p, "hello", *f, rng), x);
  // The first pick does not depend on the Rng: a second policy makes the same one.
  SglangCacheAwarePolicy q(RustDefaults(), "sglang-cache-aware");
  Rng other(99);
  EXPECT_EQ(PickOk(q, "hello world", *f, other), x);
}

// Example 3 (test_get_used_size_per_tenant): sizes count characters of the nodes a tenant is on;
// a split leaves the earlier tenant's count alone; CJK characters count one each.
TEST(SglangRadixTreeTest, TenantSizesCountCharacters) {
  SglangRadixTree t;
  t.Insert("hello", 1, 1);
  t.Insert("world", 1, 2);
  EXPECT_EQ(t.TenantChars(1), 10u);
  t.Insert("hello", 2, 3);
  t.Insert("help", 2, 4);
  EXPECT_EQ(t.TenantChars(2), 6u);  // "hel" + "lo" + "p"
  EXPECT_EQ(t.TenantChars(1), 10u);
  t.Insert("你好", 3, 5);
  EXPECT_EQ(t.TenantChars(3), 2u);
}

// Example 4 (test_get_smallest_tenant): "empty" on an empty tree, then the fewest characters.
TEST(SglangRadixTreeTest, SmallestTenant) {
  SglangRadixTree t;
  EXPECT_FALSE(t.SmallestTenant().has_value());
  t.Insert("ap", 1, 1);
  t.Insert("icot", 1, 2);
  t.Insert("cat", 2, 3);
  EXPECT_EQ(t.SmallestTenant(), 2u);
  t.Insert("do", 3, 4);
  t.Insert("hi", 4, 5);
  const auto tie = t.SmallestTenant();
  ASSERT_TRUE(tie.has_value());
  EXPECT_TRUE(*tie == 3u || *tie == 4u);
  t.Insert("hello", 4, 6);
  EXPECT_EQ(t.SmallestTenant(), 3u);
}

// Example 5 (test_simple_eviction): over the limit, the oldest leaf of the tenant goes.
TEST(SglangRadixTreeTest, EvictionRemovesTheOldestLeafFirst) {
  SglangRadixTree t;
  t.Insert("hello", 1, 0);
  t.Insert("hello", 2, 0);
  t.Insert("world", 2, 10);
  EXPECT_EQ(t.EvictBySize(5), 1u);
  EXPECT_EQ(t.TenantChars(1), 5u);
  EXPECT_EQ(t.TenantChars(2), 5u);
  const auto m = t.PrefixMatch("world", 11);
  EXPECT_EQ(m.chars, 5u);
  EXPECT_EQ(m.tenant, 2u);
  const auto h = t.PrefixMatch("hello", 12);
  EXPECT_EQ(h.tenant, 1u);  // t2 is no longer on "hello"
}

// Example 6 (partial match, derived): a partly shared edge counts its shared characters.
TEST(SglangCacheAwareTest, PartialMatchAgainstTheThreshold) {
  SglangRadixTree t;
  t.Insert("hello world", 7, 1);
  const auto m = t.PrefixMatch("hello there", 2);
  EXPECT_EQ(m.chars, 6u);
  EXPECT_EQ(m.tenant, 7u);
  EXPECT_EQ(t.PrefixMatch("help me", 3).chars, 3u);

  auto f = Fleet({"w1", "w2"});
  for (double threshold : {0.5, 0.3}) {
    SglangCacheAwareOptions o = RustDefaults();
    o.cache_threshold = threshold;
    SglangCacheAwarePolicy p(o, "sglang-cache-aware");
    Rng rng(1);
    const uint32_t x = PickOk(p, "hello world", *f, rng);
    EXPECT_EQ(PickOk(p, "hello there", *f, rng), x) << threshold;  // 6/11 > both thresholds
    // 3/7 = 0.43: a miss at 0.5 (the smallest tree, the other worker), a hit at 0.3.
    EXPECT_EQ(PickOk(p, "help me", *f, rng), threshold == 0.5 ? 1 - x : x) << threshold;
  }
}

// Example 7 (test_prove_cache_aware_overload_flaw): under the balance thresholds a miss goes to
// the smallest tree however loaded it is (classic); PR #14650's rule takes the idle worker.
TEST(SglangCacheAwareTest, OverloadFlawAndTheMinLoadRule) {
  for (SglangMissRule rule : {SglangMissRule::kSmallestTree, SglangMissRule::kMinLoad}) {
    SglangCacheAwareOptions o = RustDefaults();
    o.balance_abs_threshold = 100;
    o.balance_rel_threshold = 10;
    o.miss = rule;
    SglangCacheAwarePolicy p(o, "sglang-cache-aware");
    auto f = Fleet({"a", "b"});
    Rng rng(1);
    const uint32_t idle = PickOk(p, std::string(1000, 'x'), *f, rng);
    f->state(idle).in_flight = 1;  // so that both rules send the next miss to the other worker
    const uint32_t overloaded = PickOk(p, "short", *f, rng);
    ASSERT_NE(idle, overloaded);
    f->state(idle).in_flight = 0;
    f->state(overloaded).in_flight = 50;
    const uint32_t got = PickOk(p, "a new unique prompt", *f, rng);
    EXPECT_EQ(got, rule == SglangMissRule::kSmallestTree ? overloaded : idle);
  }
}

// Unhealthy choices fall back to the first healthy worker; retries never get an excluded one.
TEST(SglangCacheAwareTest, FallsBackToTheFirstHealthyWorker) {
  SglangCacheAwarePolicy p(RustDefaults(), "sglang-cache-aware");
  auto f = Fleet({"w1", "w2", "w3"});
  Rng rng(1);
  const uint32_t x = PickOk(p, "a long shared document", *f, rng);
  f->state(x).available = false;
  auto d = p.Pick(Text("a long shared document"), *f, rng);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->instance, x == 0 ? 1u : 0u);
  EXPECT_EQ(d->kind, DecisionKind::kOverflow);
  f->state(x).available = true;
  const uint32_t tried[] = {x};
  RouteRequest retry = Text("a long shared document");
  retry.exclude = tried;
  d = p.Pick(retry, *f, rng);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->instance, x);
  const uint32_t all[] = {0, 1, 2};
  retry.exclude = all;
  EXPECT_FALSE(p.Pick(retry, *f, rng).ok());
}

// An instance that leaves the fleet leaves the tree; one that joins starts with size 0 and so is
// the smallest tree for the next miss.
TEST(SglangCacheAwareTest, FollowsFleetMembership) {
  SglangCacheAwarePolicy p(RustDefaults(), "sglang-cache-aware");
  auto f = Fleet({"w1", "w2"});
  Rng rng(1);
  PickOk(p, "first text", *f, rng);
  PickOk(p, "second, different", *f, rng);
  const uint64_t w1 = f->placement_seed(0);
  EXPECT_GT(p.TenantChars("", w1), 0u);
  auto next = FleetSnapshot::Create({InstanceSpec{"w2", "", 1, {}}, InstanceSpec{"w3", "", 1, {}}}, f.get());
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(PickOk(p, "zzz a third unrelated text", **next, rng), 1u);  // w3, empty
  EXPECT_EQ(p.TenantChars("", w1), 0u);
}

// Periodic eviction keeps every tenant at or under max_tree_size.
TEST(SglangCacheAwareTest, EvictionBoundsTreeSizes) {
  SglangCacheAwareOptions o = RustDefaults();
  o.eviction_interval_requests = 10;
  o.max_tree_size = 200;
  SglangCacheAwarePolicy p(o, "sglang-cache-aware");
  auto f = Fleet({"w1", "w2"});
  Rng rng(1);
  for (int k = 0; k < 99; ++k) PickOk(p, "text number " + std::to_string(k) + std::string(40, 'q'), *f, rng);
  PickOk(p, "the hundredth", *f, rng);  // pick 100: eviction runs first
  EXPECT_GT(p.evictions(), 0u);
  for (uint32_t i = 0; i < 2; ++i) EXPECT_LE(p.TenantChars("", f->placement_seed(i)), 200u + 13u);
}

// Invalid UTF-8 is replaced, never over-read; valid text is returned as is.
TEST(SglangRadixTreeTest, SanitisesInvalidUtf8) {
  std::string buffer;
  const std::string valid = "h\xC3\xA9llo \xE4\xBD\xA0";
  EXPECT_EQ(SanitiseUtf8(valid, &buffer).data(), valid.data());
  EXPECT_EQ(SanitiseUtf8("a\xC3", &buffer), "a\xEF\xBF\xBD");
  EXPECT_EQ(SanitiseUtf8("\xFF"
                         "b\xED\xA0\x80",
                         &buffer),
            "\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  // Characters sharing a lead byte are different children: no split inside a character.
  SglangRadixTree t;
  t.Insert("\xC3\xA9t\xC3\xA9", 1, 1);  // été
  t.Insert("\xC3\xA8re", 2, 2);         // ère
  EXPECT_EQ(t.TenantChars(1), 3u);
  EXPECT_EQ(t.TenantChars(2), 3u);
  EXPECT_EQ(t.PrefixMatch("\xC3\xA8r", 3).chars, 2u);
  EXPECT_EQ(t.PrefixMatch("\xC3\xA8r", 3).tenant, 2u);
}

// Removing a tenant strips it everywhere and frees the nodes nobody else holds.
TEST(SglangRadixTreeTest, RemoveTenant) {
  SglangRadixTree t;
  t.Insert("hello", 1, 1);
  t.Insert("help", 2, 2);
  const size_t before = t.node_count();
  t.RemoveTenant(2);
  EXPECT_FALSE(t.HasTenant(2));
  EXPECT_LT(t.node_count(), before);
  EXPECT_EQ(t.PrefixMatch("help", 3).tenant, 1u);
  EXPECT_EQ(t.PrefixMatch("help", 3).chars, 3u);
}

}  // namespace
}  // namespace prefix_router
