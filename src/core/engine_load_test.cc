// LoadMeasure::kEngine: "least loaded" by what the engines report of themselves (docs/policies.md,
// "Load measure").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/fleet.h"
#include "core/policy.h"
#include "core/rng.h"

namespace prefix_router {
namespace {

std::shared_ptr<const FleetSnapshot> Fleet(uint32_t n) {
  std::vector<InstanceSpec> specs;
  for (uint32_t i = 0; i < n; ++i) specs.push_back(InstanceSpec{"instance-" + std::to_string(i)});
  auto r = FleetSnapshot::Create(std::move(specs));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

std::unique_ptr<Policy> LeastOutstandingByEngine() {
  RoutingOptions o;
  o.strategy = Strategy::kLeastOutstanding;
  o.load_measure = LoadMeasure::kEngine;
  return MakePolicy(o);
}

uint32_t PickOne(const Policy& p, const FleetSnapshot& f, Rng& rng) {
  auto d = p.Pick(RouteRequest{}, f, rng);
  EXPECT_TRUE(d.ok());
  return d.ok() ? d->instance : UINT32_MAX;
}

// The name parses and prints; the error lists the three measures.
TEST(EngineLoadMeasureTest, Name) {
  ASSERT_TRUE(ParseLoadMeasure("engine").ok());
  EXPECT_EQ(*ParseLoadMeasure("engine"), LoadMeasure::kEngine);
  EXPECT_EQ(LoadMeasureName(LoadMeasure::kEngine), "engine");
  EXPECT_NE(ParseLoadMeasure("engines").status().message().find("requests, prompt-tokens, engine"), std::string::npos);
}

// Reported running + waiting decide, not this gateway's in-flight count: an instance busy with
// another replica's requests is avoided although this one sent it nothing.
TEST(EngineLoadMeasureTest, ReportedQueuesDecide) {
  auto fleet = Fleet(3);
  auto p = LeastOutstandingByEngine();
  Rng rng(1);
  fleet->state(0).SetEngineReport(8, 2, 0.5);
  fleet->state(1).SetEngineReport(1, 0, 0.5);
  fleet->state(2).SetEngineReport(3, 4, 0.5);
  fleet->state(1).in_flight.store(50);  // this gateway's own count is ignored for reporters
  EXPECT_EQ(PickOne(*p, *fleet, rng), 1u);
}

// Requests sent since a report count on top of it, so a burst between two reports spreads; a new
// report replaces them.
TEST(EngineLoadMeasureTest, DispatchesSinceTheReportCount) {
  auto fleet = Fleet(2);
  auto p = LeastOutstandingByEngine();
  Rng rng(1);
  fleet->state(0).SetEngineReport(3, 0, 0.1);
  fleet->state(1).SetEngineReport(0, 0, 0.1);
  std::vector<uint32_t> picks;
  std::vector<InFlightGuard> guards;
  for (int n = 0; n < 5; ++n) {
    const uint32_t i = PickOne(*p, *fleet, rng);
    picks.push_back(i);
    guards.emplace_back(fleet->shared_state(i));  // counts the dispatch, as the gateway does
  }
  // Instance 1 takes three (its load 0, 1, 2 against 3); at 3 against 3 one of the next two goes
  // to instance 0 and the other to whichever is then lower: instance 0 gets exactly one.
  EXPECT_EQ(picks[0], 1u);
  EXPECT_EQ(picks[1], 1u);
  EXPECT_EQ(picks[2], 1u);
  EXPECT_EQ(std::count(picks.begin(), picks.end(), 0u), 1);
  // A fresh report that already holds those requests: only what it says counts again.
  fleet->state(0).SetEngineReport(0, 0, 0.1);
  fleet->state(1).SetEngineReport(9, 0, 0.1);
  EXPECT_EQ(PickOne(*p, *fleet, rng), 0u);
}

// An instance without a report (never scraped, or its scrape failed) counts its in-flight
// requests, so a fleet that reports nothing behaves as load_measure: requests.
TEST(EngineLoadMeasureTest, UnreportedInstancesCountInFlight) {
  auto fleet = Fleet(2);
  auto p = LeastOutstandingByEngine();
  Rng rng(1);
  fleet->state(0).in_flight.store(2);
  fleet->state(1).SetEngineReport(5, 0, 0.1);
  EXPECT_EQ(PickOne(*p, *fleet, rng), 0u);
  fleet->state(1).SetEngineReport(-1, -1, std::numeric_limits<double>::quiet_NaN());  // forgotten
  fleet->state(1).in_flight.store(1);
  EXPECT_EQ(PickOne(*p, *fleet, rng), 1u);
}

}  // namespace
}  // namespace prefix_router
