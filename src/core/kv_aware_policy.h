// kv-aware (precise; needs engines that publish KV cache events): cache-aware's cost decision
// over the token blocks each engine reports it holds (OnKvEvents feeds a KvIndex,
// core/kv_index.h), matched on RouteRequest::prompt_tokens, plus the blocks of the last few
// requests dispatched to each instance (computed, not yet reported). An instance whose event
// stream is not trustworthy is judged on cache-aware's view of what it was sent; with no fresh
// instance, or no prompt tokens, the decision is exactly cache-aware's. docs/policies.md.
//
// Thread-safety: Pick is const for callers and safe from any thread, concurrently with the On*
// hooks and OnKvEvents / OnKvStreamLost (which may come from any thread). Every index, queue and
// meter it keeps is internally locked.
#pragma once

#include <memory>

#include "core/policy.h"

namespace prefix_router {

// REQUIRES: options.Validate().ok() (reads concurrency_threshold and cache_aware)
std::unique_ptr<Policy> MakeKvAwarePolicy(const RoutingOptions& options);

}  // namespace prefix_router
