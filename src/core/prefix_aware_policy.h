// prefix-aware: rendezvous placement of the request's PrefixKey gives each key a preference
// order over the instances; the request goes to the first preferred instance below its limit
// (the concurrency threshold and, with a balance factor, consistent hashing with bounded loads),
// and spills by RoutingOptions::spill when that one is full. With a balance factor, moves are
// sticky, hot keys are replicated, a share bound keeps instances near their fair share, and new
// keys of traffic without reuse are placed by load. docs/policies.md explains each rule and the
// measurements behind it.
//
// Thread-safety: Pick is const for callers and safe from any thread, concurrently with
// OnDispatched, but with a balance factor it is not pure: it reads and updates the moved-key
// table (core/key_homes.h), and reads the share meter and the key-demand counts (which
// OnDispatched feeds), all internally locked. Without a balance factor it is stateless.
#pragma once

#include <memory>

#include "core/policy.h"

namespace prefix_router {

// REQUIRES: options.Validate().ok()
std::unique_ptr<Policy> MakePrefixAwarePolicy(const RoutingOptions& options);

}  // namespace prefix_router
