#include "core/dynamo_kv_policy.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/kv_index.h"
#include "core/policy_internal.h"

namespace prefix_router {
namespace {

using policy_internal::Candidates;
using policy_internal::Departures;
using policy_internal::kBytesPerToken;
using policy_internal::NoCandidate;
using policy_internal::PromptChains;

// dynamo-kv: our re-implementation of Dynamo's KV router (docs/policies.md). The bookkeeping
// follows Dynamo's ActiveSequences (sequence.rs): per worker, the new prefill tokens of the
// requests that have not produced their first token, and a reference count per block hash of
// the requests in flight (a block is active while its count is above 0).
class DynamoKvPolicy final : public Policy {
 public:
  explicit DynamoKvPolicy(const RoutingOptions& o)
      : block_tokens_(std::max<uint32_t>(1, o.cache_aware.block_bytes / kBytesPerToken)),
        max_tokens_(uint64_t{o.cache_aware.max_blocks} * block_tokens_),
        reported_(KvIndex::Options{o.cache_aware.capacity_blocks * block_tokens_, o.cache_aware.max_index_bytes}) {}

  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng& rng) const override {
    auto c = Candidates(r, f, false);
    if (c.empty()) return NoCandidate(r, f);
    thread_local std::vector<uint64_t> seeds;
    thread_local std::vector<KvIndex::InstanceMatch> reported;
    thread_local std::vector<double> logits;
    seeds.resize(c.size());
    for (size_t k = 0; k < c.size(); ++k) seeds[k] = f.placement_seed(c[k]);
    Inputs(r, seeds, reported);
    PromptChains chains(r, reported_.ChainSeedFor(r.served_name), max_tokens_);
    logits.resize(c.size());
    double min_logit = 0;
    uint32_t longest = 0;
    for (size_t k = 0; k < c.size(); ++k) {
      const uint32_t bs = BlockSize(reported[k]);
      const std::span<const uint64_t> chain = r.prompt_tokens.empty() ? std::span<const uint64_t>() : chains.At(bs);
      const DynamoWorkerLoad w = Load(r, seeds[k], reported[k], chain);
      logits[k] = DynamoKvLogit(w, kDynamoOverlapScoreWeight);
      if (k == 0 || logits[k] < min_logit) min_logit = logits[k];
      longest = std::max(longest, reported[k].matched_tokens);
    }
    // router_temperature 0: the workers at the minimum logit; among them the smallest tree (the
    // fewest blocks indexed), uniformly at random when several hold as few.
    size_t best = SIZE_MAX;
    size_t best_tree = 0;
    uint32_t ties = 0;
    for (size_t k = 0; k < c.size(); ++k) {
      if (logits[k] != min_logit) continue;
      const size_t tree = reported_.held_blocks(seeds[k]);
      if (best == SIZE_MAX || tree < best_tree) {
        best = k;
        best_tree = tree;
        ties = 1;
      } else if (tree == best_tree && rng.Uniform(++ties) == 0) {  // reservoir: uniform among ties
        best = k;
      }
    }
    const DecisionKind kind = longest == 0                               ? DecisionKind::kLeastOutstanding
                              : reported[best].matched_tokens == longest ? DecisionKind::kAffinity
                                                                         : DecisionKind::kOverflow;
    return Decision{c[best], kind, 0};
  }
  std::string_view name() const override { return StrategyName(Strategy::kDynamoKv); }

  // Dynamo's add_request: the request's new prefill tokens (input minus the overlap the worker
  // reported) become active until its first token, its whole blocks until it completes.
  void OnDispatched(const RouteRequest& r, const Decision& d, const FleetSnapshot& f) override {
    for (uint64_t seed : departures_.Left(f)) {
      reported_.ForgetInstance(seed);
      ForgetWorker(seed);
    }
    const uint64_t seed = f.placement_seed(d.instance);
    departures_.Note(seed);
    std::vector<KvIndex::InstanceMatch> reported;
    const uint64_t one[] = {seed};
    Inputs(r, one, reported);
    const uint32_t bs = BlockSize(reported[0]);
    Request q;
    q.seed = seed;
    if (!r.prompt_tokens.empty()) {
      KvBlockChain(r.prompt_tokens, bs, max_tokens_ / bs, reported_.ChainSeedFor(r.served_name), q.blocks);
    }
    const double isl = InputTokens(r);
    q.prefill_tokens = std::max(0.0, isl - static_cast<double>(reported[0].matched_tokens / bs) * bs);
    {
      std::lock_guard lock(mu_);
      Worker& w = workers_[seed];
      uint64_t id = d.request_id;
      if (id == 0) {  // unnamed: released in dispatch order (dynamo_kv_policy.h)
        id = kUnnamed | next_unnamed_++;
        w.unnamed.push_back(id);
      } else if (requests_.contains(id)) {
        ReleaseLocked(id);  // a caller reusing a live id: the older request is over
      }
      w.active_tokens += q.prefill_tokens;
      for (uint64_t h : q.blocks) ++w.blocks[h];
      requests_.emplace(id, std::move(q));
    }
    if (!r.prompt_tokens.empty()) reported_.Touch(seed, r.prompt_tokens, r.served_name, max_tokens_);
  }
  // Dynamo's mark_prefill_completed: the request's prefill tokens leave the worker's load.
  void OnFirstToken(const Decision& d, const FleetSnapshot& f) override {
    std::lock_guard lock(mu_);
    auto it = requests_.find(IdLocked(d, f, /*for_first_token=*/true));
    if (it == requests_.end()) return;
    Request& q = it->second;
    if (auto w = workers_.find(q.seed); w != workers_.end()) {
      w->second.active_tokens = std::max(0.0, w->second.active_tokens - q.prefill_tokens);
    }
    q.prefill_tokens = 0;
  }
  // Dynamo's free: what is left of the request's prefill, and its references to its blocks.
  void OnCompleted(const Decision& d, const FleetSnapshot& f) override {
    std::lock_guard lock(mu_);
    ReleaseLocked(IdLocked(d, f, /*for_first_token=*/false));
  }
  void OnKvEvents(uint64_t seed, const KvEventBatch& batch) override {
    departures_.Note(seed);
    reported_.Apply(seed, batch);
  }

 private:
  struct Request {
    uint64_t seed = 0;             // the worker's placement seed
    double prefill_tokens = 0;     // still active (0 after the first token)
    std::vector<uint64_t> blocks;  // router hashes of its whole blocks, at the worker's block size
  };
  struct Worker {
    double active_tokens = 0;
    std::unordered_map<uint64_t, uint32_t> blocks;  // active block -> requests using it
    std::deque<uint64_t> unnamed;                   // ids given to unnamed requests, oldest first
  };
  static constexpr uint32_t kDefaultKvBlockSize = 16;
  static constexpr uint64_t kUnnamed = uint64_t{1} << 63;  // our ids for unnamed requests

  // A worker whose block size is not known yet (no event) counts in vLLM's default of 16.
  static uint32_t BlockSize(const KvIndex::InstanceMatch& m) {
    return m.block_size != 0 ? m.block_size : kDefaultKvBlockSize;
  }
  static double InputTokens(const RouteRequest& r) {
    return r.prompt_tokens.empty() ? r.work_tokens : static_cast<double>(r.prompt_tokens.size());
  }
  void Inputs(const RouteRequest& r, std::span<const uint64_t> seeds,
              std::vector<KvIndex::InstanceMatch>& reported) const {
    reported.assign(seeds.size(), KvIndex::InstanceMatch{});
    reported_.Match(r.prompt_tokens, r.served_name, max_tokens_, seeds, reported, /*stale_too=*/true);
  }
  // One worker's inputs to the logit: its active prefill tokens and active blocks, and how many of
  // the request's whole blocks (`chain`) it does not have active (Dynamo's new_blocks; merely
  // cached blocks are not active).
  DynamoWorkerLoad Load(const RouteRequest& r, uint64_t seed, const KvIndex::InstanceMatch& m,
                        std::span<const uint64_t> chain) const {
    const uint32_t bs = BlockSize(m);
    DynamoWorkerLoad w;
    w.block_size = bs;
    w.isl_tokens = InputTokens(r);
    w.overlap_blocks = m.matched_tokens / bs;
    std::lock_guard lock(mu_);
    auto it = workers_.find(seed);
    if (it == workers_.end()) {
      w.new_blocks = static_cast<double>(chain.size());
      return w;
    }
    const Worker& k = it->second;
    w.active_tokens = k.active_tokens;
    w.active_blocks = static_cast<double>(k.blocks.size());
    size_t fresh = 0;
    for (uint64_t h : chain) fresh += !k.blocks.contains(h);
    w.new_blocks = static_cast<double>(fresh);
    return w;
  }
  // The id of the request an event is about: the decision's, or for an unnamed one the oldest
  // unnamed request of the worker (for a first token: the oldest still in prefill).
  // REQUIRES: mu_ held.
  uint64_t IdLocked(const Decision& d, const FleetSnapshot& f, bool for_first_token) {
    if (d.request_id != 0) return d.request_id;
    if (d.instance >= f.size()) return 0;
    auto w = workers_.find(f.placement_seed(d.instance));
    if (w == workers_.end()) return 0;
    for (uint64_t id : w->second.unnamed) {
      auto q = requests_.find(id);
      if (!for_first_token || (q != requests_.end() && q->second.prefill_tokens > 0)) return id;
    }
    return 0;
  }
  // REQUIRES: mu_ held.
  void ReleaseLocked(uint64_t id) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    Request& q = it->second;
    if (auto w = workers_.find(q.seed); w != workers_.end()) {
      Worker& k = w->second;
      k.active_tokens = std::max(0.0, k.active_tokens - q.prefill_tokens);
      for (uint64_t h : q.blocks) {
        auto b = k.blocks.find(h);
        if (b != k.blocks.end() && --b->second == 0) k.blocks.erase(b);
      }
      if (id & kUnnamed) std::erase(k.unnamed, id);
    }
    requests_.erase(it);
  }
  void ForgetWorker(uint64_t seed) {
    std::lock_guard lock(mu_);
    workers_.erase(seed);
    std::erase_if(requests_, [seed](const auto& e) { return e.second.seed == seed; });
  }

  uint32_t block_tokens_;
  uint64_t max_tokens_;
  KvIndex reported_;  // internally locked
  Departures departures_;
  // Pick is const for callers and reads workers_ under mu_ (Load), hence mutable; the hooks
  // write them under it.
  mutable std::mutex mu_;                           // guards workers_, requests_, next_unnamed_
  std::unordered_map<uint64_t, Worker> workers_;    // by placement seed
  std::unordered_map<uint64_t, Request> requests_;  // by request id
  uint64_t next_unnamed_ = 1;
};

}  // namespace

double DynamoKvLogit(const DynamoWorkerLoad& w, double overlap_score_weight) {
  const double bs = w.block_size;
  // new_tokens = isl - overlap x block_size, clamped at 0 (Dynamo logs an error there).
  const double new_tokens = std::max(0.0, w.isl_tokens - static_cast<double>(w.overlap_blocks) * bs);
  const double prefill_blocks = (w.active_tokens + new_tokens) / bs;
  const double decode_blocks = w.active_blocks + w.new_blocks;
  return overlap_score_weight * prefill_blocks + decode_blocks;
}

std::unique_ptr<Policy> MakeDynamoKvPolicy(const RoutingOptions& o) { return std::make_unique<DynamoKvPolicy>(o); }

}  // namespace prefix_router
