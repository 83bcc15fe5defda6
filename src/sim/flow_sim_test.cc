// Flow control in the simulator (sim/simulator.h, "Flow control"): each gateway's ceiling, its
// queue (the gateway's own FlowQueue), tenant classes and the figures the run reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "report/results.h"
#include "sim/sim_test_workload.h"
#include "sim/simulator.h"

namespace prefix_router::sim {
namespace {

using test_traffic::DocWorkload;

// Four tiny-test instances (8 sequences each) offered far more than they serve: 32 requests
// can run at once, and 300 requests/s of ~600-token prompts keep every one of them busy.
SimOptions Overloaded(double rate_rps = 300) {
  SimOptions o;
  o.workload = "docs";
  o.make_workload = [](uint64_t seed) -> Result<std::unique_ptr<workload::Workload>> {
    return std::unique_ptr<workload::Workload>(new DocWorkload(seed, 12, 600, 1));
  };
  auto profile = engine_model::FindProfile("tiny-test");
  EXPECT_TRUE(profile.ok());
  o.profile = *profile;
  o.instances = 4;
  o.arrivals = Arrivals::kOpen;
  o.rate_rps = rate_rps;
  o.duration_s = 30;
  o.warmup_s = 0;
  o.series_window_s = 0;
  o.routing.strategy = Strategy::kLeastOutstanding;
  o.strategy_label = "least-outstanding-requests";
  return o;
}

double Extra(const report::RunResult& r, const std::string& key) {
  auto it = r.extra.find(key);
  EXPECT_NE(it, r.extra.end()) << key;
  return it == r.extra.end() ? -1 : it->second;
}

// The most requests a gateway had in flight at once: from routing (start plus queue wait) to
// the end of the response.
size_t PeakInFlight(const std::vector<report::RequestRecord>& records) {
  // Times in nanoseconds: a slot freed and taken at one model instant is recorded as two sums
  // (start + wait, start + e2e) of different requests, which may differ in the last bit.
  std::vector<std::pair<long long, int>> edges;
  for (const report::RequestRecord& r : records) {
    if (r.refused || r.e2e_s < 0) continue;
    const double routed = r.start_s + std::max(r.queue_s, 0.0);
    edges.emplace_back(std::llround(routed * 1e9), +1);
    edges.emplace_back(std::llround((r.start_s + r.e2e_s) * 1e9), -1);
  }
  std::sort(edges.begin(), edges.end());  // an end before a start at the same time: -1 sorts first
  size_t now = 0, peak = 0;
  for (const auto& [t, d] : edges) {
    now = static_cast<size_t>(static_cast<long>(now) + d);
    peak = std::max(peak, now);
  }
  return peak;
}

// In-flight saturation (flow_control.saturation in-flight): with no pool ceiling, a request waits
// while every instance holds the concurrency threshold, and no instance ever holds more, also
// under a strategy blind to load (round-robin: a request goes where the room is); without a
// queue the same saturation refuses.
TEST(FlowSimTest, InFlightSaturationBoundsEveryInstance) {
  for (uint32_t max_queue : {10000u, 0u}) {
    SimOptions o = Overloaded();
    o.routing.strategy = Strategy::kRoundRobin;
    o.strategy_label = "round-robin";
    o.routing.concurrency_threshold = 3;
    o.routing.flow_control.saturation = FlowSaturation::kInFlight;
    o.routing.flow_control.max_queue = max_queue;
    auto run = Simulate(o);
    ASSERT_TRUE(run.ok()) << run.status().message();
    std::map<int32_t, std::vector<report::RequestRecord>> by_instance;
    size_t queued = 0, refused = 0;
    for (const report::RequestRecord& r : run->records) {
      if (r.instance >= 0) by_instance[r.instance].push_back(r);
      if (r.queue_s > 0) ++queued;
      if (r.refused) ++refused;
    }
    ASSERT_EQ(by_instance.size(), 4u);
    for (const auto& [instance, records] : by_instance) {
      EXPECT_EQ(PeakInFlight(records), 3u) << "instance " << instance << ", max_queue " << max_queue;
    }
    EXPECT_GT(refused, 0u);
    if (max_queue > 0) {
      EXPECT_GT(queued, run->records.size() / 4);
    } else {
      EXPECT_EQ(queued, 0u);
    }
    EXPECT_EQ(run->result.settings.at("saturation_in_flight"), 3);
  }
}

// Without a queue, the ceiling refuses what it cannot admit, and never admits more.
TEST(FlowSimTest, CeilingRefusesWithoutAQueue) {
  SimOptions o = Overloaded();
  o.routing.max_in_flight = 16;
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_LE(PeakInFlight(run->records), 16u);
  size_t refused = 0;
  for (const report::RequestRecord& r : run->records) {
    if (r.refused) {
      ++refused;
      EXPECT_TRUE(r.error);
      EXPECT_LT(r.queue_s, 0);
      EXPECT_EQ(r.instance, -1);
    } else {
      EXPECT_FALSE(r.error);
      EXPECT_GE(r.e2e_s, 0);
    }
  }
  EXPECT_GT(refused, run->records.size() / 4);
  EXPECT_EQ(Extra(run->result, "refused"), static_cast<double>(refused));
  EXPECT_EQ(Extra(run->result, "queued"), 0);
  EXPECT_EQ(run->result.settings.at("max_in_flight"), 16);
}

// With a queue, a request waits instead: by band, under the same ceiling; TTFT counts the wait,
// every request either completes or is refused, and the high band is never refused while the low
// band fills the queue.
TEST(FlowSimTest, QueueLetsTheHigherBandOutFirst) {
  SimOptions o = Overloaded();
  o.routing.max_in_flight = 16;
  o.routing.flow_control.max_queue = 200;
  o.routing.flow_control.max_queue_wait = 30;
  o.tenants = {{"interactive", 1, 0.2}, {"batch", 0, 0.8}};
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_LE(PeakInFlight(run->records), 16u);
  size_t queued = 0;
  for (const report::RequestRecord& r : run->records) {
    ASSERT_GE(r.tenant, 0);
    if (r.refused) {
      EXPECT_EQ(r.tenant, 1) << "the interactive band displaces batch requests, never the reverse";
      continue;
    }
    ASSERT_GE(r.e2e_s, 0);
    if (r.queue_s >= 0) {
      ++queued;
      EXPECT_GE(r.ttft_s, r.queue_s);
    }
  }
  EXPECT_GT(queued, run->records.size() / 4);
  const report::RunResult& res = run->result;
  EXPECT_EQ(Extra(res, "tenant.interactive.refused"), 0);
  EXPECT_GT(Extra(res, "tenant.batch.refused"), 0);
  EXPECT_LT(Extra(res, "tenant.interactive.ttft_p90_s") * 5, Extra(res, "tenant.batch.ttft_p90_s"));
  EXPECT_EQ(Extra(res, "tenant.interactive.priority"), 1);
  EXPECT_EQ(Extra(res, "tenant.interactive.requests") + Extra(res, "tenant.batch.requests"),
            static_cast<double>(res.requests));
  // The classes' throughputs add up to the run's.
  EXPECT_NEAR(Extra(res, "tenant.interactive.throughput_rps") + Extra(res, "tenant.batch.throughput_rps"),
              res.throughput_rps, 1e-9);
}

// A request that waits max_queue_wait leaves refused, having waited that long.
TEST(FlowSimTest, WaitRunsOut) {
  SimOptions o = Overloaded();
  o.routing.max_in_flight = 8;
  o.routing.flow_control.max_queue = 100000;
  o.routing.flow_control.max_queue_wait = 0.5;
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok()) << run.status().message();
  size_t timed_out = 0;
  for (const report::RequestRecord& r : run->records) {
    if (r.refused) {
      ++timed_out;
      EXPECT_NEAR(r.queue_s, 0.5, 1e-9);
    } else if (r.queue_s >= 0) {
      EXPECT_LT(r.queue_s, 0.5 + 1e-9);
    }
  }
  EXPECT_GT(timed_out, 0u);
}

// Two tenants in one band, one flooding at 10x its share: with fairness the other's requests
// leave the queue ahead of the flood's backlog; in arrival order they wait behind it.
TEST(FlowSimTest, FairnessShieldsATenantFromAFlood) {
  auto p90_of_a = [](bool fairness) {
    SimOptions o = Overloaded(40);
    o.routing.max_in_flight = 16;
    o.routing.flow_control.max_queue = 2000;
    o.routing.flow_control.max_queue_wait = 60;
    o.routing.flow_control.fairness = fairness;
    o.tenants = {{"a", 0, 0.5}, {"b", 0, 5}};
    auto run = Simulate(o);
    EXPECT_TRUE(run.ok()) << run.status().message();
    return run.ok() ? Extra(run->result, "tenant.a.ttft_p90_s") : -1.0;
  };
  const double fair = p90_of_a(true), fifo = p90_of_a(false);
  EXPECT_GT(fair, 0);
  EXPECT_LT(fair * 4, fifo) << "fair " << fair << " s, arrival order " << fifo << " s";
}

// A per-tenant bound (flow_control.max_in_flight_per_tenant) with no pool ceiling: neither tenant
// ever has more than the bound in flight, the flood's surplus waits in the queue (or, without
// one, is refused), and the tenant within its share is never refused and waits less than it does
// behind the same flood under a pool ceiling of twice the bound with fairness alone.
TEST(FlowSimTest, TenantBoundKeepsRoomForTheOtherTenant) {
  auto run_with = [](uint32_t bound, uint32_t ceiling, uint32_t max_queue) {
    SimOptions o = Overloaded(40);
    o.routing.max_in_flight = ceiling;
    o.routing.flow_control.max_in_flight_per_tenant = bound;
    o.routing.flow_control.max_queue = max_queue;
    o.routing.flow_control.max_queue_wait = 60;
    o.tenants = {{"a", 0, 0.5}, {"b", 0, 5}};
    auto run = Simulate(o);
    EXPECT_TRUE(run.ok()) << run.status().message();
    return run;
  };
  for (uint32_t max_queue : {2000u, 0u}) {
    auto run = run_with(8, 0, max_queue);
    ASSERT_TRUE(run.ok());
    std::map<int32_t, std::vector<report::RequestRecord>> by_tenant;
    for (const report::RequestRecord& r : run->records) by_tenant[r.tenant].push_back(r);
    ASSERT_EQ(by_tenant.size(), 2u);
    EXPECT_LE(PeakInFlight(by_tenant[0]), 8u) << "max_queue " << max_queue;
    EXPECT_EQ(PeakInFlight(by_tenant[1]), 8u) << "max_queue " << max_queue;
    EXPECT_EQ(Extra(run->result, "tenant.a.refused"), 0) << "max_queue " << max_queue;
    if (max_queue > 0) {  // the flood's surplus waits (60 s: longer than the run)
      EXPECT_GT(Extra(run->result, "tenant.b.queue_wait_p90_s"), 1);
    } else {
      EXPECT_GT(Extra(run->result, "tenant.b.refused"), 0);
    }
    EXPECT_EQ(run->result.settings.at("max_in_flight_per_tenant"), 8);
    EXPECT_GT(Extra(run->result, "tenant.b.in_flight_mean"), 4) << "max_queue " << max_queue;
    EXPECT_LE(Extra(run->result, "tenant.b.in_flight_mean"), 8) << "max_queue " << max_queue;
  }
  auto bounded = run_with(8, 0, 2000), ceiling = run_with(0, 16, 2000);
  ASSERT_TRUE(bounded.ok() && ceiling.ok());
  const double with_bound = Extra(bounded->result, "tenant.a.ttft_p90_s");
  const double fair_only = Extra(ceiling->result, "tenant.a.ttft_p90_s");
  EXPECT_GT(with_bound, 0);
  EXPECT_LT(with_bound, fair_only) << "bound " << with_bound << " s, ceiling " << fair_only << " s";
}

// TTFT objectives are deadlines in the queue: in one flow (no fairness), a class with a tight
// objective leaves before one with a loose objective, and meets it far more often than with the
// deadlines ignored (arrival order); the results say how many met it either way.
TEST(FlowSimTest, ObjectivesLeaveEarliestDeadlineFirst) {
  auto run_with = [](bool deadlines) {
    SimOptions o = Overloaded();
    o.routing.max_in_flight = 16;
    o.routing.flow_control.max_queue = 5000;
    o.routing.flow_control.max_queue_wait = 60;
    o.routing.flow_control.fairness = false;
    o.routing.flow_control.deadlines = deadlines;
    o.tenants = {{"tight", 0, 0.3, 3000}, {"loose", 0, 0.7, 60000}};
    auto run = Simulate(o);
    EXPECT_TRUE(run.ok()) << run.status().message();
    return run.ok() ? std::move(*run) : SimRun{};
  };
  auto met = [](const SimRun& run, int32_t tenant, double objective_s) {
    size_t n = 0, ok = 0;
    for (const report::RequestRecord& r : run.records) {
      if (!r.counted || r.tenant != tenant) continue;
      ++n;
      if (!r.error && r.ttft_s >= 0 && r.ttft_s <= objective_s) ++ok;
    }
    return n > 0 ? static_cast<double>(ok) / static_cast<double>(n) : -1.0;
  };
  const SimRun edf = run_with(true), fifo = run_with(false);
  const double tight_edf = met(edf, 0, 3), tight_fifo = met(fifo, 0, 3);
  EXPECT_GT(tight_edf, 0.9);
  EXPECT_GT(tight_edf, tight_fifo + 0.3) << "earliest deadline first " << tight_edf << ", arrival order " << tight_fifo;
  EXPECT_DOUBLE_EQ(Extra(edf.result, "tenant.tight.objective_met"), tight_edf);
  EXPECT_DOUBLE_EQ(Extra(fifo.result, "tenant.tight.objective_met"), tight_fifo);
}

// Tenant classes alone (no ceiling, shares adding up to 1) route and time every request as the
// same run without them: their own random stream draws the classes.
TEST(FlowSimTest, ClassesAloneChangeNothingButTheLabels) {
  SimOptions plain = Overloaded(20);
  SimOptions classed = plain;
  classed.tenants = {{"x", 1, 0.3}, {"y", 0, 0.7}};
  auto a = Simulate(plain);
  auto b = Simulate(classed);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->records.size(), b->records.size());
  std::map<int32_t, size_t> per_class;
  for (size_t i = 0; i < a->records.size(); ++i) {
    EXPECT_EQ(a->records[i].instance, b->records[i].instance);
    EXPECT_EQ(a->records[i].ttft_s, b->records[i].ttft_s);
    EXPECT_EQ(a->records[i].tenant, -1);
    ++per_class[b->records[i].tenant];
  }
  ASSERT_EQ(per_class.size(), 2u);
  EXPECT_GT(per_class[0], a->records.size() / 6);
  EXPECT_GT(per_class[1], a->records.size() / 2);
  EXPECT_FALSE(a->result.extra.contains("refused"));
  EXPECT_FALSE(a->result.settings.contains("max_in_flight"));
}

// Shares scale the offered rate: a class at 10x sends about ten times the other's requests.
TEST(FlowSimTest, SharesScaleTheRate) {
  SimOptions o = Overloaded(10);
  o.tenants = {{"a", 0, 0.5}, {"b", 0, 5}};
  auto run = Simulate(o);
  ASSERT_TRUE(run.ok());
  const double a = Extra(run->result, "tenant.a.requests"), b = Extra(run->result, "tenant.b.requests");
  EXPECT_NEAR(b / a, 10, 2.5);
  EXPECT_NEAR((a + b) / 30, 55, 8);  // 10 x (0.5 + 5) requests/s for 30 s
}

}  // namespace
}  // namespace prefix_router::sim
