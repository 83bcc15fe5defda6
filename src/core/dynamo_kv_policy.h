// dynamo-kv: our re-implementation of Dynamo's KV router (ai-dynamo/dynamo, early 2026: the
// versions and defaults are in docs/policies.md), a peer baseline the gateway also serves. Per
// worker, logit = overlap_score_weight x prefill_blocks + decode_blocks over a KvIndex fed by
// the engines' KV events, lowest wins, ties to the smallest index then at random; like Dynamo's
// ActiveSequences it follows each request (RouteRequest::request_id) from dispatch to first
// token and completion. No concurrency threshold, no fallback for stale streams (as Dynamo).
//
// Thread-safety: Pick is const for callers and safe from any thread, concurrently with the On*
// hooks and OnKvEvents; the per-worker bookkeeping is guarded by one mutex, the KvIndex is
// internally locked.
#pragma once

#include <cstdint>
#include <memory>

#include "core/policy.h"

namespace prefix_router {

// One worker's inputs to Dynamo's KV router cost: the request's input length in tokens and
// blocks, its leading blocks cached on the worker, and the worker's active prefill tokens and
// active blocks.
struct DynamoWorkerLoad {
  double isl_tokens = 0;
  uint32_t block_size = 16;  // > 0
  uint32_t overlap_blocks = 0;
  double active_tokens = 0;
  double active_blocks = 0;
  double new_blocks = 0;  // request blocks not among the worker's active blocks
};
// Dynamo's default overlap_score_weight (KvRouterConfig::default at the version cited above).
inline constexpr double kDynamoOverlapScoreWeight = 1.0;
// overlap_score_weight x (active_tokens + max(0, isl - overlap x block_size)) / block_size
//   + active_blocks + new_blocks; lower is better.
// REQUIRES: w.block_size > 0
double DynamoKvLogit(const DynamoWorkerLoad& w, double overlap_score_weight);

// REQUIRES: options.Validate().ok() (reads cache_aware)
std::unique_ptr<Policy> MakeDynamoKvPolicy(const RoutingOptions& options);

}  // namespace prefix_router
