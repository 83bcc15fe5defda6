// The routing interface: given a request's routing values and the fleet, a Policy picks one
// instance. Here: the interface, the values it works on (RouteRequest, Decision), the per-pool
// settings (RoutingOptions, validated once, at load) and the strategy registry, the one list of
// the strategies' names that MakePolicy, ParseStrategy, the configuration reader, the CLI's help
// texts and the simulator read. Each strategy has its own file (core/*_policy.h), docs/policies.md
// the reasoning behind each.
//
// Thread-safety: one Policy is shared by all I/O threads (and by the simulator). Pick is const
// for callers and may run on any thread, concurrently with itself and with the On* hooks. That
// const is the callers' contract, not immutability: some policies keep internally locked state
// that Pick reads or updates (each policy's header says which). Inputs are values: the request's
// served name and precomputed PrefixKey, the FleetSnapshot with its live in-flight counts, the
// caller's Rng. Nothing here does I/O or reads a clock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/fleet.h"
#include "core/flow_queue.h"
#include "core/kv_events.h"
#include "core/prefix_key.h"
#include "core/rng.h"
#include "core/status.h"

namespace prefix_router {

enum class Strategy {
  kRandom,
  kLeastOutstanding,
  kRoundRobin,
  kPrefixAware,
  kCacheAware,
  kKvAware,
  kDynamoKv,
};
enum class SpillMode { kNextPreferred, kLeastLoaded };
enum class LoadMeasure { kRequests, kPromptTokens, kEngine };
// Where the gateway gets RouteRequest::prompt_tokens for the strategies that read KV events:
// kLocal, the engine-compatible tokenizer built into the gateway (the emulator's); kEngine, the
// POST /tokenize endpoint of an instance of the pool (vLLM's), one round trip per request.
// Policies ignore it (gateway/prompt_tokens.h documents the trade-off).
enum class TokenizerSource { kLocal, kEngine };
// A behaviour preset. kSageMaker: the managed service's documented prefix-aware behaviour, for
// teams moving from it. When the prefix-selected instance has reached the concurrency
// threshold, that request alone goes to the instance with the fewest in-flight requests; there
// is no load bound and the key does not move (its next request goes to its preferred instance
// again). It fixes spill least-loaded, balance factor 0 and load measure requests (Validate
// refuses other values beside it); a pool given the preset without a strategy routes RANDOM,
// the managed service's default (the configuration reader applies that).
enum class Compatibility { kNone, kSageMaker };

class Policy;
struct RoutingOptions;

// One row of the strategy registry: a strategy the gateway serves.
struct StrategyInfo {
  Strategy strategy;
  std::string_view name;         // as configured (routing_strategy) and on the command line
  std::string_view description;  // one line, for help texts
  // REQUIRES: options.Validate().ok(); builds this strategy whatever options.strategy says.
  std::unique_ptr<Policy> (*make)(const RoutingOptions& options);
};
// The registry: every strategy, in the order help texts and errors list them. The only list of
// the strategies' names (ParseStrategy, MakePolicy, the configuration reader, `serve --help`,
// `route --help`, `simulate --help` and the simulator's labels read it).
std::span<const StrategyInfo> StrategyRegistry();
// The registry's name of `s` ("unknown" for a value outside it).
std::string_view StrategyName(Strategy s);
// The registry's names joined by `separator` ("random | least-outstanding-requests | ...").
std::string StrategyNames(std::string_view separator);
// Strategies that match RouteRequest::blocks, the block chain of the whole routing text
// (cache-aware, and kv-aware for its fallback view): callers key and chain the whole text.
inline bool UsesBlockChain(Strategy s) { return s == Strategy::kCacheAware || s == Strategy::kKvAware; }
// Strategies that route on the engines' KV events (OnKvEvents) and RouteRequest::prompt_tokens.
inline bool UsesKvEvents(Strategy s) { return s == Strategy::kKvAware || s == Strategy::kDynamoKv; }
// A registry name; InvalidArgument listing the registry's names otherwise.
Result<Strategy> ParseStrategy(std::string_view name);
// The strategy of a pool that names none (`serve`'s default pool, `route`): cache-aware, which
// wins the robustness matrix and needs no setting and no engine cooperation (docs/policies.md).
// `routing_strategy: random` gives the managed service's default exactly (prefix-aware with
// balance_factor 0, its prefix-aware routing).
inline constexpr Strategy kDefaultStrategy = Strategy::kCacheAware;
std::string_view SpillModeName(SpillMode m);
Result<SpillMode> ParseSpillMode(std::string_view name);
std::string_view LoadMeasureName(LoadMeasure m);  // "requests" | "prompt-tokens" | "engine"
Result<LoadMeasure> ParseLoadMeasure(std::string_view name);
std::string_view TokenizerSourceName(TokenizerSource t);  // "local" | "engine"
Result<TokenizerSource> ParseTokenizerSource(std::string_view name);
std::string_view CompatibilityName(Compatibility c);  // "none" | "sagemaker"
Result<Compatibility> ParseCompatibility(std::string_view name);

// Limits the managed service documents for PrefixLength and ConcurrencyThreshold.
inline constexpr uint32_t kMinPrefixLength = 1024;
inline constexpr uint32_t kMaxPrefixLength = 65536;
inline constexpr uint32_t kDefaultPrefixLength = 2048;
inline constexpr uint32_t kMinConcurrencyThreshold = 1;
inline constexpr uint32_t kMaxConcurrencyThreshold = 1024;
inline constexpr uint32_t kDefaultConcurrencyThreshold = 64;
inline constexpr double kMinBalanceFactor = 1.0;
// Measured with `simulate` on long-context (docs/proof.md): with 1.5 and the share bound every
// instance's share stays within the published 13.3-15.4% band with a 94% hit rate.
inline constexpr double kDefaultBalanceFactor = 1.5;
inline constexpr double kMaxBalanceFactor = 100.0;
inline constexpr uint32_t kMaxPoolInFlight = 1'000'000;

// cache-aware settings (docs/policies.md, "cache-aware").
struct CacheAwareOptions {
  uint32_t block_bytes = 256;  // routing text per block (about 64 tokens)
  uint32_t max_blocks = 4096;  // blocks hashed per request (1 MiB of text)
  // Per instance: 25,600 x 256 bytes / 4 = 1,638,400 tokens (102,400 engine blocks of 16), more
  // than llama-70b-h100x8's KV cache (about 86,000 blocks of 16, 1.38M tokens) with 19% to spare,
  // so that the indexes (kv-aware's and dynamo-kv's KvIndex too, see below) see the whole cache.
  uint64_t capacity_blocks = 25600;
  // The whole index: kv-aware's KvIndex gets 8/9 of it, 256 MiB, at KvIndex::kBytesPerEntry (160)
  // per engine block 1.68M blocks: 16 instances of 102,400 blocks; dynamo-kv's gets all of it.
  uint64_t max_index_bytes = 288ull << 20;
  double load_weight = 0.1;  // cost of a queued prompt token vs an uncached one
  bool operator==(const CacheAwareOptions&) const = default;
};

// cache-aware settings also configure kv-aware and dynamo-kv: the same load weight and index
// bound (max_index_bytes: 1/9 to kv-aware's sent view, 8/9 to its KvIndex, so that both cover
// about as many tokens; all of it to dynamo-kv's KvIndex), the per-instance bound in
// tokens (capacity_blocks x block_bytes / 4) and the longest prompt matched (max_blocks x
// block_bytes / 4 tokens).

// Per-pool routing settings. The struct's own strategy is random, the managed service's
// default, for code that chooses its own; a pool configured without one gets kDefaultStrategy
// (DefaultPoolRouting).
struct RoutingOptions {
  Strategy strategy = Strategy::kRandom;
  uint32_t prefix_length = kDefaultPrefixLength;                  // bytes (native) or characters
  uint32_t concurrency_threshold = kDefaultConcurrencyThreshold;  // in-flight per instance
  SpillMode spill = SpillMode::kNextPreferred;
  double balance_factor = kDefaultBalanceFactor;  // prefix-aware bounded load; 0 = off, 1..100
  // Admission, not placement: the gateway answers 429 to a request of this pool while the pool
  // has this many requests in flight (0 = no ceiling). Policies ignore it.
  uint32_t max_in_flight = 0;
  // Flow control (core/flow_queue.h): with max_queue > 0, a request that finds the pool at
  // max_in_flight waits in the pool's queue instead of getting 429 at once. Policies ignore it.
  FlowQueueOptions flow_control;
  // What "least loaded" compares (docs/policies.md, "Load measure").
  LoadMeasure load_measure = LoadMeasure::kRequests;
  CacheAwareOptions cache_aware;
  // What the key is computed over (api/key_normalisation.h); policies ignore it, the parsers
  // apply it. Checked by api::CompileKeyNormalisation, not by Validate().
  KeyNormalisation key_normalisation;
  // Where kv-aware and dynamo-kv pools get the prompt's tokens (see TokenizerSource).
  TokenizerSource tokenizer = TokenizerSource::kLocal;
  // A behaviour preset (see Compatibility); policies read the options it fixed.
  Compatibility compatibility = Compatibility::kNone;

  // Checks ranges; the message names the field and its allowed range.
  Status Validate() const;
  // Equal options build equivalent policies (a reload keeps a pool's Policy when they match).
  bool operator==(const RoutingOptions&) const = default;
};

// Sets the preset and the options it fixes (for kSageMaker: spill, balance factor, load measure).
void ApplyCompatibility(Compatibility c, RoutingOptions& o);

// The settings of a pool that names no strategy: every default, strategy kDefaultStrategy.
inline RoutingOptions DefaultPoolRouting() {
  RoutingOptions o;
  o.strategy = kDefaultStrategy;
  return o;
}

struct RouteRequest {
  std::string_view served_name;       // model or adapter; "" = every instance
  PrefixKey key;                      // used by prefix-aware
  std::span<const uint32_t> exclude;  // instance indices already tried for this request
  uint32_t work_tokens = 0;           // estimated prompt tokens (api::EstimatePromptTokens)
  std::span<const uint64_t> blocks;   // cache-aware: the routing text's block chain
  // kv-aware: the prompt's token ids as the engines tokenize it (empty = not known; kv-aware then
  // decides as cache-aware does).
  std::span<const uint32_t> prompt_tokens;
  // The routing text itself (message characters on the OpenAI API, body bytes on the native
  // API), for policies that match text directly (the peers' re-implementations); may be empty.
  std::string_view text;
  // The caller's name for this dispatch, unique among the requests in flight on the policy (a
  // retry is a new dispatch); 0 = not named. Policies that follow each request from dispatch to
  // completion (dynamo-kv) key their bookkeeping on it.
  uint64_t request_id = 0;
  // A fallback the caller lists without dispatching it (the endpoint picker's preference order
  // after its first choice, docs/epp.md): a policy whose Pick takes a turn (round-robin) does not
  // take one for it, so that the next request's first choice is the one it would be without it.
  bool preview = false;
};

enum class DecisionKind { kAffinity, kOverflow, kSaturated, kRandom, kLeastOutstanding, kRoundRobin };
std::string_view DecisionKindName(DecisionKind k);

struct Decision {
  uint32_t instance = 0;  // index into the FleetSnapshot the pick was made on
  DecisionKind kind = DecisionKind::kRandom;
  uint32_t rank = 0;  // position of `instance` in the key's preference order (prefix-aware)
  // RouteRequest::request_id of the request it placed: Pick leaves it 0, the caller copies the
  // request's id here before OnDispatched, so that OnFirstToken and OnCompleted name the request.
  uint64_t request_id = 0;
  // cache-aware and kv-aware: the prompt tokens the policy expects the instance to compute (its
  // estimate minus what it found cached there); 0 for the other strategies.
  uint64_t uncached_tokens = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // Unavailable when no eligible, available and untried instance exists.
  virtual Result<Decision> Pick(const RouteRequest& request, const FleetSnapshot& fleet, Rng& rng) const = 0;
  virtual std::string_view name() const = 0;

  // Events for learning policies; called by the gateway or simulator after a pick is used, with
  // the decision's request_id set. Per dispatch: OnDispatched once, then OnFirstToken at most once
  // (the first response byte of a stream, the whole response otherwise; not at all when the
  // attempt failed before it), then OnCompleted once.
  virtual void OnDispatched(const RouteRequest&, const Decision&, const FleetSnapshot&) {}
  virtual void OnFirstToken(const Decision&, const FleetSnapshot&) {}
  virtual void OnCompleted(const Decision&, const FleetSnapshot&) {}

  // KV cache events of one instance (named by its placement seed, which survives snapshot
  // changes), in the order they arrived: policies that route on the engines' cache state keep an
  // index of them; the others ignore them. May be called from any thread, concurrently with Pick.
  virtual void OnKvEvents(uint64_t /*instance_seed*/, const KvEventBatch& /*batch*/) {}
  // The caller lost that instance's event stream (connection lost, silent for longer than its
  // timeout): its view is not to be trusted until events arrive in sequence again.
  virtual void OnKvStreamLost(uint64_t /*instance_seed*/) {}
};

// The registry's policy for options.strategy.
// REQUIRES: options.Validate().ok()
std::unique_ptr<Policy> MakePolicy(const RoutingOptions& options);

}  // namespace prefix_router
