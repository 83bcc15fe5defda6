// Definitions for core/policy_internal.h: moved verbatim from policy.cc when it was split into one
// file per policy family.
#include "core/policy_internal.h"

#include <cassert>
#include <cmath>
#include <numeric>
#include <string>

#include "core/kv_index.h"
#include "core/placement.h"
#include "core/rendezvous_scan.h"

namespace prefix_router::policy_internal {

namespace {

// Candidates' pass over the eligible instances (when the array's totals cannot answer, below),
// specialised on what it must skip and sum: on 10,000 instances this pass was most of what a
// prefix-aware decision cost. kEveryInstance: `eligible` is 0..size-1, so the position is the
// index.
template <bool kSkipExcluded, bool kTotals, bool kUniform, bool kEveryInstance>
size_t FillCandidates(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> eligible, uint32_t* out,
                      CandidateTotals& sums) {
  size_t n = 0;
  int64_t in_flight = 0, weight = 0;
  const size_t count = eligible.size();
  for (size_t k = 0; k < count; ++k) {
    const auto i = kEveryInstance ? static_cast<uint32_t>(k) : eligible[k];
    const LiveLoad& st = f.live(i);
    if (!st.routable()) continue;
    if constexpr (kSkipExcluded) {
      if (IsExcluded(r, i)) continue;
    }
    out[n++] = i;
    if constexpr (kTotals) {
      in_flight += std::max<int32_t>(0, st.in_flight(std::memory_order_relaxed));
      if constexpr (!kUniform) weight += f.weight(i);
    }
  }
  if constexpr (kTotals) {
    sums.in_flight = in_flight;
    // Equal weights: their sum without reading each.
    sums.weight = kUniform ? (n == 0 ? 0 : int64_t{f.weight(out[0])} * static_cast<int64_t>(n)) : weight;
  }
  return n;
}

// FillCandidatesFor's answer when the candidates are the whole fleet, 0..size-1 (not written).
constexpr size_t kAllInstances = SIZE_MAX;

// FillCandidates for the given flags; kAllInstances when the candidates are 0..size-1.
template <bool kSkipExcluded, bool kTotals>
size_t FillCandidatesFor(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> eligible,
                         uint32_t* out, CandidateTotals& sums) {
  // Eligible instances are distinct indices below size(): as many as the fleet means all of them.
  const bool every = eligible.size() == f.size();
  if (every && !kSkipExcluded && f.dense_totals() != nullptr) {
    // The usual case at scale: the default pool of a fleet whose live loads are one array, every
    // instance routable and no count negative: the candidates are 0..size-1 and the array's
    // totals are theirs, kept by every change (fleet.h), so no instance is read.
    const LiveTotals& t = *f.dense_totals();
    if (t.unroutable.load(std::memory_order_relaxed) == 0 && (!kTotals || t.negative.load(std::memory_order_relaxed) == 0)) {
      if constexpr (kTotals) {
        sums.in_flight = t.in_flight.load(std::memory_order_relaxed);
        sums.weight = f.total_weight();
      }
      return kAllInstances;
    }
  }
  if (f.uniform_weights()) {
    return every ? FillCandidates<kSkipExcluded, kTotals, true, true>(r, f, eligible, out, sums)
                 : FillCandidates<kSkipExcluded, kTotals, true, false>(r, f, eligible, out, sums);
  }
  return every ? FillCandidates<kSkipExcluded, kTotals, false, true>(r, f, eligible, out, sums)
               : FillCandidates<kSkipExcluded, kTotals, false, false>(r, f, eligible, out, sums);
}

}  // namespace

std::span<const uint32_t> Candidates(const RouteRequest& r, const FleetSnapshot& f, bool keep_excluded,
                                     CandidateTotals* totals) {
  thread_local std::vector<uint32_t> buf;
  // 0..size-1 for whole fleets, written once per thread as the largest fleet grows (at 10,000
  // instances writing it per decision cost about 1 us of a 17 us decision).
  thread_local std::vector<uint32_t> all;
  const std::span<const uint32_t> eligible = f.Eligible(r.served_name);
  if (buf.size() < eligible.size()) buf.resize(eligible.size());
  uint32_t* out = buf.data();
  const bool skip_excluded = !keep_excluded && !r.exclude.empty();
  CandidateTotals sums;
  size_t n;
  if (skip_excluded) {
    n = totals ? FillCandidatesFor<true, true>(r, f, eligible, out, sums)
               : FillCandidatesFor<true, false>(r, f, eligible, out, sums);
  } else {
    n = totals ? FillCandidatesFor<false, true>(r, f, eligible, out, sums)
               : FillCandidatesFor<false, false>(r, f, eligible, out, sums);
  }
  if (totals) *totals = sums;
  if (n == kAllInstances) {
    if (all.size() < eligible.size()) {
      const size_t from = all.size();
      all.resize(eligible.size());
      std::iota(all.begin() + static_cast<std::ptrdiff_t>(from), all.end(), static_cast<uint32_t>(from));
    }
    return {all.data(), eligible.size()};
  }
  return {buf.data(), n};
}

std::optional<size_t> CandidatePosition(const FleetSnapshot& f, std::span<const uint32_t> c, uint64_t seed) {
  const std::optional<uint32_t> i = f.FindSeed(seed);
  if (!i) return std::nullopt;
  auto it = std::lower_bound(c.begin(), c.end(), *i);
  if (it == c.end() || *it != *i) return std::nullopt;
  return static_cast<size_t>(it - c.begin());
}

Status NoCandidate(const RouteRequest& r, const FleetSnapshot& f) {
  std::string what = r.served_name.empty() ? std::string("the default pool") : "'" + std::string(r.served_name) + "'";
  if (f.Eligible(r.served_name).empty()) return Status::Unavailable("no instance serves " + what);
  return Status::Unavailable("no available instance left for " + what);
}

void ShareMeter::Count(const FleetSnapshot& f, uint32_t i) {
  std::lock_guard lock(mu_);
  Sync(f);
  unit_ *= std::exp(1 / (kShareWindowPerInstance * f.size()));
  counts_[i] += unit_;
  if (unit_ > 1e200) {  // renormalise long before overflow
    for (double& c : counts_) c /= unit_;
    unit_ = 1;
  }
}

double ShareMeter::Read(const FleetSnapshot& f, std::span<const uint32_t> c, std::vector<double>& out) {
  out.resize(f.size());
  std::lock_guard lock(mu_);
  Sync(f);
  double total = 0;
  for (uint32_t i : c) total += out[i] = counts_[i] / unit_;
  return total;
}

void ShareMeter::Sync(const FleetSnapshot& f) {
  if (generation_ == f.generation()) return;
  std::unordered_map<uint64_t, double> old;
  double total = 0, weight = 0;
  for (size_t i = 0; i < seeds_.size(); ++i) old.emplace(seeds_[i], counts_[i]);
  std::vector<double> next(f.size(), -1);
  for (uint32_t i = 0; i < f.size(); ++i) {
    auto it = old.find(f.placement_seed(i));
    if (it == old.end()) continue;
    next[i] = it->second;
    total += it->second;
    weight += f.weight(i);
  }
  for (uint32_t i = 0; i < f.size(); ++i) {
    if (next[i] >= 0) continue;
    next[i] = weight > 0 ? total * f.weight(i) / weight : 0;  // a newcomer: fair share
  }
  seeds_.resize(f.size());
  for (uint32_t i = 0; i < f.size(); ++i) seeds_[i] = f.placement_seed(i);
  counts_ = std::move(next);
  generation_ = f.generation();
}

void Departures::Note(uint64_t seed) {
  std::lock_guard lock(mu_);
  known_.insert(seed);
}

std::vector<uint64_t> Departures::Left(const FleetSnapshot& f) {
  std::vector<uint64_t> left;
  std::lock_guard lock(mu_);
  if (f.generation() == generation_) return left;
  generation_ = f.generation();
  std::unordered_set<uint64_t> present;
  for (uint32_t i = 0; i < f.size(); ++i) present.insert(f.placement_seed(i));
  for (auto it = known_.begin(); it != known_.end();) {
    if (present.contains(*it)) {
      ++it;
    } else {
      left.push_back(*it);
      it = known_.erase(it);
    }
  }
  return left;
}

namespace {

// One candidate's rank in PickByCost: below the threshold (and not over its share) first, then
// the lowest cost. Inline and specialised (PickByCostLoop) so that the pass over 10,000
// candidates reads what it needs and branches on nothing else.
struct CostRank {
  bool below;
  double cost;
};
// kUniform: every weight is 1. `st` is instance i's LiveLoad.
template <bool kOverShare, bool kQueued, bool kUniform>
inline CostRank RankCandidate(const LiveLoad& st, const FleetSnapshot& f, uint32_t i, size_t k, uint64_t cached,
                              uint64_t prompt_tokens, int32_t threshold, double load_weight,
                              std::span<const uint8_t> over_share, std::span<const double> queued) {
  const int32_t in_flight = st.in_flight(std::memory_order_relaxed);
  bool below = in_flight < threshold;
  if constexpr (kOverShare) below = below && over_share[k] == 0;
  const double uncached = prompt_tokens > cached ? static_cast<double>(prompt_tokens - cached) : 0;
  // Load(f, i, LoadMeasure::kPromptTokens), from the in-flight count read above.
  const double load =
      static_cast<double>(int64_t{std::max<int32_t>(0, in_flight)} +
                          std::max<int64_t>(0, st.outstanding_tokens().load(std::memory_order_relaxed)));
  const double q = kQueued ? queued[k] : 0;
  if constexpr (kUniform) return {below, uncached + q + load_weight * load};
  // x / 1 == x exactly: the divisions are skipped for the default weight, not approximated.
  const uint32_t weight = f.weight(i);
  return {below, weight == 1 ? uncached + q + load_weight * load : uncached + q / weight + load_weight * load / weight};
}

// PickByCost's passes for one combination of inputs (share flags present, queued tokens present,
// uniform weights, and kIdentity: the candidates are every instance of a dense fleet, so
// position k is instance k and its LiveLoad is the array's k-th). Two passes: the best (below the
// threshold first, then the lowest cost), then, only if several candidates share it, the key's
// rendezvous score among those: a decision with one cheapest instance hashes nothing. The first
// pass keeps the positions tied with the best so far (the list restarts at each new best), so
// the second visits only those (with equal weights, a vector scan: core/rendezvous_scan.h).
struct CostPick {
  size_t best;      // position in c
  bool below;       // its rank
  uint64_t longest; // the most cached tokens of any candidate
};
template <bool kOverShare, bool kQueued, bool kUniform, bool kIdentity>
CostPick PickByCostLoop(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> c,
                        std::span<const uint64_t> cached, uint64_t prompt_tokens, int32_t threshold,
                        double load_weight, std::span<const uint8_t> over_share, std::span<const double> queued) {
  const size_t n = c.size();
  const LiveLoad* const dense = kIdentity ? f.dense_live() : nullptr;
  const auto rank = [&](size_t k) {
    const uint32_t i = kIdentity ? static_cast<uint32_t>(k) : c[k];
    return RankCandidate<kOverShare, kQueued, kUniform>(kIdentity ? dense[k] : f.live(i), f, i, k, cached[k],
                                                        prompt_tokens, threshold, load_weight, over_share, queued);
  };
  // The positions sharing the best (below, cost) so far, in order: the tie pass reads only them.
  thread_local std::vector<uint32_t> tied_buf;
  if (tied_buf.size() < n) tied_buf.resize(n);
  uint32_t* const tied = tied_buf.data();
  uint32_t* tie_end = tied;
  *tie_end++ = 0;
  size_t best = 0;
  CostRank best_rank = rank(0);
  uint64_t longest = cached[0];
  for (size_t k = 1; k < n; ++k) {
    longest = std::max(longest, cached[k]);
    const CostRank x = rank(k);
    if ((x.below && !best_rank.below) || (x.below == best_rank.below && x.cost < best_rank.cost)) {
      best = k;
      best_rank = x;
      tie_end = tied;
      *tie_end++ = static_cast<uint32_t>(k);
    } else if (x.below == best_rank.below && x.cost == best_rank.cost) {
      *tie_end++ = static_cast<uint32_t>(k);
    }
  }
  const auto ties = static_cast<size_t>(tie_end - tied);
  if (ties <= 1) return {best, best_rank.below, longest};
  // Ties go to the key's rendezvous preference.
  const uint64_t key = r.key.placement_hash();
  if (f.uniform_weights()) {
    // c is in index order, so the scan's tie-break (the lower index) is the first position.
    const uint32_t* instances = tied;  // kIdentity: the positions are the instances
    if constexpr (!kIdentity) {
      thread_local std::vector<uint32_t> tied_instances;
      if (tied_instances.size() < ties) tied_instances.resize(ties);
      for (size_t j = 0; j < ties; ++j) tied_instances[j] = c[tied[j]];
      instances = tied_instances.data();
    }
    best = tied[rendezvous_scan::Best().best(key, f.placement_seeds(), instances, ties)];
  } else {  // equal scores to the first
    uint64_t best_score = PreferenceScore(key, f, c[best]);
    for (size_t j = 1; j < ties; ++j) {
      const uint64_t score = PreferenceScore(key, f, c[tied[j]]);
      if (score > best_score) {
        best = tied[j];
        best_score = score;
      }
    }
  }
  return {best, best_rank.below, longest};
}

}  // namespace

Decision PickByCost(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> c,
                    std::span<const uint64_t> cached, uint64_t prompt_tokens, int32_t threshold, double load_weight,
                    std::span<const uint8_t> over_share, std::span<const double> queued) {
  // `uniform`: every weight is 1 (equal weights of another value still divide the load terms).
  const bool share = !over_share.empty(), q = !queued.empty(), uniform = f.uniform_weights() && f.weight(c[0]) == 1;
  // kIdentity: c is every instance of a dense fleet (c ascending and as long as the fleet).
  const bool identity = f.dense_live() != nullptr && c.size() == f.size();
  const auto loop = [&]<bool S, bool Q, bool U>() {
    return identity
               ? PickByCostLoop<S, Q, U, true>(r, f, c, cached, prompt_tokens, threshold, load_weight, over_share, queued)
               : PickByCostLoop<S, Q, U, false>(r, f, c, cached, prompt_tokens, threshold, load_weight, over_share, queued);
  };
  CostPick p;
  if (share) {
    if (q) p = uniform ? loop.template operator()<true, true, true>() : loop.template operator()<true, true, false>();
    else p = uniform ? loop.template operator()<true, false, true>() : loop.template operator()<true, false, false>();
  } else {
    if (q) p = uniform ? loop.template operator()<false, true, true>() : loop.template operator()<false, true, false>();
    else p = uniform ? loop.template operator()<false, false, true>() : loop.template operator()<false, false, false>();
  }
  DecisionKind kind = !p.below                     ? DecisionKind::kSaturated
                      : p.longest == 0              ? DecisionKind::kLeastOutstanding
                      : cached[p.best] == p.longest ? DecisionKind::kAffinity
                                                    : DecisionKind::kOverflow;
  Decision d{c[p.best], kind, 0};
  d.uncached_tokens = prompt_tokens > cached[p.best] ? prompt_tokens - cached[p.best] : 0;
  return d;
}

namespace {
std::vector<uint64_t>& CachedTokensBuffer() {
  thread_local std::vector<uint64_t> tokens;
  return tokens;
}
std::vector<size_t>& CachedTokensTouched() {
  thread_local std::vector<size_t> touched;
  return touched;
}
thread_local bool cached_tokens_in_use = false;
}  // namespace

CachedTokens::CachedTokens(size_t candidates)
    : tokens_(CachedTokensBuffer()), touched_(CachedTokensTouched()), size_(candidates) {
  assert(!cached_tokens_in_use && "one CachedTokens per thread at a time");
  cached_tokens_in_use = true;
  if (tokens_.size() < candidates) tokens_.resize(candidates, 0);  // new positions are zeros
  touched_.clear();
}

CachedTokens::~CachedTokens() {
  for (size_t k : touched_) tokens_[k] = 0;
  touched_.clear();
  cached_tokens_in_use = false;
}

void PrefillQueue::Add(uint64_t request_id, uint64_t seed, double tokens) {
  if (request_id == 0 || tokens <= 0) return;
  std::lock_guard lock(mu_);
  if (!requests_.try_emplace(request_id, Entry{seed, tokens}).second) return;
  queued_[seed] += tokens;
}

void PrefillQueue::Release(uint64_t request_id) {
  if (request_id == 0) return;
  std::lock_guard lock(mu_);
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  auto q = queued_.find(it->second.seed);
  if (q != queued_.end()) {
    q->second -= it->second.tokens;
    if (q->second <= 0.5) queued_.erase(q);
  }
  requests_.erase(it);
}

std::span<const double> PrefillQueue::Read(const FleetSnapshot& f, std::span<const uint32_t> c) const {
  thread_local std::vector<double> out;
  std::lock_guard lock(mu_);
  if (queued_.empty()) return {};
  out.assign(c.size(), 0);
  if (queued_.size() < c.size()) {
    for (const auto& [seed, tokens] : queued_) {
      if (auto k = CandidatePosition(f, c, seed)) out[*k] = tokens;
    }
  } else {
    for (size_t k = 0; k < c.size(); ++k) {
      auto it = queued_.find(f.placement_seed(c[k]));
      if (it != queued_.end()) out[k] = it->second;
    }
  }
  return {out.data(), out.size()};
}

void PrefillQueue::Forget(uint64_t seed) {
  std::lock_guard lock(mu_);
  queued_.erase(seed);
  std::erase_if(requests_, [&](const auto& kv) { return kv.second.seed == seed; });
}

std::span<const uint8_t> CostShareBound::Mark(const FleetSnapshot& f, std::span<const uint32_t> c,
                                              const CandidateTotals& totals) const {
  thread_local std::vector<uint8_t> over;
  thread_local std::vector<double> recent;
  const int64_t load = totals.in_flight;
  const auto weight = static_cast<double>(totals.weight);
  if (load < static_cast<int64_t>(c.size()) || c.size() < 2) return {};
  const double total = meter_.Read(f, c, recent);
  const double fair_per_weight = total / weight;
  const double limit_per_weight = (1 + kShareTolerance) * fair_per_weight;
  const double floor_per_weight = (1 - kShareTolerance) * fair_per_weight;
  over.assign(c.size(), 0);
  bool any = false, under = false;
  for (size_t k = 0; k < c.size(); ++k) {
    const uint32_t i = c[k];
    const double w = f.weight(i);
    over[k] = recent[i] > limit_per_weight * w + kShareSlack;
    any |= over[k] != 0;
    under |= recent[i] < floor_per_weight * w - kShareSlack;
  }
  if (under) {
    // An instance is as far below its share: those above 1.05 x their fair share step aside
    // too, so the requests they would have taken refill it (the cost still chooses among the
    // rest). Balancing work, the cost alone lets an instance that holds long prompts fall
    // far below its share of requests (the Mooncake trace at 3x: 12.4% on 7 instances).
    for (size_t k = 0; k < c.size(); ++k) {
      const uint32_t i = c[k];
      if (recent[i] > limit_per_weight * f.weight(i)) over[k] = 1;
      any |= over[k] != 0;
    }
  }
  if (!any) return {};
  return {over.data(), over.size()};
}

std::span<const uint64_t> PromptChains::At(uint32_t block_size) {
  for (auto& [bs, chain] : chains_) {
    if (bs == block_size) return chain;
  }
  chains_.emplace_back(block_size, std::vector<uint64_t>());
  KvBlockChain(r_.prompt_tokens, block_size, max_tokens_ / block_size, seed_, chains_.back().second);
  return chains_.back().second;
}

}  // namespace prefix_router::policy_internal
