#include "core/flow_queue.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "testing/test_lcg.h"

namespace prefix_router {
namespace {

FlowItem Item(uint64_t id, int32_t band, std::string tenant, uint64_t tokens = 100, uint64_t bytes = 10,
              double arrival = 0) {
  return FlowItem{id, band, std::move(tenant), tokens, bytes, arrival};
}

FlowQueueOptions Options(size_t max_queue, uint64_t max_bytes = 0, double max_wait = 10, bool fairness = true) {
  return FlowQueueOptions{max_queue, max_bytes, max_wait, fairness};
}

std::vector<uint64_t> Drain(FlowQueue& q) {
  std::vector<uint64_t> out;
  while (auto item = q.Pop()) out.push_back(item->id);
  return out;
}

TEST(FlowQueueTest, HigherBandsLeaveFirstThenArrivalOrder) {
  FlowQueue q(Options(10));
  ASSERT_EQ(q.Push(Item(1, 0, "a")).verdict, FlowVerdict::kQueued);
  ASSERT_EQ(q.Push(Item(2, 1, "a")).verdict, FlowVerdict::kQueued);
  ASSERT_EQ(q.Push(Item(3, 0, "a")).verdict, FlowVerdict::kQueued);
  ASSERT_EQ(q.Push(Item(4, 2, "b")).verdict, FlowVerdict::kQueued);
  ASSERT_EQ(q.Push(Item(5, 1, "b")).verdict, FlowVerdict::kQueued);
  EXPECT_EQ(q.size(), 5u);
  EXPECT_EQ(q.size(1), 2u);
  EXPECT_EQ(Drain(q), (std::vector<uint64_t>{4, 2, 5, 1, 3}));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_EQ(q.tenants_tracked(), 0u);
}

TEST(FlowQueueTest, SheddableBandsAreNeverQueued) {
  FlowQueue q(Options(10));
  EXPECT_EQ(q.Push(Item(1, -1, "a")).verdict, FlowVerdict::kShed);
  EXPECT_TRUE(q.empty());
  FlowQueue none(Options(0));  // no queue: refused at once
  EXPECT_EQ(none.Push(Item(1, 0, "a")).verdict, FlowVerdict::kFull);
}

TEST(FlowQueueTest, FullQueueDisplacesTheNewestOfLowerBandsOnly) {
  FlowQueue q(Options(3));
  ASSERT_EQ(q.Push(Item(1, 0, "a")).verdict, FlowVerdict::kQueued);
  ASSERT_EQ(q.Push(Item(2, 0, "b")).verdict, FlowVerdict::kQueued);
  ASSERT_EQ(q.Push(Item(3, 1, "a")).verdict, FlowVerdict::kQueued);
  // Same band as the lowest queued: nothing to displace.
  EXPECT_EQ(q.Push(Item(4, 0, "c")).verdict, FlowVerdict::kFull);
  // A higher band displaces band 0's newest (2), not its oldest.
  auto r = q.Push(Item(5, 2, "c"));
  EXPECT_EQ(r.verdict, FlowVerdict::kQueued);
  EXPECT_EQ(r.displaced, (std::vector<uint64_t>{2}));
  EXPECT_EQ(q.Push(Item(6, 1, "c")).displaced, (std::vector<uint64_t>{1}));
  // Now bands 2, 1, 1: band 1 cannot displace its own band.
  EXPECT_EQ(q.Push(Item(7, 1, "d")).verdict, FlowVerdict::kFull);
  EXPECT_EQ(Drain(q), (std::vector<uint64_t>{5, 3, 6}));
}

TEST(FlowQueueTest, ByteLimitCountsQueuedBodies) {
  FlowQueue q(Options(100, /*max_bytes=*/1000));
  EXPECT_EQ(q.Push(Item(1, 0, "a", 1, 1001)).verdict, FlowVerdict::kTooLarge);
  ASSERT_EQ(q.Push(Item(2, 0, "a", 1, 600)).verdict, FlowVerdict::kQueued);
  ASSERT_EQ(q.Push(Item(3, 0, "a", 1, 300)).verdict, FlowVerdict::kQueued);
  EXPECT_EQ(q.bytes(), 900u);
  EXPECT_EQ(q.Push(Item(4, 0, "b", 1, 200)).verdict, FlowVerdict::kFull);
  // A higher band displaces as many lower-band bodies as it needs, newest first.
  auto r = q.Push(Item(5, 1, "b", 1, 500));
  EXPECT_EQ(r.verdict, FlowVerdict::kQueued);
  EXPECT_EQ(r.displaced, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(q.bytes(), 500u);
  // Nothing is displaced when even all the lower bands would not make room.
  ASSERT_EQ(q.Push(Item(6, 0, "a", 1, 100)).verdict, FlowVerdict::kQueued);
  EXPECT_EQ(q.Push(Item(7, 1, "a", 1, 600)).verdict, FlowVerdict::kFull);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.bytes(), 600u);
}

TEST(FlowQueueTest, WaitDeadlineExpiresOldestFirst) {
  FlowQueue q(Options(10, 0, /*max_wait=*/5));
  q.Push(Item(1, 0, "a", 1, 1, 0.0));
  q.Push(Item(2, 1, "b", 1, 1, 1.0));
  q.Push(Item(3, 0, "a", 1, 1, 2.0));
  EXPECT_EQ(q.NextExpiry(), 5.0);
  EXPECT_EQ(q.Waited(2, 3.5), 2.5);
  EXPECT_EQ(q.OldestWaited(3.5), 3.5);  // the oldest by arrival, whatever its band
  EXPECT_TRUE(q.Expire(4.99).empty());
  EXPECT_EQ(q.Expire(6.0), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(q.NextExpiry(), 7.0);
  EXPECT_EQ(q.OldestWaited(6.0), 4.0);
  EXPECT_FALSE(q.Waited(1, 6.0).has_value());
  EXPECT_EQ(Drain(q), (std::vector<uint64_t>{3}));
  EXPECT_FALSE(q.NextExpiry().has_value());
  EXPECT_FALSE(q.OldestWaited(6.0).has_value());
}

TEST(FlowQueueTest, RemoveTakesAClientGoneOutWithoutCharge) {
  FlowQueue q(Options(10));
  q.Push(Item(1, 0, "a", 1000));
  q.Push(Item(2, 0, "a", 1000));
  q.Push(Item(3, 0, "b", 10));
  EXPECT_TRUE(q.Remove(2));   // not the tenant's head
  EXPECT_FALSE(q.Remove(2));  // once
  EXPECT_TRUE(q.Remove(1));   // its head: a's next would lead, but a has nothing left
  EXPECT_FALSE(q.Remove(99));
  EXPECT_EQ(Drain(q), (std::vector<uint64_t>{3}));
  // Removed requests charged nothing: a and b start level again.
  q.Push(Item(4, 0, "b", 10));
  q.Push(Item(5, 0, "a", 10));
  q.Push(Item(6, 0, "b", 10));
  EXPECT_EQ(Drain(q), (std::vector<uint64_t>{4, 5, 6}));
}

// Two tenants backlogged in one band, one sending 10 times as many requests (and the other's
// prompts twice as long): each gets about half of the prompt tokens dispatched while both wait.
TEST(FlowQueueTest, BackloggedTenantsShareDispatchedTokensEvenly) {
  FlowQueue q(Options(100000));
  uint64_t id = 0;
  for (int i = 0; i < 2000; ++i) q.Push(Item(++id, 0, "heavy", 500));
  for (int i = 0; i < 200; ++i) q.Push(Item(++id, 0, "light", 1000));
  std::map<std::string, uint64_t> tokens;
  for (int i = 0; i < 300; ++i) {  // both still backlogged throughout
    auto item = q.Pop();
    ASSERT_TRUE(item);
    tokens[item->tenant] += item->tokens;
  }
  const double total = static_cast<double>(tokens["heavy"] + tokens["light"]);
  EXPECT_GE(tokens["heavy"] / total, 0.45);
  EXPECT_GE(tokens["light"] / total, 0.45);
  // Without fairness: arrival order, the heavy tenant's backlog first.
  FlowQueue fifo(Options(100000, 0, 10, /*fairness=*/false));
  for (uint64_t i = 1; i <= 20; ++i) fifo.Push(Item(i, 0, "heavy", 500));
  fifo.Push(Item(21, 0, "light", 1000));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(fifo.Pop()->tenant, "heavy");
}

// A tenant that was idle while another was served rejoins at the lowest waiting counter: it
// cannot spend the time it sat out to take the queue over.
TEST(FlowQueueTest, IdleTimeIsNotSavedAsCredit) {
  FlowQueue q(Options(100000));
  uint64_t id = 0;
  for (int i = 0; i < 100; ++i) q.Push(Item(++id, 0, "busy", 100));
  for (int i = 0; i < 50; ++i) q.Pop();  // busy's counter is at 5,000
  for (int i = 0; i < 20; ++i) q.Push(Item(++id, 0, "late", 100));
  int late_first = 0;
  for (int i = 0; i < 20; ++i) late_first += q.Pop()->tenant == "late";
  EXPECT_LE(late_first, 11);  // alternates from the join, not 20 in a row
  EXPECT_GE(late_first, 9);
}

// Many tenants passing through while one stays backlogged: the counters kept stay bounded.
// Objective names map to bands; anything else is refused at validation or not found.
TEST(FlowObjectivesTest, ValidatesAndLooksUp) {
  const std::string good = "interactive=5,batch=0,bulk=-1,a.b_c-d=10";
  EXPECT_TRUE(ValidateFlowObjectives(good).ok());
  EXPECT_TRUE(ValidateFlowObjectives("").ok());
  EXPECT_EQ(FlowObjectiveBand(good, "interactive"), 5);
  EXPECT_EQ(FlowObjectiveBand(good, "bulk"), -1);
  EXPECT_EQ(FlowObjectiveBand(good, "a.b_c-d"), 10);
  EXPECT_EQ(FlowObjectiveBand(good, "batc"), std::nullopt);
  EXPECT_EQ(FlowObjectiveBand(good, ""), std::nullopt);
  EXPECT_EQ(FlowObjectiveBand("", "interactive"), std::nullopt);
  for (const char* bad :
       {"a", "a=", "=1", "a=11", "a=-11", "a=1.5", "a=x", "a=1,a=2", "a=1,", ",a=1", "a b=1", "a=1,,b=2", "a=1=2"}) {
    Status s = ValidateFlowObjectives(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("flow_control.objectives"), std::string::npos) << s.message();
  }
  std::string many;
  for (size_t i = 0; i <= kMaxFlowObjectives; ++i) many += (i ? ",o" : "o") + std::to_string(i) + "=1";
  EXPECT_FALSE(ValidateFlowObjectives(many).ok());
}

// In-flight saturation's room: the places below the threshold of the routable eligible
// instances, capped at `enough`; none routable at all is not a reason to wait.
TEST(FlowSaturationTest, RoomCountsRoutableEligibleInstancesBelowTheThreshold) {
  std::vector<InstanceSpec> specs;
  for (const char* name : {"a", "b", "c"}) specs.push_back(InstanceSpec{name, std::string("http://") + name});
  specs[2].serves = {"other-model"};
  auto fleet = FleetSnapshot::Create(std::move(specs));
  ASSERT_TRUE(fleet.ok());
  const FleetSnapshot& f = **fleet;
  f.state(0).in_flight = 1;
  f.state(1).in_flight = 4;  // beyond the threshold: no room, not negative room
  const auto all = f.Eligible("");
  EXPECT_EQ(FlowInstanceRoom(f, all, FlowSaturation::kInFlight, 3, 100), 2u + 0u + 3u);
  EXPECT_EQ(FlowInstanceRoom(f, all, FlowSaturation::kInFlight, 3, 4), 4u);  // stops at enough
  EXPECT_EQ(FlowInstanceRoom(f, f.Eligible("m1"), FlowSaturation::kInFlight, 3, 100), 2u);  // c serves other-model
  EXPECT_EQ(FlowInstanceRoom(f, all, FlowSaturation::kPool, 3, 7), 7u);
  f.state(2).available = false;
  EXPECT_EQ(FlowInstanceRoom(f, all, FlowSaturation::kInFlight, 3, 100), 2u);
  f.state(0).drained = true;
  EXPECT_EQ(FlowInstanceRoom(f, all, FlowSaturation::kInFlight, 3, 100), 0u);  // b is full
  f.state(1).available = false;
  EXPECT_EQ(FlowInstanceRoom(f, all, FlowSaturation::kInFlight, 3, 100), 100u);  // none routable

  // Routed where there is room: the full routable ones are excluded, unless all of them are.
  f.state(0).drained = false;
  f.state(1).available = true;
  f.state(2).available = true;  // a: 1, b: 4, c: 0 in flight
  std::vector<uint32_t> out{7};
  AppendFullInstances(f, all, 1, out);
  EXPECT_EQ(out, (std::vector<uint32_t>{7, 0, 1}));
  f.state(2).in_flight = 1;
  AppendFullInstances(f, all, 1, out);  // all full: nothing appended
  EXPECT_EQ(out, (std::vector<uint32_t>{7, 0, 1}));
  f.state(2).available = false;
  out.clear();
  AppendFullInstances(f, all, 4, out);  // c is not routable; a has room
  EXPECT_EQ(out, (std::vector<uint32_t>{1}));

  EXPECT_EQ(ParseFlowSaturation("pool").value(), FlowSaturation::kPool);
  EXPECT_EQ(ParseFlowSaturation("in-flight").value(), FlowSaturation::kInFlight);
  EXPECT_EQ(FlowSaturationName(FlowSaturation::kInFlight), "in-flight");
  auto bad = ParseFlowSaturation("prefill");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pool, in-flight"), std::string::npos);
}

TEST(FlowQueueTest, TenantCountersStayBounded) {
  FlowQueue q(Options(100000));
  uint64_t id = 0;
  for (int i = 0; i < 10; ++i) q.Push(Item(++id, 0, "resident", 50));
  for (int i = 0; i < 20000; ++i) {
    q.Push(Item(++id, 0, "t" + std::to_string(i), 100));
    q.Push(Item(++id, 0, "resident", 50));
    q.Pop();
    q.Pop();
  }
  EXPECT_LE(q.tenants_tracked(), FlowQueue::kMaxIdleTenants + 16);
  Drain(q);
  EXPECT_EQ(q.tenants_tracked(), 0u);
}

// Randomised: whatever the sequence of pushes, pops, removals and expiries, every request leaves
// exactly once, sizes and bytes match what is queued, and each pop is the highest band present.
// Within a tenant, the earliest deadline not yet passed leaves first; then, in arrival order,
// those without a deadline and those whose deadline passed. Between tenants fairness still
// decides; without fairness the band is one flow, ordered so across tenants.
TEST(FlowQueueTest, DeadlinesFirstWithinAFlow) {
  auto with = [](FlowItem i, double deadline) {
    i.deadline = deadline;
    return i;
  };
  {
    FlowQueue q(Options(100));
    q.Push(Item(1, 0, "t"));
    q.Push(with(Item(2, 0, "t"), 5));
    q.Push(with(Item(3, 0, "t"), 2));
    q.Push(with(Item(4, 0, "t"), 1));  // passed at 1.5
    q.Push(Item(5, 0, "t"));
    std::vector<uint64_t> order;
    while (auto item = q.Pop(1.5)) order.push_back(item->id);
    EXPECT_EQ(order, (std::vector<uint64_t>{3, 2, 1, 4, 5}));
  }
  for (bool fairness : {true, false}) {
    FlowQueue q(Options(100, 0, 10, fairness));
    q.Push(Item(10, 0, "b"));
    q.Push(Item(11, 0, "b"));
    q.Push(with(Item(20, 0, "a"), 9));
    q.Push(with(Item(21, 0, "a"), 3));
    EXPECT_EQ(Drain(q), fairness ? (std::vector<uint64_t>{10, 21, 11, 20})   // b waited first; then turns
                                 : (std::vector<uint64_t>{21, 20, 10, 11}))  // one flow: deadlines first
        << "fairness " << fairness;
  }
  FlowQueue q(Options(100));
  q.Push(with(Item(1, 0, "t"), 4));
  q.Push(with(Item(2, 0, "t"), 3));
  EXPECT_TRUE(q.Remove(2));
  EXPECT_EQ(Drain(q), (std::vector<uint64_t>{1}));
  FlowQueueOptions ignored = Options(100);
  ignored.deadlines = false;  // arrival order whatever the deadlines
  FlowQueue plain(ignored);
  plain.Push(with(Item(1, 0, "t"), 9));
  plain.Push(with(Item(2, 0, "t"), 3));
  EXPECT_EQ(Drain(plain), (std::vector<uint64_t>{1, 2}));
}

TEST(FlowQueueTest, RandomOperationsKeepTheAccounts) {
  testing::TestLcg rng(16);
  FlowQueue q(Options(40, 5000, 3.0));
  std::map<uint64_t, FlowItem> queued;
  uint64_t next = 1;
  double now = 0;
  for (int step = 0; step < 20000; ++step) {
    now += 0.01 * static_cast<double>(rng(10));
    const uint64_t op = rng(10);
    if (op < 5) {
      FlowItem item =
          Item(next++, static_cast<int32_t>(rng(4)) - 1, "t" + std::to_string(rng(5)), rng(2000), rng(400), now);
      if (rng(2) == 0) item.deadline = now + 0.01 * static_cast<double>(rng(300));
      auto r = q.Push(item);
      for (uint64_t gone : r.displaced) {
        ASSERT_TRUE(queued.contains(gone)) << "step " << step;
        ASSERT_LT(queued.at(gone).band, item.band) << "step " << step;
        queued.erase(gone);
      }
      if (r.verdict == FlowVerdict::kQueued) queued.emplace(item.id, item);
    } else if (op < 8) {
      auto item = q.Pop(now);
      ASSERT_EQ(item.has_value(), !queued.empty()) << "step " << step;
      if (!item) continue;
      int32_t top = -1;
      for (const auto& [i, it] : queued) top = std::max(top, it.band);
      ASSERT_EQ(item->band, top) << "step " << step;
      // Within its tenant: the earliest deadline not yet passed, else the oldest.
      double earliest = kNoFlowDeadline;
      uint64_t oldest = UINT64_MAX;
      for (const auto& [i, it] : queued) {
        if (it.band != top || it.tenant != item->tenant) continue;
        if (it.deadline > now) earliest = std::min(earliest, it.deadline);
        oldest = std::min(oldest, i);
      }
      if (earliest != kNoFlowDeadline) {
        ASSERT_EQ(item->deadline, earliest) << "step " << step;
      } else {
        ASSERT_EQ(item->id, oldest) << "step " << step;
      }
      ASSERT_EQ(queued.erase(item->id), 1u) << "step " << step;
    } else if (op < 9) {
      const uint64_t id = 1 + rng(next);
      ASSERT_EQ(q.Remove(id), queued.erase(id) == 1) << "step " << step;
    } else {
      for (uint64_t gone : q.Expire(now)) {
        ASSERT_TRUE(queued.contains(gone)) << "step " << step;
        ASSERT_LE(queued.at(gone).arrival + 3.0, now) << "step " << step;
        queued.erase(gone);
      }
      for (const auto& [i, it] : queued) ASSERT_GT(it.arrival + 3.0, now) << "step " << step;
    }
    uint64_t bytes = 0;
    for (const auto& [i, it] : queued) bytes += it.bytes;
    ASSERT_EQ(q.size(), queued.size()) << "step " << step;
    ASSERT_EQ(q.bytes(), bytes) << "step " << step;
    ASSERT_LE(q.size(), 40u);
    ASSERT_LE(q.bytes(), 5000u);
  }
}

FlowQueueOptions Bounded(uint32_t bound, bool fairness = true) {
  FlowQueueOptions o = Options(100000, 0, 10, fairness);
  o.max_in_flight_per_tenant = bound;
  return o;
}

// A tenant at its bound is passed over: the other tenant's requests leave while it waits, and it
// rejoins when one of its own ends. Requests that went in flight without the queue count too.
TEST(FlowQueueTest, TenantAtItsBoundIsPassedOver) {
  FlowQueue q(Bounded(2));
  uint64_t id = 0;
  for (int i = 0; i < 10; ++i) q.Push(Item(++id, 0, "heavy"));
  for (int i = 0; i < 3; ++i) q.Push(Item(++id, 0, "light"));
  std::vector<std::string> order;
  while (auto item = q.Pop()) order.push_back(item->tenant);
  EXPECT_EQ(order, (std::vector<std::string>{"heavy", "light", "heavy", "light"}));
  EXPECT_FALSE(q.ready());
  EXPECT_EQ(q.size(), 9u);  // still queued: they wait, and their wait runs
  EXPECT_TRUE(q.AtBound("heavy"));
  EXPECT_TRUE(q.AtBound("light"));
  EXPECT_FALSE(q.AtBound("other"));
  EXPECT_EQ(q.tenants_at_bound(), 2u);
  q.Finished("light");
  EXPECT_TRUE(q.ready());
  EXPECT_EQ(q.Pop()->tenant, "light");
  EXPECT_FALSE(q.Pop());
  q.Finished("heavy");
  q.Finished("heavy");
  EXPECT_EQ(q.in_flight("heavy"), 0u);
  EXPECT_EQ(q.Pop()->tenant, "heavy");
  EXPECT_EQ(q.Pop()->tenant, "heavy");
  EXPECT_FALSE(q.Pop());
  // A newcomer of a tenant at its bound waits behind it; one started without the queue counts.
  q.Started("new");
  q.Started("new");
  EXPECT_TRUE(q.AtBound("new"));
  q.Push(Item(++id, 0, "new"));
  EXPECT_FALSE(q.ready());
  q.Finished("new");
  EXPECT_EQ(q.Pop()->id, id);
  // Ends this queue did not count (a queue made by a reload) are ignored.
  q.Finished("unknown");
  EXPECT_EQ(q.in_flight("unknown"), 0u);
  // Higher bands first among the tenants within their bound.
  FlowQueue bands(Bounded(1));
  bands.Push(Item(1, 1, "a"));
  bands.Push(Item(2, 1, "a"));
  bands.Push(Item(3, 0, "b"));
  EXPECT_EQ(bands.Pop()->id, 1u);
  EXPECT_EQ(bands.Pop()->id, 3u);  // a is at its bound: band 0's b goes
  bands.Finished("a");
  EXPECT_EQ(bands.Pop()->id, 2u);
  // Without a bound nothing is counted.
  FlowQueue plain(Options(10));
  plain.Started("a");
  EXPECT_FALSE(plain.AtBound("a"));
  EXPECT_EQ(plain.in_flight("a"), 0u);
}

// A tenant held at its bound while another is served does not bank the time as credit: when it
// is let back in, it takes turns with the other rather than a run of requests.
TEST(FlowQueueTest, TimeAtTheBoundIsNotSavedAsCredit) {
  FlowQueue q(Bounded(1));
  uint64_t id = 0;
  for (int i = 0; i < 100; ++i) q.Push(Item(++id, 0, "held", 100));
  for (int i = 0; i < 100; ++i) q.Push(Item(++id, 0, "other", 100));
  ASSERT_EQ(q.Pop()->tenant, "held");
  // "held" stays at its bound while "other" is let out 50 times (each ending at once).
  for (int i = 0; i < 50; ++i) {
    auto item = q.Pop();
    ASSERT_EQ(item->tenant, "other");
    q.Finished("other");
  }
  q.Finished("held");
  int held = 0;
  for (int i = 0; i < 20; ++i) {
    auto item = q.Pop();
    held += item->tenant == "held";
    q.Finished(item->tenant);
  }
  EXPECT_LE(held, 11);
  EXPECT_GE(held, 9);
}

// Randomised with a bound: as RandomOperationsKeepTheAccounts, and Pop lets out a request exactly
// when one is queued whose tenant is within its bound, from the highest such band, never taking
// a tenant past its bound; the counts follow every start and end.
TEST(FlowQueueTest, RandomOperationsWithABoundKeepTheAccounts) {
  for (bool fairness : {true, false}) {
    testing::TestLcg rng(fairness ? 23 : 24);
    constexpr uint32_t kBound = 3;
    FlowQueueOptions o = Options(60, 0, 3.0, fairness);
    o.max_in_flight_per_tenant = kBound;
    FlowQueue q(o);
    std::map<uint64_t, FlowItem> queued;
    std::map<std::string, uint32_t> in_flight;
    std::vector<std::string> running;  // one entry per request in flight
    uint64_t next = 1;
    double now = 0;
    for (int step = 0; step < 20000; ++step) {
      now += 0.01 * static_cast<double>(rng(10));
      const uint64_t op = rng(12);
      const std::string tenant = "t" + std::to_string(rng(5));
      if (op < 4) {
        FlowItem item = Item(next++, static_cast<int32_t>(rng(3)), tenant, rng(2000), rng(400), now);
        auto r = q.Push(item);
        for (uint64_t gone : r.displaced) ASSERT_EQ(queued.erase(gone), 1u) << "step " << step;
        if (r.verdict == FlowVerdict::kQueued) queued.emplace(item.id, item);
      } else if (op < 7) {
        int32_t top = -1;
        for (const auto& [i, it] : queued) {
          if (in_flight[it.tenant] < kBound) top = std::max(top, it.band);
        }
        ASSERT_EQ(q.ready(), top >= 0) << "step " << step;
        auto item = q.Pop(now);
        ASSERT_EQ(item.has_value(), top >= 0) << "step " << step;
        if (!item) continue;
        ASSERT_EQ(item->band, top) << "step " << step;
        ASSERT_LT(in_flight[item->tenant], kBound) << "step " << step;
        ASSERT_EQ(queued.erase(item->id), 1u) << "step " << step;
        ++in_flight[item->tenant];
        running.push_back(item->tenant);
      } else if (op < 8) {
        if (in_flight[tenant] < kBound) {  // as the caller: a slot without the queue only within the bound
          ASSERT_FALSE(q.AtBound(tenant)) << "step " << step;
          q.Started(tenant);
          ++in_flight[tenant];
          running.push_back(tenant);
        } else {
          ASSERT_TRUE(q.AtBound(tenant)) << "step " << step;
        }
      } else if (op < 10) {
        if (running.empty()) continue;
        const size_t at = rng(running.size());
        const std::string done = running[at];
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(at));
        --in_flight[done];
        q.Finished(done);
      } else if (op < 11) {
        const uint64_t id = 1 + rng(next);
        ASSERT_EQ(q.Remove(id), queued.erase(id) == 1) << "step " << step;
      } else {
        for (uint64_t gone : q.Expire(now)) ASSERT_EQ(queued.erase(gone), 1u) << "step " << step;
      }
      size_t at_bound = 0;
      for (const auto& [t, n] : in_flight) {
        ASSERT_EQ(q.in_flight(t), n) << "step " << step;
        at_bound += n == kBound;
      }
      ASSERT_EQ(q.tenants_at_bound(), at_bound) << "step " << step;
      ASSERT_EQ(q.size(), queued.size()) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace prefix_router
