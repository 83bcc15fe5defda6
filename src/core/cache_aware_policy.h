// cache-aware (the gateway's default strategy; no prefix length to tune): the routing text's
// block chain (RouteRequest::blocks, core/block_chain.h) is matched against a BlockIndex of the
// blocks each instance was sent, and the request goes to the candidate below the concurrency
// threshold with the lowest cost: uncached prompt tokens + the instance's queued prefill +
// load_weight x its outstanding prompt tokens, ties to the key's rendezvous preference. A share
// bound keeps a popular instance from taking far more than its share once the pool is busy.
// docs/policies.md gives the cost and its reasons.
//
// Thread-safety: Pick is const for callers and safe from any thread, concurrently with the On*
// hooks, which feed the index, the prefill queue and the share meter; all three are internally
// locked (Pick's index match updates its recency, hence `mutable`).
#pragma once

#include <memory>

#include "core/policy.h"

namespace prefix_router {

// REQUIRES: options.Validate().ok() (reads concurrency_threshold and cache_aware)
std::unique_ptr<Policy> MakeCacheAwarePolicy(const RoutingOptions& options);

}  // namespace prefix_router
