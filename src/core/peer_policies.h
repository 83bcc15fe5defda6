// The peers' routing policies, re-implemented for side-by-side comparison (issue 7): a factory
// over core/peer_sglang.h, core/peer_gie.h and core/peer_haproxy.h. Each is labelled "our
// re-implementation of X's published policy" and runs at its source's defaults:
//   sglang-cache-aware           SGLang's cache-aware router, classic miss rule (smallest tree)
//   sglang-cache-aware-min-load  the same with the miss rule of SGLang PR #14650 (least loaded)
//   llm-d-prefix                 llm-d / GIE: prefix-cache (3) + queue (2) + KV-utilisation (2)
//                                scorers, max-score picker
//   haproxy-chash-bl             HAProxy consistent hashing, hash-balance-factor 150;
//                                haproxy-chash-bl-fN sets the factor (f0 = plain consistent hashing)
// They are baselines for the simulator, not strategies the gateway serves.
//
// Thread-safety: the factory functions are pure; the policies follow the Policy contract.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/policy.h"
#include "core/status.h"

namespace prefix_router {

// The names above (haproxy-chash-bl without a factor).
std::vector<std::string_view> PeerStrategyNames();
// One line per name: what it re-implements, from which source (for --help).
std::string PeerStrategyHelp();
bool IsPeerStrategy(std::string_view name);
// For reports: "our re-implementation of X's published policy (source, version, defaults)" for a
// strategy name (as simulate names it) that re-implements a peer, dynamo-kv included; "" for
// ours and for unknown names.
std::string StrategyOrigin(std::string_view name);

// How much routing text (RouteRequest::text) the peer reads, in the parser's units (characters
// on the OpenAI API, bytes on the native one): SGLang all of it (up to 64 MiB), GIE its
// max_prefix_blocks x block_size, HAProxy none (it hashes the prefix key). 0 for unknown names.
uint32_t PeerTextLength(std::string_view name);

// InvalidArgument for a name IsPeerStrategy rejects. `options` is unused by the peers (they run
// at their sources' defaults) but for HAProxy's key, which prefix_length already shaped.
Result<std::unique_ptr<Policy>> MakePeerPolicy(std::string_view name, const RoutingOptions& options);

}  // namespace prefix_router
