// round-robin: the eligible, available, untried instances in turn, one turn counter per served
// name (weights ignored). A baseline, not a hot path.
//
// Thread-safety: Pick is const for callers and safe from any thread, but not stateless: it
// advances the served name's turn counter, which a mutex guards.
#pragma once

#include <memory>

#include "core/policy.h"

namespace prefix_router {

// `options` is not read.
std::unique_ptr<Policy> MakeRoundRobinPolicy(const RoutingOptions& options);

}  // namespace prefix_router
