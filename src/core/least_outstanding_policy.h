// least-outstanding-requests: each request goes to the candidate with the least load per unit
// of weight, ties uniformly at random (the caller's Rng). What "load" is follows
// RoutingOptions::load_measure: in-flight requests, outstanding prompt tokens, or the engines'
// reported queues (docs/policies.md, "Load measure").
//
// Thread-safety: stateless; Pick is const and safe from any number of threads at once. It reads
// the live in-flight counters of the FleetSnapshot (atomics, relaxed), so two concurrent picks
// may see the same load and choose alike.
#pragma once

#include <memory>

#include "core/policy.h"

namespace prefix_router {

// Reads options.load_measure only.
std::unique_ptr<Policy> MakeLeastOutstandingPolicy(const RoutingOptions& options);

}  // namespace prefix_router
