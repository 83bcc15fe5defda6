#include "core/cache_aware_policy.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/block_index.h"
#include "core/policy_internal.h"

namespace prefix_router {
namespace {

using policy_internal::CachedTokens;
using policy_internal::CandidatePosition;
using policy_internal::Candidates;
using policy_internal::CostShareBound;
using policy_internal::Departures;
using policy_internal::kBytesPerToken;
using policy_internal::NoCandidate;
using policy_internal::PickByCost;
using policy_internal::PrefillQueue;

class CacheAwarePolicy final : public Policy {
 public:
  explicit CacheAwarePolicy(const RoutingOptions& o)
      : threshold_(static_cast<int32_t>(o.concurrency_threshold)),
        block_tokens_(std::max<uint32_t>(1, o.cache_aware.block_bytes / kBytesPerToken)),
        load_weight_(o.cache_aware.load_weight),
        index_(BlockIndex::Options{o.cache_aware.capacity_blocks, o.cache_aware.max_index_bytes}) {}

  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const override {
    policy_internal::CandidateTotals totals;
    auto c = Candidates(r, f, false, &totals);
    if (c.empty()) return NoCandidate(r, f);
    // Only the instances holding the request's first block match anything (BlockIndex::
    // MatchHolders): found by seed, so a decision costs no index lookup per candidate.
    CachedTokens cached(c.size());
    thread_local std::vector<std::pair<uint64_t, uint32_t>> holders;
    index_.MatchHolders(r.blocks, holders);
    for (const auto& [seed, blocks] : holders) {
      if (auto k = CandidatePosition(f, c, seed)) cached[*k] = uint64_t{blocks} * block_tokens_;
    }
    return PickByCost(r, f, c, cached.view(), r.work_tokens, threshold_, load_weight_, shares_.Mark(f, c, totals),
                      queue_.Read(f, c));
  }
  std::string_view name() const override { return StrategyName(Strategy::kCacheAware); }
  void OnDispatched(const RouteRequest& r, const Decision& d, const FleetSnapshot& f) override {
    shares_.Count(f, d.instance);
    for (uint64_t seed : departures_.Left(f)) {
      index_.ForgetInstance(seed);
      queue_.Forget(seed);
    }
    const uint64_t seed = f.placement_seed(d.instance);
    queue_.Add(d.request_id, seed, static_cast<double>(d.uncached_tokens));
    if (r.blocks.empty()) return;
    departures_.Note(seed);
    index_.Insert(r.blocks, seed);
  }
  void OnFirstToken(const Decision& d, const FleetSnapshot&) override { queue_.Release(d.request_id); }
  void OnCompleted(const Decision& d, const FleetSnapshot&) override { queue_.Release(d.request_id); }

 private:
  int32_t threshold_;
  uint32_t block_tokens_;
  double load_weight_;
  // Internally locked; mutable because Pick (const for callers) matches on it, which refreshes
  // the matched blocks' recency.
  mutable BlockIndex index_;
  Departures departures_;
  CostShareBound shares_;
  PrefillQueue queue_;
};

}  // namespace

std::unique_ptr<Policy> MakeCacheAwarePolicy(const RoutingOptions& o) { return std::make_unique<CacheAwarePolicy>(o); }

}  // namespace prefix_router
