// random: each request goes to an instance drawn uniformly among the eligible, available,
// untried ones, in proportion to InstanceSpec::weight when weights differ. The managed service's
// default strategy, and RoutingOptions' own; a baseline that ignores both load and cache.
//
// Thread-safety: stateless; Pick is const and safe from any number of threads at once (the
// randomness comes from the caller's Rng).
#pragma once

#include <memory>

#include "core/policy.h"

namespace prefix_router {

// `options` is not read: every random pool behaves alike.
std::unique_ptr<Policy> MakeRandomPolicy(const RoutingOptions& options);

}  // namespace prefix_router
