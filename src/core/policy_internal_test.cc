#include "core/policy_internal.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/fleet.h"
#include "core/rng.h"

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

}  // namespace
}  // namespace prefix_router::policy_internal
