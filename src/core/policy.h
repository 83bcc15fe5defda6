// Routing policies: given a request's routing values and the fleet, pick one instance.
//
// Every strategy is a const object behind the Policy interface, shared by all I/O threads (and
// by the simulator), in the manner of Envoy's load balancers. Inputs are values: the request's
// served name and precomputed PrefixKey, the current FleetSnapshot with its live in-flight
// counts, and the caller's Rng. Nothing here does I/O or reads a clock.
//
// Strategies:
//   random                      uniform (weighted) among eligible instances; the managed
//                               service's default (RoutingOptions' too; the product's is
//                               kDefaultStrategy below).
//   least-outstanding-requests  fewest in-flight requests per unit of weight; ties at random.
//   round-robin                 eligible instances in turn (weights ignored); a baseline.
//   prefix-aware                rendezvous placement of the key gives a preference order; the
//                               request goes to the first preferred instance whose in-flight
//                               count is below concurrency_threshold. When the first choice is
//                               full it spills: `next-preferred` walks the preference order (a
//                               hot prefix gets a stable second home that warms too, as in
//                               consistent hashing with bounded loads), `least-loaded` takes the
//                               least loaded instance below the threshold (the managed service's
//                               documented behaviour). When every candidate is at the threshold,
//                               the least loaded one takes the request ("saturated").
//                               With a balance_factor F (0 = off), an instance is also full
//                               when its in-flight count reaches ceil(F x (in-flight over the
//                               candidates + 1) x its weight share), and never below 4:
//                               consistent hashing with bounded loads (Mirrokni et al.; HAProxy's
//                               hash-balance-factor F x 100). Keys hash unevenly (640 keys on 7
//                               instances give shares of 12-16%); bounded loads even that out.
//                               With a balance factor there is also a share bound: an instance
//                               whose recent dispatches (decaying over about 128 per instance,
//                               reported through OnDispatched) exceed its weight's fair share by
//                               more than 5% (+4 requests) is full, and the key moves to the
//                               instance furthest below its share; a spill from a merely busy
//                               first choice skips a second choice that is above its fair share.
//                               So shares stay even over a few thousand requests, not only on
//                               average, for about one point of hit rate.
//                               Hot keys are replicated (with a balance factor, once the pool
//                               is busy): a key carrying more than one instance's fair share of
//                               the recent dispatches (core/key_demand.h) has
//                               ceil(share x instances / 1.05) homes, the first ones of its
//                               preference order, and goes to the least loaded of them below its
//                               limit; homes are added as the key heats and dropped as it cools,
//                               and while its least loaded home is above its fair share of
//                               recent dispatches (homes shared with other hot keys).
//                               One key for all traffic is then spread like
//                               least-outstanding-requests, with the key's prefix warm on every
//                               home, instead of moving whole from one overloaded home to the next.
//                               The threshold follows the pool: an instance is full at
//                               max(threshold, ceil(1.05 x the candidates' mean in-flight)), so
//                               in overload (every instance above the threshold) keys keep their
//                               homes instead of all going to the least loaded instance, which
//                               scattered them over cold caches and fed the overload. A key
//                               that must spill in overload goes to the least loaded instance
//                               (the next preferred one sits just under its limit: the key would
//                               move again at its next spill, each move a cold prefill).
//                               The balance factor scales with reuse: F' = 1 + (F - 1) x the part
//                               of recent dispatches whose key repeated a recent key, so traffic
//                               that never repeats (affinity buys nothing) is balanced as by
//                               least-outstanding-requests instead of within F x the mean (the
//                               cap's floor of 4 shrinks likewise: ceil(4 x reuse), at least 1).
//                               A new key (no dispatch within about 4 x 128 per instance, no
//                               moved home) has nothing cached that the policy knows of: with
//                               probability 1 - reuse (decided by the key's hash, so replicas
//                               agree) it goes to the least loaded instance below its limit
//                               (kind least-outstanding) instead of its first choice. No home is
//                               recorded (each gateway's view of load differs; the first choice
//                               is common to all), so a key that repeats goes to its first
//                               choice from its second request. Traffic without reuse is then
//                               balanced like least-outstanding-requests.
//                               Moves are sticky: a key whose home is full when one of its
//                               requests arrives moves, with its later requests, to where the
//                               spill sends it (core/key_homes.h: at most 65,536 moved keys),
//                               so it is cached in one new place instead of its requests
//                               spilling one by one.
//                               It moves again only when that home is full in turn, and returns
//                               to its first choice when a later spill finds room there.
//                               A retry (an instance excluded after a failure) moves nothing.
//
// cache-aware (no prefix length to tune): the routing text is cut into blocks of
//   cache_aware.block_bytes, hashed as a chain (core/block_chain.h), and a BlockIndex remembers
//   which blocks each instance was sent (least recently used forgotten first, capacity_blocks
//   per instance, max_index_bytes in all). A request goes to the candidate below the concurrency
//   threshold with the lowest cost
//     cost = uncached prompt tokens (its estimated prompt tokens minus the tokens of the leading
//            blocks the instance holds)
//          + the instance's queued prefill: the uncached tokens of the requests this policy sent
//            there that have not produced their first token (weight 1: a request waits for the
//            prefills ahead of it as for its own; Dynamo's "active prefill tokens")
//          + load_weight x the instance's outstanding prompt tokens (decode shares the batch),
//   ties to the key's rendezvous preference (so replicas with the same view agree). A long shared
//   context matches at any length; a short generic opening saves little and does not outweigh
//   load. When every candidate is at the threshold the cheapest takes it (saturated). Once the
//   pool is busy, an instance over its share of recent dispatches (by more than 5% + 4, as
//   prefix-aware's share bound) ranks with those at the threshold, so a popular tenant's or
//   document's instance cannot take far more than its share while its queue stays short; and
//   while an instance is as far below its share (5% + 4 requests), those above 1.05 x their fair
//   share rank there too, so that it refills (the cost balances work, so an instance holding long
//   prompts would otherwise drift far below its share of requests). Kinds:
//   affinity (the chosen instance has the longest match), overflow (another had a longer
//   match but cost more), least-outstanding (no candidate holds any block).
//
// kv-aware (precise; the engines' cooperation needed): the engines' KV cache events (vLLM's
//   BlockStored / BlockRemoved / AllBlocksCleared, through OnKvEvents) feed a KvIndex
//   (core/kv_index.h) of the token blocks each instance reports it holds, keyed on hashes the
//   router recomputes from the events' token ids. A request's chain comes from
//   RouteRequest::prompt_tokens (the engine-compatible tokenization), cut in the instance's
//   reported block size and seeded with the served name when engines have reported blocks
//   under it (a LoRA adapter), else with the base model's seed. The decision is cache-aware's,
//   with the same options: the cost uses the prompt's exact token count and, per instance, the
//   tokens of its longest held prefix, or of its longest prefix shared with one of the last 8
//   requests dispatched there when that is longer (blocks being computed: their BlockStored
//   comes after the prefill, and late; without this, two requests for a new document a few
//   milliseconds apart would both find it nowhere). A dispatch also marks the reported blocks it
//   uses as recently used (KvIndex::Touch: cache hits produce no events). An instance whose
//   event stream is not trustworthy (never heard from, a sequence gap not filled by a replay, a
//   lost stream: see core/kv_index.h) is judged on cache-aware's view of what it was sent (a
//   BlockIndex fed by OnDispatched, over RouteRequest::blocks) instead, and its recent
//   dispatches are not consulted; when no candidate is fresh, or prompt_tokens is empty, the
//   decision is exactly cache-aware's. Ties go to the key's rendezvous preference, so replicas
//   given the same events and load decide the same way. Kinds as cache-aware's.
//
// dynamo-kv: our re-implementation of Dynamo's KV router (ai-dynamo/dynamo, early 2026:
//   lib/llm/src/kv_router/scheduler.rs and queue.rs @ db19bd2a, sequence.rs @ 581ee33e; defaults
//   of that version's KvRouterConfig: overlap_score_weight 1.0, router_temperature 0,
//   router_track_active_blocks on, router_queue_threshold None), a peer baseline on the same
//   KvIndex. Per worker, logit = overlap_score_weight x prefill_blocks + decode_blocks
//   (DynamoKvLogit), the lowest wins. Ties (temperature 0: every worker at the minimum) go to the
//   worker whose index holds the fewest blocks (Dynamo's tree size), uniformly at random among
//   those when they hold as many. Like Dynamo it trusts its index as it is (no fallback for stale
//   streams) and has no concurrency threshold. Like Dynamo's ActiveSequences it tracks per worker
//   what it dispatched, by request (RouteRequest::request_id): each request adds its new prefill
//   tokens (input minus the overlap its worker reported at dispatch) to the worker's active
//   tokens until its first token (OnFirstToken: Dynamo's mark_prefill_completed), and its whole
//   blocks to the worker's active blocks, an exact reference-counted set: a block is active while
//   any request in flight there uses it, and leaves when the last of them completes (OnCompleted:
//   Dynamo's free). Dynamo's router queue (park requests while every worker's active prefill
//   tokens exceed router_queue_threshold x max_num_batched_tokens) is off by default at that
//   version (router_queue_threshold: None) and not modelled. A request without an id (0) is
//   released, at either event, as the worker's oldest unnamed request.
//
// Load measure (per pool): where load decides (least-outstanding-requests, the least-loaded spill
// and the saturated fallback of prefix-aware), `requests` compares in-flight requests per unit of
// weight; `prompt-tokens` compares outstanding work: the estimated prompt tokens of the requests in
// flight plus one per request (RouteRequest::work_tokens, counted by InFlightGuard), so that an
// instance prefilling one 32k-token prompt counts as busier than one holding two 50-token ones.
// `engine` compares what the engines report of themselves (InstanceState::engine_running +
// engine_waiting, scraped from their /metrics by the gateway: gateway/engine_metrics.h) plus the
// requests this gateway sent each instance since that report, which the report cannot hold yet
// (without them every request between two scrapes would herd on the same instance); an
// instance that has not reported counts its in-flight requests. Several gateway replicas then
// share one view of load: given the same reports, and no dispatches of their own since, they
// decide alike.
// The concurrency threshold and the bounded-load cap still count requests (the managed
// service's ConcurrencyThreshold is a request count).
//
// Eligibility: only instances that serve the request's name (model or LoRA adapter) and are
// available (not ejected or drained) are candidates. Instances listed in RouteRequest::exclude
// (already tried by a retry) are skipped but keep their rank.
//
// Learning policies (cache-aware, kv-aware, dynamo-kv) receive dispatch, first-token and
// completion events through the On* hooks; the stateless strategies here ignore them. They forget an instance that
// left the fleet at the first dispatch made on a snapshot without it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/fleet.h"
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
// The strategy of a pool that names none (`serve`'s default pool, `route`): cache-aware, the
// strategy that wins the robustness matrix (docs/proof.md, scripts/robustness.sh: a production
// trace, shared keys, hot tenants, RAG, no reuse, overload, fleet sizes). The managed service
// defaults to random, which recomputes every shared prefix on each instance it scatters to;
// prefix-aware needs a prefix length suited to the traffic; kv-aware needs engines that publish
// KV events. cache-aware needs no setting and no engine cooperation. `routing_strategy: random`
// gives the managed service's default exactly (prefix-aware with balance_factor 0, its
// prefix-aware routing).
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

// cache-aware settings (see the file comment).
struct CacheAwareOptions {
  uint32_t block_bytes = 256;            // routing text per block (about 64 tokens)
  uint32_t max_blocks = 4096;            // blocks hashed per request (1 MiB of text)
  // Per instance: 25,600 x 256 bytes / 4 = 1,638,400 tokens (102,400 engine blocks of 16), more
  // than llama-70b-h100x8's KV cache (about 86,000 blocks of 16, 1.38M tokens) with 19% to spare,
  // so that the indexes (kv-aware's and dynamo-kv's KvIndex too, see below) see the whole cache.
  uint64_t capacity_blocks = 25600;
  // The whole index: kv-aware's KvIndex gets 8/9 of it, 256 MiB, at KvIndex::kBytesPerEntry (160)
  // per engine block 1.68M blocks: 16 instances of 102,400 blocks; dynamo-kv's gets all of it.
  uint64_t max_index_bytes = 288ull << 20;
  double load_weight = 0.1;              // cost of a queued prompt token vs an uncached one
  bool operator==(const CacheAwareOptions&) const = default;
};

// cache-aware settings also configure kv-aware and dynamo-kv: the same load weight and index
// bound (max_index_bytes: 1/9 to kv-aware's sent view, 8/9 to its KvIndex, so that both cover
// about as many tokens; all of it to dynamo-kv's KvIndex), the per-instance bound in
// tokens (capacity_blocks x block_bytes / 4) and the longest prompt matched (max_blocks x
// block_bytes / 4 tokens).

// DynamoWorkerLoad and DynamoKvLogit, dynamo-kv's cost: core/dynamo_kv_policy.h.

// Per-pool routing settings. The struct's own strategy is random, the managed service's
// default, for code that chooses its own; a pool configured without one gets kDefaultStrategy
// (DefaultPoolRouting).
struct RoutingOptions {
  Strategy strategy = Strategy::kRandom;
  uint32_t prefix_length = kDefaultPrefixLength;                // bytes (native) or characters
  uint32_t concurrency_threshold = kDefaultConcurrencyThreshold;  // in-flight per instance
  SpillMode spill = SpillMode::kNextPreferred;
  double balance_factor = kDefaultBalanceFactor;  // prefix-aware bounded load; 0 = off, 1..100
  // Admission, not placement: the gateway answers 429 to a request of this pool while the pool
  // has this many requests in flight (0 = no ceiling). Policies ignore it.
  uint32_t max_in_flight = 0;
  // What "least loaded" compares (see the file comment).
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
  std::string_view served_name;        // model or adapter; "" = every instance
  PrefixKey key;                       // used by prefix-aware
  std::span<const uint32_t> exclude;   // instance indices already tried for this request
  uint32_t work_tokens = 0;            // estimated prompt tokens (api::EstimatePromptTokens)
  std::span<const uint64_t> blocks;    // cache-aware: the routing text's block chain
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
};

enum class DecisionKind { kAffinity, kOverflow, kSaturated, kRandom, kLeastOutstanding, kRoundRobin };
std::string_view DecisionKindName(DecisionKind k);

struct Decision {
  uint32_t instance = 0;  // index into the FleetSnapshot the pick was made on
  DecisionKind kind = DecisionKind::kRandom;
  uint32_t rank = 0;      // position of `instance` in the key's preference order (prefix-aware)
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
  virtual Result<Decision> Pick(const RouteRequest& request, const FleetSnapshot& fleet,
                                Rng& rng) const = 0;
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
