// Tests of our re-implementation of HAProxy's consistent hashing with bounded loads: the three
// worked examples of docs/research/peers.md section 4 (derived from lb_chash.c's formula), then
// the ring and the policy's contract.
#include "core/peer_haproxy.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/fleet.h"
#include "core/peer_policies.h"
#include "core/rng.h"

namespace prefix_router {
namespace {

std::shared_ptr<const FleetSnapshot> Fleet(uint32_t n) {
  std::vector<InstanceSpec> specs;
  for (uint32_t i = 0; i < n; ++i) specs.push_back(InstanceSpec{"s" + std::to_string(i), "", 1, {}});
  auto r = FleetSnapshot::Create(std::move(specs));
  EXPECT_TRUE(r.ok());
  return std::move(r).value();
}

// Keys spread over the ring (the low 32 bits of the prefix key are the request's hash).
RouteRequest Key(uint64_t k) {
  RouteRequest r;
  const uint64_t h = (k + 1) * 0x9E3779B97F4A7C15ULL;
  r.key = PrefixKey{h ^ (h >> 29), ~h};
  return r;
}

std::vector<uint64_t> Slots(uint64_t served, uint32_t factor) {
  const uint64_t tot = HaproxyTotalSlots(served, factor);
  std::vector<uint64_t> out;
  for (uint64_t c : {0, 16, 32}) out.push_back(HaproxyServerSlots(tot, 48, c, 16));
  return out;
}

// Example 1: 3 servers of weight 1 (16 each), F 150, 5 served: 9 slots, 3 each.
TEST(HaproxyChashTest, ExactShares) {
  EXPECT_EQ(HaproxyTotalSlots(5, 150), 9u);
  EXPECT_EQ(Slots(5, 150), (std::vector<uint64_t>{3, 3, 3}));
}

// Example 2: 4 served: 8 slots split (2, 3, 3) by cumulative weight.
TEST(HaproxyChashTest, UnevenSplit) {
  EXPECT_EQ(HaproxyTotalSlots(4, 150), 8u);
  EXPECT_EQ(Slots(4, 150), (std::vector<uint64_t>{2, 3, 3}));
}

// Example 3: an idle backend at F 125 has 2 slots, (0, 1, 1), and the zero becomes one.
TEST(HaproxyChashTest, IdleBackend) {
  EXPECT_EQ(HaproxyTotalSlots(0, 125), 2u);
  EXPECT_EQ(Slots(0, 125), (std::vector<uint64_t>{1, 1, 1}));
}

// A key whose owner (F off) is instance `owner` on Fleet(3).
uint64_t KeyOwnedBy(const Policy& plain, const FleetSnapshot& f, uint32_t owner) {
  Rng rng(1);
  for (uint64_t k = 1; k < 100000; ++k) {
    auto d = plain.Pick(Key(k), f, rng);
    if (d.ok() && d->instance == owner) return k;
  }
  ADD_FAILURE() << "no key owned by " << owner;
  return 0;
}

// The examples through the policy: the owner serving 3 of 5 is skipped, serving 2 it keeps the
// key, and an idle backend leaves every key with its owner.
TEST(HaproxyChashTest, PolicyAppliesTheCap) {
  auto f = Fleet(3);
  HaproxyChashPolicy plain(0, "haproxy-chash-bl-f0");
  HaproxyChashPolicy bounded(150, "haproxy-chash-bl");
  const uint64_t k = KeyOwnedBy(plain, *f, 0);
  Rng rng(1);
  auto d = bounded.Pick(Key(k), *f, rng);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->instance, 0u);
  EXPECT_EQ(d->kind, DecisionKind::kAffinity);
  f->state(0).in_flight = 3;
  f->state(1).in_flight = 1;
  f->state(2).in_flight = 1;
  d = bounded.Pick(Key(k), *f, rng);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->instance, 0u);
  EXPECT_EQ(d->kind, DecisionKind::kOverflow);
  EXPECT_EQ(plain.Pick(Key(k), *f, rng)->instance, 0u);  // no factor, no cap
  f->state(0).in_flight = 2;
  f->state(1).in_flight = 2;
  d = bounded.Pick(Key(k), *f, rng);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->instance, 0u);
}

// Factor 0, HAProxy's default, is plain consistent hashing: every key stays with its ring owner
// however loaded that owner is (no bounded-load walk), while factor 150 moves keys off it.
TEST(HaproxyChashTest, FactorZeroIsPlainConsistentHashing) {
  auto f = Fleet(4);
  auto plain = MakePeerPolicy("haproxy-chash-bl-f0", RoutingOptions{});
  auto bounded = MakePeerPolicy("haproxy-chash-bl-f150", RoutingOptions{});
  ASSERT_TRUE(plain.ok() && bounded.ok());
  Rng rng(1);
  std::vector<uint32_t> owner;
  for (uint64_t k = 0; k < 2000; ++k) owner.push_back((*plain)->Pick(Key(k), *f, rng)->instance);
  f->state(0).in_flight = 1000;  // one server far above the average
  int moved_plain = 0, moved_bounded = 0, owned_by_0 = 0;
  for (uint64_t k = 0; k < 2000; ++k) {
    const Decision d = *(*plain)->Pick(Key(k), *f, rng);
    moved_plain += d.instance != owner[k];
    EXPECT_EQ(d.kind, DecisionKind::kAffinity);
    owned_by_0 += owner[k] == 0;
    moved_bounded += (*bounded)->Pick(Key(k), *f, rng)->instance != owner[k];
  }
  EXPECT_EQ(moved_plain, 0);
  EXPECT_GT(owned_by_0, 200);
  EXPECT_EQ(moved_bounded, owned_by_0);  // with the cap, every key of the loaded server moves
}

// The nearer neighbour wins, the previous point on a tie, distances wrapping around the ring.
TEST(HaproxyChashTest, RingTakesTheNearerPoint) {
  const uint64_t seeds[] = {11, 22, 33};
  const uint32_t weights[] = {1, 1, 1};
  HaproxyRing ring(seeds, weights);
  const auto& p = ring.points();
  ASSERT_EQ(p.size(), 48u);
  size_t k = 0;
  while (k + 1 < p.size() && (p[k + 1].key - p[k].key) % 2 != 0) ++k;
  ASSERT_LT(k + 1, p.size());
  const uint32_t mid = p[k].key + (p[k + 1].key - p[k].key) / 2;
  EXPECT_EQ(ring.Start(mid), k);
  EXPECT_EQ(ring.Start(mid + 1), k + 1);
  EXPECT_EQ(ring.Start(p[k].key), k);
  // Before the first point: the last point is 'previous', across zero.
  if (p.front().key > 0) {
    const uint32_t gap = p.front().key + (UINT32_MAX - p.back().key) + 1;  // first - last, mod 2^32
    EXPECT_EQ(ring.Start(p.front().key - 1), 0u);
    if (gap > 2) {
      EXPECT_EQ(ring.Start(p.back().key + 1), p.size() - 1);
    }
  }
}

// Below 100 nobody may be eligible: after wrapping twice the walk keeps the last point's server.
TEST(HaproxyChashTest, GivesUpAfterWrappingTwice) {
  auto f = Fleet(3);
  for (uint32_t i = 0; i < 3; ++i) f->state(i).in_flight = 10;
  HaproxyChashPolicy p(50, "haproxy-chash-bl-f50");
  const uint64_t seeds[] = {f->placement_seed(0), f->placement_seed(1), f->placement_seed(2)};
  const uint32_t weights[] = {1, 1, 1};
  HaproxyRing ring(seeds, weights);
  Rng rng(1);
  for (uint64_t k = 1; k < 20; ++k) {
    auto d = p.Pick(Key(k), *f, rng);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->kind, DecisionKind::kSaturated);
    EXPECT_EQ(d->instance, ring.points().back().server);
  }
}

// A retry walks past the instances it already tried; with all tried there is none.
TEST(HaproxyChashTest, RetriesAvoidTriedInstances) {
  auto f = Fleet(3);
  HaproxyChashPolicy p(150, "haproxy-chash-bl");
  Rng rng(1);
  for (uint64_t k = 1; k < 200; ++k) {
    RouteRequest r = Key(k);
    const uint32_t first = p.Pick(r, *f, rng)->instance;
    const uint32_t tried[] = {first};
    r.exclude = tried;
    auto d = p.Pick(r, *f, rng);
    ASSERT_TRUE(d.ok());
    EXPECT_NE(d->instance, first);
  }
  const uint32_t all[] = {0, 1, 2};
  RouteRequest r = Key(5);
  r.exclude = all;
  EXPECT_FALSE(p.Pick(r, *f, rng).ok());
}

// Consistent hashing: removing an instance moves only the keys it owned.
TEST(HaproxyChashTest, RemovalMovesOnlyTheRemovedInstancesKeys) {
  auto f = Fleet(4);
  HaproxyChashPolicy p(0, "haproxy-chash-bl-f0");
  Rng rng(1);
  std::vector<uint32_t> before;
  for (uint64_t k = 0; k < 5000; ++k) before.push_back(p.Pick(Key(k), *f, rng)->instance);
  f->state(3).available = false;
  uint32_t moved = 0;
  for (uint64_t k = 0; k < 5000; ++k) {
    const uint32_t now = p.Pick(Key(k), *f, rng)->instance;
    EXPECT_NE(now, 3u);
    if (before[k] != 3) {
      EXPECT_EQ(now, before[k]);
    }
    moved += now != before[k];
  }
  EXPECT_GT(moved, 0u);
}

}  // namespace
}  // namespace prefix_router
