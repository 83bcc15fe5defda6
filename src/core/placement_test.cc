#include "core/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/fleet.h"
#include "core/prefix_key.h"

namespace prefix_router {
namespace {

constexpr uint32_t kKeys = 100000;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The i-th of kKeys distinct synthetic keys.
PrefixKey KeyAt(uint64_t i) { return PrefixKey{SplitMix64(i), SplitMix64(i + 1000000000)}; }

std::string InstanceName(int i) { return "instance-" + std::to_string(i); }

// A fleet of the named instances, weights in the same order (all 1 when `weights` is empty).
std::shared_ptr<const FleetSnapshot> MakeFleet(const std::vector<std::string>& names,
                                               const std::vector<uint32_t>& weights = {}) {
  std::vector<InstanceSpec> specs;
  for (size_t i = 0; i < names.size(); ++i) {
    InstanceSpec s;
    s.name = names[i];
    s.weight = weights.empty() ? 1 : weights[i];
    specs.push_back(std::move(s));
  }
  auto r = FleetSnapshot::Create(std::move(specs));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

// "instance-0" .. "instance-<n-1>".
std::vector<std::string> Names(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(InstanceName(i));
  return out;
}

std::vector<uint32_t> AllIndices(const FleetSnapshot& f) {
  std::vector<uint32_t> out(f.size());
  std::iota(out.begin(), out.end(), 0u);
  return out;
}

// Name of the instance `key` most prefers among all of `f`.
const std::string& Owner(const FleetSnapshot& f, const PrefixKey& key) {
  const std::vector<uint32_t> all = AllIndices(f);
  return f.spec(MostPreferred(key.placement_hash(), f, all)).name;
}

// Full preference order of `key` over `f`, as instance names.
std::vector<std::string> PreferenceNames(const FleetSnapshot& f, const PrefixKey& key) {
  std::vector<uint32_t> order = AllIndices(f);
  SortByPreference(key.placement_hash(), f, order);
  std::vector<std::string> out;
  for (uint32_t i : order) out.push_back(f.spec(i).name);
  return out;
}

// Share of kKeys keys each instance owns, by index.
std::vector<double> Shares(const FleetSnapshot& f) {
  std::vector<uint32_t> counts(f.size(), 0);
  const std::vector<uint32_t> all = AllIndices(f);
  for (uint32_t k = 0; k < kKeys; ++k) ++counts[MostPreferred(KeyAt(k).placement_hash(), f, all)];
  std::vector<double> shares;
  for (uint32_t c : counts) shares.push_back(static_cast<double>(c) / kKeys);
  return shares;
}

// Owner names of every key.
std::vector<std::string> Owners(const FleetSnapshot& f) {
  std::vector<std::string> out;
  out.reserve(kKeys);
  for (uint32_t k = 0; k < kKeys; ++k) out.push_back(Owner(f, KeyAt(k)));
  return out;
}

// Inverse of RendezvousHash's final mixing (xorshifts and odd multiplies are bijections), to
// build a key whose score for a given instance is exactly a chosen value.
uint64_t UndoXorShift(uint64_t y, int shift) {
  uint64_t x = y;
  for (int k = 0; k < 64 / shift + 1; ++k) x = y ^ (x >> shift);
  return x;
}
uint64_t InverseOdd(uint64_t c) {
  uint64_t v = c;
  for (int k = 0; k < 6; ++k) v *= 2 - c * v;  // Newton: doubles the correct bits each step
  return v;
}
uint64_t KeyWithRendezvousHash(uint64_t target, uint64_t instance_seed) {
  uint64_t x = UndoXorShift(target, 27);
  x *= InverseOdd(0x1C69B3F74AC4AE35ULL);
  x = UndoXorShift(x, 33);
  x *= InverseOdd(0x3C79AC492BA7B653ULL);
  x = UndoXorShift(x, 27);
  return x ^ instance_seed;
}

// ---------------------------------------------------------------------------------------------
// Quality on 100,000 keys.

// Equal weights: each of 7 instances owns 1/7 of the keys, within half a percentage point.
TEST(PlacementTest, EqualWeightsBalanceWithinHalfPoint) {
  auto f = MakeFleet(Names(7));
  const std::vector<double> shares = Shares(*f);
  for (uint32_t i = 0; i < 7; ++i) {
    EXPECT_GE(shares[i], 1.0 / 7 - 0.005) << f->spec(i).name;
    EXPECT_LE(shares[i], 1.0 / 7 + 0.005) << f->spec(i).name;
  }
}

// Weights 1,2,3,4: each instance owns w/10 of the keys, within one percentage point.
TEST(PlacementTest, SharesFollowWeights) {
  auto f = MakeFleet(Names(4), {1, 2, 3, 4});
  const std::vector<double> shares = Shares(*f);
  for (uint32_t i = 0; i < 4; ++i) {
    const double expected = (i + 1) / 10.0;
    EXPECT_NEAR(shares[i], expected, 0.01) << f->spec(i).name;
  }
}

// Adding an 8th instance moves only keys it now wins, about 1/8 of them.
TEST(PlacementTest, AddingInstanceMovesOnlyKeysToIt) {
  auto seven = MakeFleet(Names(7));
  auto eight = MakeFleet(Names(8));
  const std::vector<std::string> before = Owners(*seven);
  const std::vector<std::string> after = Owners(*eight);
  uint32_t moved = 0;
  for (uint32_t k = 0; k < kKeys; ++k) {
    if (before[k] == after[k]) continue;
    ++moved;
    ASSERT_EQ(after[k], "instance-7") << "key " << k << " moved from " << before[k];
  }
  const double fraction = static_cast<double>(moved) / kKeys;
  EXPECT_NEAR(fraction, 1.0 / 8, 0.1 / 8);
}

// Removing one of 8 instances moves only its keys; when it returns, they all come back.
TEST(PlacementTest, RemovingInstanceMovesOnlyItsKeysAndReturnRestoresThem) {
  std::vector<std::string> names = Names(8);
  auto eight = MakeFleet(names);
  names.erase(names.begin() + 3);  // drop instance-3
  auto seven = MakeFleet(names);
  const std::vector<std::string> before = Owners(*eight);
  const std::vector<std::string> during = Owners(*seven);
  uint32_t moved = 0;
  for (uint32_t k = 0; k < kKeys; ++k) {
    if (before[k] == "instance-3") {
      ++moved;
      ASSERT_NE(during[k], "instance-3");
    } else {
      ASSERT_EQ(during[k], before[k]) << "key " << k << " did not belong to the removed instance";
    }
  }
  EXPECT_GT(moved, 0u);
  // The instance comes back (at the end of the list this time).
  names.push_back("instance-3");
  auto back = MakeFleet(names);
  EXPECT_EQ(Owners(*back), before);
}

// Weighted fleets keep the same stability: removing an instance moves only its keys.
TEST(PlacementTest, WeightedRemovalMovesOnlyItsKeys) {
  auto full = MakeFleet(Names(4), {1, 2, 3, 4});
  auto reduced = MakeFleet({"instance-0", "instance-1", "instance-3"}, {1, 2, 4});
  for (uint32_t k = 0; k < kKeys; ++k) {
    const PrefixKey key = KeyAt(k);
    const std::string& before = Owner(*full, key);
    if (before == "instance-2") continue;
    ASSERT_EQ(Owner(*reduced, key), before) << "key " << k;
  }
}

// Placement is keyed on names: the order of the specs changes no key's choice or preference
// order, weighted or not.
TEST(PlacementTest, SpecOrderDoesNotChangePlacement) {
  const std::vector<std::string> names = Names(7);
  const std::vector<std::string> shuffled = {"instance-4", "instance-0", "instance-6", "instance-2",
                                             "instance-5", "instance-1", "instance-3"};
  auto a = MakeFleet(names);
  auto b = MakeFleet(shuffled);
  EXPECT_EQ(Owners(*a), Owners(*b));
  for (uint32_t k = 0; k < 1000; ++k) {
    ASSERT_EQ(PreferenceNames(*a, KeyAt(k)), PreferenceNames(*b, KeyAt(k))) << "key " << k;
  }
  // Weighted: instance-i has weight i+1 in both fleets.
  std::vector<uint32_t> weights_b;
  for (const auto& n : shuffled) weights_b.push_back(std::stoi(n.substr(9)) + 1);
  auto wa = MakeFleet(names, {1, 2, 3, 4, 5, 6, 7});
  auto wb = MakeFleet(shuffled, weights_b);
  EXPECT_EQ(Owners(*wa), Owners(*wb));
}

// ---------------------------------------------------------------------------------------------
// Preference order.

// SortByPreference puts MostPreferred first, for unweighted and weighted fleets and for any
// candidate subset, and returns a permutation of the candidates.
TEST(PlacementTest, SortByPreferenceStartsWithMostPreferred) {
  auto unweighted = MakeFleet(Names(7));
  auto weighted = MakeFleet(Names(7), {1, 10, 3, 7, 2, 5, 4});
  for (const auto* f : {unweighted.get(), weighted.get()}) {
    for (const std::vector<uint32_t>& subset :
         {AllIndices(*f), std::vector<uint32_t>{5, 1, 3}, std::vector<uint32_t>{6}}) {
      for (uint32_t k = 0; k < 10000; ++k) {
        const uint64_t h = KeyAt(k).placement_hash();
        std::vector<uint32_t> sorted = subset;
        SortByPreference(h, *f, sorted);
        ASSERT_EQ(sorted[0], MostPreferred(h, *f, subset)) << "key " << k;
        std::vector<uint32_t> a = sorted, b = subset;
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        ASSERT_EQ(a, b);
      }
    }
  }
}

// A key has one preference order: sorting a subset of candidates gives the full order
// restricted to that subset (so retries and spills agree with the first choice).
TEST(PlacementTest, SubsetOrderIsFullOrderRestricted) {
  auto f = MakeFleet(Names(7), {3, 1, 4, 1, 5, 9, 2});
  const std::vector<uint32_t> subset = {0, 2, 3, 6};
  for (uint32_t k = 0; k < 10000; ++k) {
    const uint64_t h = KeyAt(k).placement_hash();
    std::vector<uint32_t> full = AllIndices(*f);
    SortByPreference(h, *f, full);
    std::vector<uint32_t> restricted;
    for (uint32_t i : full) {
      if (std::find(subset.begin(), subset.end(), i) != subset.end()) restricted.push_back(i);
    }
    std::vector<uint32_t> sorted = subset;
    SortByPreference(h, *f, sorted);
    ASSERT_EQ(sorted, restricted) << "key " << k;
  }
}

// The lazily extended order is the full sort's: whatever ranks a caller reads, in whatever
// sequence, rank r holds the full sort's r-th candidate, and RankOf gives each candidate's rank
// (and TwoMostPreferred its first two),
// on random fleets (weighted or not, subsets in random order) and for random keys.
TEST(PlacementTest, PreferenceOrderReadsAsTheFullSort) {
  uint64_t state = 12;
  auto next = [&] { return state = SplitMix64(state); };
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(next() % 300);
    std::vector<uint32_t> weights;
    if (trial % 2 == 1) {
      for (int i = 0; i < n; ++i) weights.push_back(1 + static_cast<uint32_t>(next() % 10));
    }
    auto f = MakeFleet(Names(n), weights);
    std::vector<uint32_t> subset;
    for (uint32_t i = 0; i < f->size(); ++i) {
      if (next() % 4 != 0) subset.push_back(i);
    }
    if (subset.empty()) subset.push_back(0);
    for (size_t k = subset.size(); k > 1; --k) std::swap(subset[k - 1], subset[next() % k]);
    const uint64_t h = KeyAt(next() % kKeys).placement_hash();
    std::vector<uint32_t> sorted = subset;
    SortByPreference(h, *f, sorted);
    const TopTwo top = TwoMostPreferred(h, *f, subset);
    ASSERT_EQ(top.first, sorted[0]) << "trial " << trial;
    ASSERT_EQ(top.second, sorted.size() > 1 ? sorted[1] : UINT32_MAX) << "trial " << trial;
    PreferenceOrder order;
    order.Reset(h, *f, subset);
    ASSERT_EQ(order.size(), sorted.size());
    // Read a few first ranks one by one (as a spill does), then jumps, then everything.
    const size_t first = std::min<size_t>(sorted.size(), next() % 5);
    for (size_t r = 0; r < first; ++r) ASSERT_EQ(order[r], sorted[r]) << "trial " << trial << " rank " << r;
    for (int j = 0; j < 3; ++j) {
      const size_t r = next() % sorted.size();
      ASSERT_EQ(order[r], sorted[r]) << "trial " << trial << " rank " << r;
    }
    for (size_t r = 0; r < sorted.size(); ++r) {
      ASSERT_EQ(order[r], sorted[r]) << "trial " << trial << " rank " << r;
      ASSERT_EQ(order.RankOf(sorted[r], PreferenceScore(h, *f, sorted[r])), r);
    }
  }
}

// The unordered visit sees every candidate once with its score, and Before is the order's.
TEST(PlacementTest, PreferenceOrderVisitsEveryCandidateWithItsScore) {
  auto f = MakeFleet(Names(50), std::vector<uint32_t>(50, 3));
  const std::vector<uint32_t> subset = {4, 9, 1, 30, 22, 17};
  const uint64_t h = KeyAt(5).placement_hash();
  PreferenceOrder order;
  order.Reset(h, *f, subset);
  std::vector<uint32_t> seen;
  order.ForEachUnordered([&](uint32_t i, uint64_t score) {
    EXPECT_EQ(score, PreferenceScore(h, *f, i));
    seen.push_back(i);
  });
  std::vector<uint32_t> expected = subset;
  std::sort(seen.begin(), seen.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);
  EXPECT_TRUE(PreferenceOrder::Before(order[0], PreferenceScore(h, *f, order[0]), order[1],
                                      PreferenceScore(h, *f, order[1])));
  EXPECT_FALSE(PreferenceOrder::Before(order[1], PreferenceScore(h, *f, order[1]), order[0],
                                       PreferenceScore(h, *f, order[0])));
}

// With weights, an instance whose draw is the best possible (u = 1, score -ln(1)/w = 0) is
// the key's first choice; the zero score must not rank last because of its sign.
TEST(PlacementTest, WeightedBestPossibleDrawWins) {
  auto f = MakeFleet(Names(4), {1, 2, 3, 4});
  const std::vector<uint32_t> all = AllIndices(*f);
  for (uint32_t i = 0; i < f->size(); ++i) {
    const uint64_t key = KeyWithRendezvousHash(~uint64_t{0}, f->placement_seed(i));
    ASSERT_EQ(RendezvousHash(key, f->placement_seed(i)), ~uint64_t{0});
    EXPECT_EQ(MostPreferred(key, *f, all), i);
    std::vector<uint32_t> order = all;
    SortByPreference(key, *f, order);
    EXPECT_EQ(order[0], i);
  }
}

// Golden placements. These pin the hash and placement functions (key hashing, name seeds,
// the rendezvous mix and the weighted score) so that router replicas, the simulator and
// different builds send the same prefix to the same instance. Changing any of them is a
// breaking change: a rolling upgrade would split every prefix's cache across two instances.
TEST(PlacementTest, GoldenPlacementsAreStableAcrossProcessesAndBuilds) {
  struct Golden {
    const char* body;
    const char* group;
    const char* most_preferred;
    std::vector<int> order;  // instance-<n>, most preferred first
  };
  const std::vector<Golden> goldens = {
      {"hello world", "", "instance-6", {6, 0, 2, 3, 4, 1, 5}},
      {"hello world", "tenant-a", "instance-6", {6, 0, 4, 5, 2, 1, 3}},
      {"The quick brown fox jumps over the lazy dog", "", "instance-2", {2, 4, 1, 6, 5, 3, 0}},
      {"", "", "instance-4", {4, 3, 0, 1, 6, 5, 2}},
      {"{\"inputs\":\"What is the capital of France?\"}", "", "instance-1", {1, 4, 5, 2, 6, 0, 3}},
  };
  auto f = MakeFleet(Names(7));
  for (const Golden& g : goldens) {
    const PrefixKey key = NativePrefixKey(g.body, 2048, g.group);
    EXPECT_EQ(Owner(*f, key), g.most_preferred) << g.body << " / " << g.group;
    std::vector<std::string> expected;
    for (int n : g.order) expected.push_back(InstanceName(n));
    EXPECT_EQ(PreferenceNames(*f, key), expected) << g.body << " / " << g.group;
  }

  // Weighted: instance-<i> has weight i+1.
  const std::vector<std::pair<const char*, std::vector<int>>> weighted = {
      {"hello world", {2, 3, 0, 1}},
      {"The quick brown fox jumps over the lazy dog", {2, 3, 1, 0}},
      {"", {3, 0, 1, 2}},
      {"{\"inputs\":\"What is the capital of France?\"}", {1, 2, 3, 0}},
  };
  auto wf = MakeFleet(Names(4), {1, 2, 3, 4});
  for (const auto& [body, order] : weighted) {
    std::vector<std::string> expected;
    for (int n : order) expected.push_back(InstanceName(n));
    EXPECT_EQ(PreferenceNames(*wf, NativePrefixKey(body, 2048, "")), expected) << body;
  }
}

}  // namespace
}  // namespace prefix_router
