#include "core/policy_internal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/fleet.h"
#include "core/placement.h"
#include "core/rng.h"
#include "testing/test_lcg.h"

namespace prefix_router::policy_internal {
namespace {

// The share meter's documented behaviour, recomputed from scratch: counts kept by placement
// seed, the instance list compared in full at every call (what ShareMeter did before it kept the
// snapshot's generation), a newcomer starting at its fair share of the retained total.
class ReferenceMeter {
 public:
  void Count(const FleetSnapshot& f, uint32_t i) {
    Sync(f);
    unit_ *= std::exp(1 / (ShareMeter::kShareWindowPerInstance * f.size()));
    counts_[f.placement_seed(i)] += unit_;
    if (unit_ > 1e200) {
      for (auto& [seed, c] : counts_) c /= unit_;
      unit_ = 1;
    }
  }
  double Read(const FleetSnapshot& f, uint32_t i) {
    Sync(f);
    return counts_[f.placement_seed(i)] / unit_;
  }

 private:
  void Sync(const FleetSnapshot& f) {
    std::vector<uint64_t> seeds;
    for (uint32_t i = 0; i < f.size(); ++i) seeds.push_back(f.placement_seed(i));
    if (seeds == seeds_) return;
    double total = 0, weight = 0;
    std::map<uint64_t, double> next;
    for (uint32_t i = 0; i < f.size(); ++i) {
      auto it = counts_.find(seeds[i]);
      if (it == counts_.end()) continue;
      next[seeds[i]] = it->second;
      total += it->second;
      weight += f.spec(i).weight;
    }
    for (uint32_t i = 0; i < f.size(); ++i) {
      if (!next.contains(seeds[i])) next[seeds[i]] = weight > 0 ? total * f.spec(i).weight / weight : 0;
    }
    counts_ = std::move(next);
    seeds_ = std::move(seeds);
  }

  std::map<uint64_t, double> counts_;
  std::vector<uint64_t> seeds_;
  double unit_ = 1;
};

std::shared_ptr<const FleetSnapshot> Fleet(const std::vector<int>& ids, Rng& rng) {
  std::vector<InstanceSpec> specs;
  for (int id : ids) {
    InstanceSpec s;
    s.name = "instance-" + std::to_string(id);
    s.weight = 1 + static_cast<uint32_t>(rng.Uniform(4));
    specs.push_back(std::move(s));
  }
  return std::move(FleetSnapshot::Create(std::move(specs))).value();
}

// Candidates equals its plain definition (eligible, routable, not excluded unless kept; the
// in-flight sum clamped at 0 and the weight sum of those) whatever the fleet's shape: one dense
// array of live loads or several, equal weights or not, the default pool or a named one, some
// instances unavailable or drained, exclusions, negative counts.
TEST(CandidatesTest, AgreesWithThePlainDefinition) {
  Rng rng(11);
  for (int round = 0; round < 400; ++round) {
    const uint32_t n = 1 + static_cast<uint32_t>(rng.Uniform(40));
    const bool weighted = rng.Uniform(2) == 1;
    const uint32_t shape = rng.Uniform(3);  // 0: one snapshot, 1: grown from a smaller one, 2: shrunk
    const bool grown = shape == 1;
    std::vector<InstanceSpec> specs;
    for (uint32_t i = 0; i < n; ++i) {
      InstanceSpec s;
      s.name = "i" + std::to_string(i);
      s.weight = weighted ? 1 + static_cast<uint32_t>(rng.Uniform(3)) : 2;
      if (rng.Uniform(3) == 0) s.serves = {"m"};
      specs.push_back(std::move(s));
    }
    std::shared_ptr<const FleetSnapshot> f;
    if (grown) {  // the first half from one snapshot, the rest added by a second: two arrays
      std::vector<InstanceSpec> half(specs.begin(), specs.begin() + n / 2);
      auto first = std::move(FleetSnapshot::Create(std::move(half))).value();
      f = std::move(FleetSnapshot::Create(specs, first.get())).value();
    } else if (shape == 2) {  // two more instances first, then without them: the array's totals count them
      std::vector<InstanceSpec> more = specs;
      more.push_back(InstanceSpec{"extra-1"});
      more.push_back(InstanceSpec{"extra-2"});
      auto first = std::move(FleetSnapshot::Create(std::move(more))).value();
      first->state(n).in_flight.store(5);
      first->state(n + 1).available.store(false);
      f = std::move(FleetSnapshot::Create(specs, first.get())).value();
    } else {
      f = std::move(FleetSnapshot::Create(specs)).value();
    }
    EXPECT_EQ(f->dense_live() != nullptr, !grown || n / 2 == 0);
    EXPECT_EQ(f->dense_totals() != nullptr, shape == 0 || (grown && n / 2 == 0));
    for (uint32_t i = 0; i < n; ++i) {
      f->state(i).in_flight.store(static_cast<int32_t>(rng.Uniform(6)) - 1);
      if (rng.Uniform(5) == 0) f->state(i).available.store(false);
      if (rng.Uniform(7) == 0) f->state(i).drained.store(true);
    }
    std::vector<uint32_t> exclude;
    if (rng.Uniform(2) == 0) {
      for (int e = 0; e < 3; ++e) exclude.push_back(static_cast<uint32_t>(rng.Uniform(n)));
    }
    RouteRequest r;
    r.served_name = rng.Uniform(3) == 0 ? "m" : "";
    r.exclude = exclude;
    const bool keep_excluded = rng.Uniform(2) == 0;
    std::vector<uint32_t> want;
    CandidateTotals want_totals;
    for (uint32_t i : f->Eligible(r.served_name)) {
      if (!f->state(i).routable()) continue;
      if (!keep_excluded && std::find(exclude.begin(), exclude.end(), i) != exclude.end()) continue;
      want.push_back(i);
      want_totals.in_flight += std::max(0, f->state(i).in_flight.load());
      want_totals.weight += f->weight(i);
    }
    SCOPED_TRACE("round " + std::to_string(round));
    CandidateTotals totals;
    const std::span<const uint32_t> got = Candidates(r, *f, keep_excluded, &totals);
    EXPECT_EQ(std::vector<uint32_t>(got.begin(), got.end()), want);
    EXPECT_EQ(totals.in_flight, want_totals.in_flight);
    EXPECT_EQ(totals.weight, want_totals.weight);
    const std::span<const uint32_t> plain = Candidates(r, *f, keep_excluded);
    EXPECT_EQ(std::vector<uint32_t>(plain.begin(), plain.end()), want);
  }
}

// The meter recognises its snapshot by generation (O(1) per dispatch) and gives the counts of
// the full recomputation after random dispatch sequences with membership changes, including new
// snapshots of the same instances and snapshots allocated where a freed one lived.
TEST(ShareMeterTest, CountsEqualTheRecomputedOnesAcrossSnapshotChanges) {
  Rng rng(7);
  ShareMeter meter;
  ReferenceMeter reference;
  std::vector<int> ids = {0, 1, 2, 3, 4};
  int next_id = 5;
  auto fleet = Fleet(ids, rng);
  for (int step = 0; step < 20000; ++step) {
    const uint64_t what = rng.Uniform(1000);
    if (what < 3) {  // an instance joins
      ids.push_back(next_id++);
      fleet.reset();
      fleet = Fleet(ids, rng);
    } else if (what < 6 && ids.size() > 1) {  // one leaves
      ids.erase(ids.begin() + static_cast<ptrdiff_t>(rng.Uniform(static_cast<uint32_t>(ids.size()))));
      fleet.reset();
      fleet = Fleet(ids, rng);
    } else if (what < 8) {  // a new snapshot of the same instances
      fleet.reset();
      fleet = Fleet(ids, rng);
    }
    const auto i = static_cast<uint32_t>(rng.Uniform(fleet->size()));
    meter.Count(*fleet, i);
    reference.Count(*fleet, i);
    if (step % 97 == 0) {
      std::vector<uint32_t> all;
      for (uint32_t k = 0; k < fleet->size(); ++k) all.push_back(k);
      std::vector<double> out;
      double total = meter.Read(*fleet, all, out);
      double expected_total = 0;
      for (uint32_t k = 0; k < fleet->size(); ++k) {
        const double expected = reference.Read(*fleet, k);
        expected_total += expected;
        ASSERT_DOUBLE_EQ(out[k], expected) << "step " << step << " instance " << k;
      }
      ASSERT_DOUBLE_EQ(total, expected_total);
    }
  }
}

// Departures names an instance that left once, also when the new snapshot takes the freed
// snapshot's place in memory (it is told apart by its generation).
TEST(DeparturesTest, LeftInstanceIsReportedOnceAcrossSnapshots) {
  Rng rng(3);
  Departures departures;
  auto fleet = Fleet({0, 1, 2}, rng);
  for (uint32_t i = 0; i < 3; ++i) departures.Note(fleet->placement_seed(i));
  EXPECT_TRUE(departures.Left(*fleet).empty());
  const uint64_t leaving = fleet->placement_seed(2);
  fleet.reset();
  fleet = Fleet({0, 1}, rng);
  EXPECT_EQ(departures.Left(*fleet), std::vector<uint64_t>{leaving});
  EXPECT_TRUE(departures.Left(*fleet).empty());
}

// CandidatePosition finds a candidate by seed, and nothing for an instance that is not one.
// PrefillQueue::Read gives each candidate its queued tokens whether it looks the queued
// instances up in the candidates (few queued) or the candidates in the queue (many queued).
TEST(PrefillQueueTest, ReadAgreesWhicheverSideIsLookedUp) {
  std::vector<InstanceSpec> specs;
  for (uint32_t i = 0; i < 40; ++i) specs.push_back(InstanceSpec{"instance-" + std::to_string(i)});
  auto fleet = FleetSnapshot::Create(std::move(specs)).value();
  std::vector<uint32_t> c;
  for (uint32_t i = 0; i < 40; i += 2) c.push_back(i);  // even instances are candidates
  for (size_t k = 0; k < c.size(); ++k) EXPECT_EQ(CandidatePosition(*fleet, c, fleet->placement_seed(c[k])), k);
  EXPECT_FALSE(CandidatePosition(*fleet, c, fleet->placement_seed(3)).has_value());
  EXPECT_FALSE(CandidatePosition(*fleet, c, 12345).has_value());
  PrefillQueue queue;
  auto read = [&] {
    auto span = queue.Read(*fleet, c);
    return std::vector<double>(span.begin(), span.end());
  };
  EXPECT_TRUE(read().empty());  // nothing queued: zeros for every candidate
  queue.Add(1, fleet->placement_seed(4), 100);
  queue.Add(2, fleet->placement_seed(5), 50);  // not a candidate
  std::vector<double> expected(c.size(), 0);
  expected[2] = 100;
  EXPECT_EQ(read(), expected);  // 2 queued < 20 candidates
  uint64_t id = 10;
  for (uint32_t i = 0; i < 40; ++i) queue.Add(id++, fleet->placement_seed(i), i + 1);
  for (size_t k = 0; k < c.size(); ++k) expected[k] = c[k] + 1 + (c[k] == 4 ? 100 : 0);
  EXPECT_EQ(read(), expected);  // 40 queued > 20 candidates
  queue.Release(1);
  expected[2] -= 100;
  EXPECT_EQ(read(), expected);
}

// PickByCost as documented, written plainly (one pass keeping every candidate's rank, then the
// rendezvous tie-break): the specialised passes must pick the same instance with the same kind.
Decision ReferencePickByCost(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> c,
                             std::span<const uint64_t> cached, uint64_t prompt_tokens, int32_t threshold,
                             double load_weight, std::span<const uint8_t> over_share, std::span<const double> queued) {
  std::vector<bool> below(c.size());
  std::vector<double> cost(c.size());
  uint64_t longest = 0;
  for (size_t k = 0; k < c.size(); ++k) {
    const InstanceState& st = f.state(c[k]);
    const int32_t in_flight = st.in_flight.load();
    below[k] = in_flight < threshold && (over_share.empty() || over_share[k] == 0);
    const double uncached = prompt_tokens > cached[k] ? static_cast<double>(prompt_tokens - cached[k]) : 0;
    const double load = static_cast<double>(std::max(0, in_flight) + std::max<int64_t>(0, st.outstanding_tokens.load()));
    const double q = queued.empty() ? 0 : queued[k];
    const double w = f.weight(c[k]);
    cost[k] = uncached + q / w + load_weight * load / w;
    longest = std::max(longest, cached[k]);
  }
  size_t best = 0;
  for (size_t k = 1; k < c.size(); ++k) {
    if (below[k] != below[best]) {
      if (below[k]) best = k;
      continue;
    }
    if (cost[k] < cost[best]) {
      best = k;
    } else if (cost[k] == cost[best] &&
               PreferenceScore(r.key.placement_hash(), f, c[k]) > PreferenceScore(r.key.placement_hash(), f, c[best])) {
      best = k;
    }
  }
  const DecisionKind kind = !below[best]              ? DecisionKind::kSaturated
                            : longest == 0            ? DecisionKind::kLeastOutstanding
                            : cached[best] == longest ? DecisionKind::kAffinity
                                                      : DecisionKind::kOverflow;
  Decision d{c[best], kind, 0};
  d.uncached_tokens = prompt_tokens > cached[best] ? prompt_tokens - cached[best] : 0;
  return d;
}

// Random fleets (uniform and mixed weights), loads with many ties, holders, share flags and
// queued tokens present or not: every specialisation of PickByCost's passes agrees with the
// plain reference, and CachedTokens hands each decision zeros wherever it set nothing.
TEST(PickByCostTest, AgreesWithThePlainReferenceInEveryCase) {
  testing::TestLcg rng(20261204);
  size_t ties = 0, saturated = 0;
  for (int step = 0; step < 400; ++step) {
    const uint32_t n = 1 + static_cast<uint32_t>(rng(step % 10 == 0 ? 300 : 12));
    const bool uniform = rng(2) == 0;
    std::vector<InstanceSpec> specs;
    for (uint32_t i = 0; i < n; ++i) {
      specs.push_back(InstanceSpec{"i" + std::to_string(i), "", uniform ? (step % 3 == 0 ? 2u : 1u) : 1 + static_cast<uint32_t>(rng(3))});
    }
    auto fleet = FleetSnapshot::Create(std::move(specs)).value();
    std::vector<uint32_t> c;
    for (uint32_t i = 0; i < n; ++i) {  // every instance in a quarter of the steps (the dense fleet's pass)
      if (n == 1 || step % 4 == 0 || rng(5) != 0) c.push_back(i);
    }
    if (c.empty()) c.push_back(0);
    for (uint32_t i = 0; i < n; ++i) {
      fleet->state(i).in_flight.store(static_cast<int32_t>(rng(4)));
      fleet->state(i).outstanding_tokens.store(rng(3) == 0 ? static_cast<int64_t>(rng(3)) * 100 : 0);
    }
    const uint64_t prompt = 1000;
    CachedTokens cached(c.size());
    for (size_t k = 0; k < c.size(); ++k) {
      ASSERT_EQ(cached.view()[k], 0u) << "step " << step << ": a previous decision's tokens were left";
      if (rng(4) == 0) cached[k] = 100 * rng(12);  // some above the prompt
    }
    std::vector<uint8_t> over;
    if (rng(2) == 0) {
      for (size_t k = 0; k < c.size(); ++k) over.push_back(rng(4) == 0);
    }
    std::vector<double> queued;
    if (rng(2) == 0) {
      for (size_t k = 0; k < c.size(); ++k) queued.push_back(rng(3) == 0 ? 50.0 * static_cast<double>(rng(3)) : 0);
    }
    RouteRequest r;
    r.key.low = rng(1u << 30) * 7919;
    const int32_t threshold = 1 + static_cast<int32_t>(rng(4));
    const Decision want = ReferencePickByCost(r, *fleet, c, cached.view(), prompt, threshold, 1.0, over, queued);
    const Decision got = PickByCost(r, *fleet, c, cached.view(), prompt, threshold, 1.0, over, queued);
    ASSERT_EQ(got.instance, want.instance) << "step " << step;
    ASSERT_EQ(got.kind, want.kind) << "step " << step;
    ASSERT_EQ(got.uncached_tokens, want.uncached_tokens) << "step " << step;
    ties += want.kind == DecisionKind::kLeastOutstanding;
    saturated += want.kind == DecisionKind::kSaturated;
  }
  EXPECT_GT(ties, 10u);  // the cases reached the tie-break and the saturated rank
  EXPECT_GT(saturated, 10u);
}

TEST(CachedTokensTest, PositionsSetAreZeroAgainForTheNextDecision) {
  {
    CachedTokens cached(5);
    cached[1] = 7;
    cached[3] = std::max<uint64_t>(cached[3], 9);
    EXPECT_EQ(std::vector<uint64_t>(cached.view().begin(), cached.view().end()), (std::vector<uint64_t>{0, 7, 0, 9, 0}));
  }
  {
    CachedTokens cached(8);  // larger: the new positions are zeros too
    EXPECT_EQ(std::vector<uint64_t>(cached.view().begin(), cached.view().end()), std::vector<uint64_t>(8, 0));
    cached[7] = 1;
  }
  CachedTokens cached(2);
  EXPECT_EQ(cached.view().size(), 2u);
  EXPECT_EQ(cached.view()[0] + cached.view()[1], 0u);
}

}  // namespace
}  // namespace prefix_router::policy_internal
