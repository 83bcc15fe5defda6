#include "core/kv_aware_policy.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/block_index.h"
#include "core/holder_lists.h"
#include "core/kv_index.h"
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
using policy_internal::PromptChains;

// The token-block chains of the last kPerInstance requests dispatched to each instance: blocks
// its engine is about to compute, or computing, whose BlockStored has not reached the router yet
// (events come after the prefill, and late). Without them two requests for a new document a few
// milliseconds apart would both see it nowhere and could be sent to two instances. Recent
// dispatches are the least likely to be evicted, so counting them held costs little precision.
// Bounded: kPerInstance chains of at most the matched prompt length per instance. Internally
// locked.
class RecentChains {
 public:
  static constexpr size_t kPerInstance = 8;

  void Add(uint64_t seed, std::vector<uint64_t> chain) {
    std::lock_guard lock(mu_);
    Ring& ring = rings_[seed];
    std::vector<uint64_t>& slot = ring.chains[ring.next];
    if (!slot.empty()) first_.Drop(slot[0], seed);
    slot = std::move(chain);
    if (!slot.empty()) first_.Add(slot[0], seed);
    ring.next = (ring.next + 1) % kPerInstance;
  }
  // The longest common prefix, in blocks, of `chain` with a recent chain of `seed`.
  size_t Match(uint64_t seed, std::span<const uint64_t> chain) const {
    std::lock_guard lock(mu_);
    auto it = rings_.find(seed);
    if (it == rings_.end() || chain.empty()) return 0;
    size_t best = 0;
    for (const std::vector<uint64_t>& c : it->second.chains) {
      const size_t n = std::min(c.size(), chain.size());
      size_t k = 0;
      while (k < n && c[k] == chain[k]) ++k;
      best = std::max(best, k);
    }
    return best;
  }
  // Appends to `out` the instances with a recent chain that starts as `chain` does (the only ones
  // Match gives a non-zero answer; an instance may be named more than once).
  void Holders(std::span<const uint64_t> chain, std::vector<uint64_t>& out) const {
    if (chain.empty()) return;
    std::lock_guard lock(mu_);
    const std::span<const uint64_t> holders = first_.Of(chain[0]);
    out.insert(out.end(), holders.begin(), holders.end());
  }
  void Forget(uint64_t seed) {
    std::lock_guard lock(mu_);
    auto it = rings_.find(seed);
    if (it == rings_.end()) return;
    for (const std::vector<uint64_t>& c : it->second.chains) {
      if (!c.empty()) first_.Drop(c[0], seed);
    }
    rings_.erase(it);
  }

 private:
  struct Ring {
    std::array<std::vector<uint64_t>, kPerInstance> chains;
    size_t next = 0;
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Ring> rings_;
  // A recent chain's first block -> the instances with a ring slot holding such a chain (once
  // per slot): at most kPerInstance entries per instance.
  HolderLists first_;
};

// Records the prompt chain of a request dispatched to instance `seed` (once its block size is known).
void NoteRecent(const KvIndex& index, RecentChains& recent, const RouteRequest& r, uint64_t seed, uint64_t max_tokens) {
  if (r.prompt_tokens.empty()) return;
  const uint32_t bs = index.block_size(seed);
  if (bs == 0) return;
  std::vector<uint64_t> chain;
  KvBlockChain(r.prompt_tokens, bs, max_tokens / bs, index.ChainSeedFor(r.served_name), chain);
  recent.Add(seed, std::move(chain));
}

// kv-aware (docs/policies.md): the engines' reported blocks (KvIndex) for instances whose event
// stream is fresh, cache-aware's sent-block view (a BlockIndex fed by OnDispatched) for the
// others, and the larger of the two for a fresh instance joined mid-stream (its view misses what
// was held before the join: KvIndex's file comment). The pool's max_index_bytes is split between
// the two indexes so that both cover about as many tokens (the sent view has 64-token blocks at
// about 80 bytes each, the reported view engine blocks, 16 tokens in vLLM, at about 160 bytes
// each (BlockIndex::kBytesPerEntry, KvIndex::kBytesPerEntry): 1.25 and 10 bytes per token, so 1/9
// and 8/9), so kv-aware's bookkeeping stays under the same bound as cache-aware's.
class KvAwarePolicy final : public Policy {
 public:
  explicit KvAwarePolicy(const RoutingOptions& o)
      : threshold_(static_cast<int32_t>(o.concurrency_threshold)),
        block_tokens_(std::max<uint32_t>(1, o.cache_aware.block_bytes / kBytesPerToken)),
        max_tokens_(uint64_t{o.cache_aware.max_blocks} * block_tokens_),
        load_weight_(o.cache_aware.load_weight),
        sent_(BlockIndex::Options{o.cache_aware.capacity_blocks, o.cache_aware.max_index_bytes / 9}),
        reported_(
            KvIndex::Options{o.cache_aware.capacity_blocks * block_tokens_, o.cache_aware.max_index_bytes / 9 * 8}) {}

  // Only some instances can have anything cached for a request: those holding its first block in
  // the sent view, in the engines' reports, or in a recent dispatch (BlockIndex::MatchHolders,
  // KvIndex::Holders, RecentChains::Holders). The others get 0 cached tokens without a lookup,
  // so a decision over 10,000 instances costs lookups per holder, not per instance.
  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const override {
    policy_internal::CandidateTotals totals;
    auto c = Candidates(r, f, false, &totals);
    if (c.empty()) return NoCandidate(r, f);
    CachedTokens cached(c.size());
    thread_local std::vector<uint64_t> holder_seeds, s_seeds;
    thread_local std::vector<std::pair<uint64_t, uint32_t>> sent_holders;
    thread_local std::vector<std::pair<size_t, uint32_t>> sent_at;  // candidate position, sent blocks
    thread_local std::vector<size_t> s_at;                          // candidate positions
    thread_local std::vector<KvIndex::InstanceMatch> reported;
    sent_holders.clear();
    sent_.MatchHolders(r.blocks, sent_holders);
    sent_at.clear();
    for (const auto& [seed, blocks] : sent_holders) {
      if (auto k = CandidatePosition(f, c, seed)) sent_at.emplace_back(*k, blocks);
    }
    const bool any_fresh =
        !r.prompt_tokens.empty() &&
        reported_.AnyFresh(
            c.size(), [&](size_t k) { return f.placement_seed(c[k]); },
            [&](uint64_t seed) { return CandidatePosition(f, c, seed).has_value(); });
    if (!any_fresh) {  // exactly cache-aware
      for (const auto& [k, blocks] : sent_at) cached[k] = uint64_t{blocks} * block_tokens_;
      return PickByCost(r, f, c, cached.view(), r.work_tokens, threshold_, load_weight_, shares_.Mark(f, c, totals),
                        queue_.Read(f, c));
    }
    const uint64_t prompt = r.prompt_tokens.size();
    PromptChains chains(r, reported_.ChainSeedFor(r.served_name), max_tokens_);
    // The candidates that may have something cached: sent-view, reported and recent holders.
    reported_.Holders(r.prompt_tokens, r.served_name, max_tokens_, holder_seeds);
    thread_local std::vector<uint32_t> block_sizes;
    reported_.BlockSizes(block_sizes);
    for (uint32_t bs : block_sizes) recent_.Holders(chains.At(bs), holder_seeds);
    s_at.clear();
    for (const auto& [k, blocks] : sent_at) s_at.push_back(k);
    for (uint64_t seed : holder_seeds) {
      if (auto k = CandidatePosition(f, c, seed)) s_at.push_back(*k);
    }
    std::sort(s_at.begin(), s_at.end());
    s_at.erase(std::unique(s_at.begin(), s_at.end()), s_at.end());
    s_seeds.resize(s_at.size());
    for (size_t j = 0; j < s_at.size(); ++j) s_seeds[j] = f.placement_seed(c[s_at[j]]);
    reported.assign(s_at.size(), KvIndex::InstanceMatch{});
    reported_.Match(r.prompt_tokens, r.served_name, max_tokens_, s_seeds, reported, false);
    std::sort(sent_at.begin(), sent_at.end());
    for (size_t j = 0; j < s_at.size(); ++j) {
      const size_t k = s_at[j];
      auto sent = std::lower_bound(sent_at.begin(), sent_at.end(), std::make_pair(k, uint32_t{0}));
      const uint32_t matched = sent != sent_at.end() && sent->first == k ? sent->second : 0;
      if (!reported[j].fresh) {
        cached[k] = std::min(prompt, uint64_t{matched} * block_tokens_);
        continue;
      }
      cached[k] = reported[j].matched_tokens;
      if (reported[j].partial) {  // joined mid-stream: the sent view may know more
        cached[k] = std::max(cached[k], std::min(prompt, uint64_t{matched} * block_tokens_));
      }
      if (const uint32_t bs = reported[j].block_size; bs != 0) {  // and what is being computed
        const size_t pending = recent_.Match(s_seeds[j], chains.At(bs));
        cached[k] = std::max<uint64_t>(cached[k], uint64_t{pending} * bs);
      }
    }
    return PickByCost(r, f, c, cached.view(), prompt, threshold_, load_weight_, shares_.Mark(f, c, totals), queue_.Read(f, c));
  }
  std::string_view name() const override { return StrategyName(Strategy::kKvAware); }
  void OnDispatched(const RouteRequest& r, const Decision& d, const FleetSnapshot& f) override {
    shares_.Count(f, d.instance);
    for (uint64_t seed : departures_.Left(f)) {
      sent_.ForgetInstance(seed);
      reported_.ForgetInstance(seed);
      recent_.Forget(seed);
      queue_.Forget(seed);
    }
    const uint64_t seed = f.placement_seed(d.instance);
    queue_.Add(d.request_id, seed, static_cast<double>(d.uncached_tokens));
    departures_.Note(seed);
    if (!r.blocks.empty()) sent_.Insert(r.blocks, seed);
    if (!r.prompt_tokens.empty()) reported_.Touch(seed, r.prompt_tokens, r.served_name, max_tokens_);
    NoteRecent(reported_, recent_, r, seed, max_tokens_);
  }
  void OnKvEvents(uint64_t seed, const KvEventBatch& batch) override {
    departures_.Note(seed);
    reported_.Apply(seed, batch);
  }
  void OnKvStreamLost(uint64_t seed) override { reported_.StreamLost(seed); }
  void OnFirstToken(const Decision& d, const FleetSnapshot&) override { queue_.Release(d.request_id); }
  void OnCompleted(const Decision& d, const FleetSnapshot&) override { queue_.Release(d.request_id); }

 private:
  int32_t threshold_;
  uint32_t block_tokens_;
  uint64_t max_tokens_;  // of a prompt matched: as many as cache-aware's max_blocks of text
  double load_weight_;
  // Internally locked; mutable because Pick (const for callers) matches on it, which refreshes
  // the matched blocks' recency.
  mutable BlockIndex sent_;
  KvIndex reported_;     // internally locked
  RecentChains recent_;  // internally locked
  Departures departures_;
  CostShareBound shares_;
  PrefillQueue queue_;
};

}  // namespace

std::unique_ptr<Policy> MakeKvAwarePolicy(const RoutingOptions& o) { return std::make_unique<KvAwarePolicy>(o); }

}  // namespace prefix_router
