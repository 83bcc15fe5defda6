#include "core/policy.h"

#include <charconv>
#include <string>

#include "core/cache_aware_policy.h"
#include "core/dynamo_kv_policy.h"
#include "core/kv_aware_policy.h"
#include "core/least_outstanding_policy.h"
#include "core/prefix_aware_policy.h"
#include "core/random_policy.h"
#include "core/round_robin_policy.h"

namespace prefix_router {
namespace {

std::string Range(uint32_t lo, uint32_t hi) { return std::to_string(lo) + ".." + std::to_string(hi); }

// The strategy registry (policy.h): the one place that names the strategies. A new strategy is
// a row here, its own file beside the others, and a section in docs/policies.md.
constexpr StrategyInfo kRegistry[] = {
    {Strategy::kRandom, "random", "uniform (weighted) among eligible instances; the managed service's default",
     MakeRandomPolicy},
    {Strategy::kLeastOutstanding, "least-outstanding-requests",
     "least load (routing.load_measure) per unit of weight; ties at random", MakeLeastOutstandingPolicy},
    {Strategy::kRoundRobin, "round-robin", "eligible instances in turn, weights ignored; a baseline",
     MakeRoundRobinPolicy},
    {Strategy::kPrefixAware, "prefix-aware",
     "rendezvous placement of the prefix key, spill when full, bounded loads (balance_factor)", MakePrefixAwarePolicy},
    {Strategy::kCacheAware, "cache-aware",
     "least uncached prompt tokens plus queued work, from the blocks each instance was sent", MakeCacheAwarePolicy},
    {Strategy::kKvAware, "kv-aware",
     "cache-aware's cost over the blocks the engines report in their KV events "
     "(cache-aware's view for stale streams)",
     MakeKvAwarePolicy},
    {Strategy::kDynamoKv, "dynamo-kv", "our re-implementation of Dynamo's KV router cost, on the engines' KV events",
     MakeDynamoKvPolicy},
};

}  // namespace

std::span<const StrategyInfo> StrategyRegistry() { return kRegistry; }

std::string_view StrategyName(Strategy s) {
  for (const StrategyInfo& e : kRegistry) {
    if (e.strategy == s) return e.name;
  }
  return "unknown";
}

std::string StrategyNames(std::string_view separator) {
  std::string out;
  for (const StrategyInfo& e : kRegistry) {
    if (!out.empty()) out += separator;
    out += e.name;
  }
  return out;
}

Result<Strategy> ParseStrategy(std::string_view name) {
  for (const StrategyInfo& e : kRegistry) {
    if (name == e.name) return e.strategy;
  }
  return Status::InvalidArgument("strategy: '" + std::string(name) + "' is not one of " + StrategyNames(", "));
}

std::string_view SpillModeName(SpillMode m) {
  return m == SpillMode::kNextPreferred ? "next-preferred" : "least-loaded";
}

Result<SpillMode> ParseSpillMode(std::string_view name) {
  if (name == "next-preferred") return SpillMode::kNextPreferred;
  if (name == "least-loaded") return SpillMode::kLeastLoaded;
  return Status::InvalidArgument("spill_mode: '" + std::string(name) + "' is not one of next-preferred, least-loaded");
}

std::string_view LoadMeasureName(LoadMeasure m) {
  switch (m) {
    case LoadMeasure::kRequests: return "requests";
    case LoadMeasure::kPromptTokens: return "prompt-tokens";
    case LoadMeasure::kEngine: return "engine";
  }
  return "requests";
}

Result<LoadMeasure> ParseLoadMeasure(std::string_view name) {
  if (name == "requests") return LoadMeasure::kRequests;
  if (name == "prompt-tokens") return LoadMeasure::kPromptTokens;
  if (name == "engine") return LoadMeasure::kEngine;
  return Status::InvalidArgument("load_measure: '" + std::string(name) +
                                 "' is not one of requests, prompt-tokens, engine");
}

std::string_view TokenizerSourceName(TokenizerSource t) { return t == TokenizerSource::kEngine ? "engine" : "local"; }

Result<TokenizerSource> ParseTokenizerSource(std::string_view name) {
  if (name == "local") return TokenizerSource::kLocal;
  if (name == "engine") return TokenizerSource::kEngine;
  return Status::InvalidArgument("tokenizer: '" + std::string(name) + "' is not one of local, engine");
}

std::string_view CompatibilityName(Compatibility c) { return c == Compatibility::kSageMaker ? "sagemaker" : "none"; }

Result<Compatibility> ParseCompatibility(std::string_view name) {
  if (name == "none") return Compatibility::kNone;
  if (name == "sagemaker") return Compatibility::kSageMaker;
  return Status::InvalidArgument("compatibility: '" + std::string(name) + "' is not one of none, sagemaker");
}

void ApplyCompatibility(Compatibility c, RoutingOptions& o) {
  o.compatibility = c;
  if (c != Compatibility::kSageMaker) return;
  o.spill = SpillMode::kLeastLoaded;
  o.balance_factor = 0;
  o.load_measure = LoadMeasure::kRequests;
}

std::string_view DecisionKindName(DecisionKind k) {
  switch (k) {
    case DecisionKind::kAffinity: return "affinity";
    case DecisionKind::kOverflow: return "overflow";
    case DecisionKind::kSaturated: return "saturated";
    case DecisionKind::kRandom: return "random";
    case DecisionKind::kLeastOutstanding: return "least-outstanding";
    case DecisionKind::kRoundRobin: return "round-robin";
  }
  return "unknown";
}

Status RoutingOptions::Validate() const {
  if (prefix_length < kMinPrefixLength || prefix_length > kMaxPrefixLength) {
    return Status::InvalidArgument("prefix_length: " + std::to_string(prefix_length) +
                                   " is outside the allowed range " + Range(kMinPrefixLength, kMaxPrefixLength));
  }
  if (concurrency_threshold < kMinConcurrencyThreshold || concurrency_threshold > kMaxConcurrencyThreshold) {
    return Status::InvalidArgument("concurrency_threshold: " + std::to_string(concurrency_threshold) +
                                   " is outside the allowed range " +
                                   Range(kMinConcurrencyThreshold, kMaxConcurrencyThreshold));
  }
  if (balance_factor != 0 && !(balance_factor >= kMinBalanceFactor && balance_factor <= kMaxBalanceFactor)) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, balance_factor);
    const std::string shown = ec == std::errc() ? std::string(buf, end) : std::string("?");
    return Status::InvalidArgument("balance_factor: " + shown + " must be 0 (off) or between 1 and 100");
  }
  if (max_in_flight > kMaxPoolInFlight) {
    return Status::InvalidArgument("max_in_flight: " + std::to_string(max_in_flight) +
                                   " is outside the allowed range " + Range(0, kMaxPoolInFlight) + " (0 = no ceiling)");
  }
  const FlowQueueOptions& fc = flow_control;
  if (fc.max_queue > kMaxFlowQueue) {
    return Status::InvalidArgument("flow_control.max_queue: " + std::to_string(fc.max_queue) +
                                   " is outside the allowed range 0..1000000 (0 = no queue)");
  }
  if (fc.max_queue_bytes > kMaxFlowQueueBytes) {
    return Status::InvalidArgument("flow_control.max_queue_bytes: " + std::to_string(fc.max_queue_bytes) +
                                   " is outside the allowed range 0..68719476736 (0 = no byte bound)");
  }
  if (!(fc.max_queue_wait > 0 && fc.max_queue_wait <= kMaxFlowQueueWait)) {
    return Status::InvalidArgument("flow_control.max_queue_wait: must be more than 0 and at most 3600 seconds");
  }
  if (fc.max_in_flight_per_tenant > kMaxPoolInFlight) {
    return Status::InvalidArgument(
        "flow_control.max_in_flight_per_tenant: " + std::to_string(fc.max_in_flight_per_tenant) +
        " is outside the allowed range " + Range(0, kMaxPoolInFlight) + " (0 = no bound)");
  }
  if (Status s = ValidateFlowObjectives(fc.objectives); !s.ok()) return s;
  const CacheAwareOptions& ca = cache_aware;
  if (ca.block_bytes < 16 || ca.block_bytes > 65536) {
    return Status::InvalidArgument("cache_aware.block_bytes: " + std::to_string(ca.block_bytes) +
                                   " is outside the allowed range 16..65536");
  }
  if (ca.max_blocks < 1 || ca.max_blocks > 65536) {
    return Status::InvalidArgument("cache_aware.max_blocks: " + std::to_string(ca.max_blocks) +
                                   " is outside the allowed range 1..65536");
  }
  if (ca.capacity_blocks < 1 || ca.capacity_blocks > (1ull << 32)) {
    return Status::InvalidArgument("cache_aware.capacity_blocks: " + std::to_string(ca.capacity_blocks) +
                                   " is outside the allowed range 1..4294967296");
  }
  if (ca.max_index_bytes < (1ull << 20) || ca.max_index_bytes > (64ull << 30)) {
    return Status::InvalidArgument("cache_aware.max_index_bytes: " + std::to_string(ca.max_index_bytes) +
                                   " is outside the allowed range 1 MiB..64 GiB");
  }
  if (!(ca.load_weight >= 0 && ca.load_weight <= 100)) {
    return Status::InvalidArgument("cache_aware.load_weight: must be between 0 and 100");
  }
  if (compatibility == Compatibility::kSageMaker) {
    // The preset's behaviour is these values; another one beside it is a contradiction.
    const char* field = spill != SpillMode::kLeastLoaded         ? "spill_mode"
                        : balance_factor != 0                    ? "balance_factor"
                        : load_measure != LoadMeasure::kRequests ? "load_measure"
                                                                 : nullptr;
    if (field != nullptr) {
      return Status::InvalidArgument(std::string(field) +
                                     ": compatibility sagemaker fixes spill_mode least-loaded, balance_factor 0 "
                                     "and load_measure requests; remove this field or the preset");
    }
  }
  return Status::Ok();
}

std::unique_ptr<Policy> MakePolicy(const RoutingOptions& o) {
  for (const StrategyInfo& e : kRegistry) {
    if (e.strategy == o.strategy) return e.make(o);
  }
  return nullptr;
}

}  // namespace prefix_router
