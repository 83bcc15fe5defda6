// The peers' routing policies, re-implemented for side-by-side comparison (issue 7): a factory
// over core/peer_sglang.h, core/peer_gie.h and core/peer_haproxy.h. Each is labelled "our
// re-implementation of X's published policy"; where it departs from its source's defaults, the
// line says so:
//   sglang-cache-aware           SGLang's cache-aware router, classic miss rule (smallest tree),
//                                the defaults of its CLI
//   sglang-cache-aware-min-load  the same with the miss rule of SGLang PR #14650 (least loaded)
//   llm-d-prefix                 llm-d / GIE: prefix-cache (3) + queue (2) + KV-utilisation (2)
//                                scorers, max-score picker, GIE's defaults (AutoTune on: the LRU
//                                per instance as large as the engine's KV cache, PeerEngineCache)
//   haproxy-chash-bl             HAProxy consistent hashing with hash-balance-factor 150, not
//                                HAProxy's default (0, off) but its documentation's example;
//                                haproxy-chash-bl-fN sets the factor (haproxy-chash-bl-f0 = the
//                                default: plain consistent hashing). Its key is prefix-aware's
//                                (the first prefix_length characters), a length HAProxy leaves to
//                                its configuration (`balance hash <expr>`): scripts/peers.sh
//                                sweeps it as it sweeps prefix-aware's.
// dynamo-kv, the fourth peer, is a Strategy (core/policy.h): the gateway serves it too.
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

// What the engines of the pool report of their KV cache (vLLM's vllm:cache_config_info labels
// block_size and num_gpu_blocks), for the peers that size themselves from it (GIE's AutoTune).
// 0 = not reported: the peer's configured defaults apply. The simulator fills it from the engine
// profile.
struct PeerEngineCache {
  uint32_t block_size = 0;  // tokens per block
  uint32_t gpu_blocks = 0;  // blocks in one engine's cache
};

// How much routing text (RouteRequest::text) the peer reads, in the parser's units (characters
// on the OpenAI API, bytes on the native one): SGLang all of it (up to 64 MiB), GIE its
// max_prefix_blocks x its block size (AutoTune's from `engine` when reported), HAProxy none (it
// hashes the prefix key). 0 for unknown names.
uint32_t PeerTextLength(std::string_view name, const PeerEngineCache& engine = {});

// InvalidArgument for a name IsPeerStrategy rejects. `options` is unused by the peers but for
// HAProxy's key, which prefix_length already shaped; `engine` sizes GIE's AutoTune.
Result<std::unique_ptr<Policy>> MakePeerPolicy(std::string_view name, const RoutingOptions& options,
                                               const PeerEngineCache& engine = {});

}  // namespace prefix_router
