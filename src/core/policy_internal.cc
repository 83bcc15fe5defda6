// Definitions for core/policy_internal.h: moved verbatim from policy.cc when it was split into one
// file per policy family.
#include "core/policy_internal.h"

#include <cmath>
#include <string>

#include "core/kv_index.h"
#include "core/placement.h"

namespace prefix_router::policy_internal {

std::span<uint32_t> Candidates(const RouteRequest& r, const FleetSnapshot& f, bool keep_excluded,
                               CandidateTotals* totals) {
  thread_local std::vector<uint32_t> buf;
  const std::span<const uint32_t> eligible = f.Eligible(r.served_name);
  if (buf.size() < eligible.size()) buf.resize(eligible.size());
  uint32_t* out = buf.data();
  size_t n = 0;
  const bool skip_excluded = !keep_excluded && !r.exclude.empty();
  CandidateTotals sums;
  for (uint32_t i : eligible) {
    const InstanceState& st = f.state(i);
    if (!st.routable()) continue;
    if (skip_excluded && IsExcluded(r, i)) continue;
    out[n++] = i;
    if (totals) {
      sums.in_flight += std::max<int32_t>(0, st.in_flight.load(std::memory_order_relaxed));
      sums.weight += f.weight(i);
    }
  }
  if (totals) *totals = sums;
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

Decision PickByCost(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> c,
                    std::span<const uint64_t> cached, uint64_t prompt_tokens, int32_t threshold, double load_weight,
                    std::span<const uint8_t> over_share, std::span<const double> queued) {
  // Two passes: the best (below the threshold first, then the lowest cost), then, only if several
  // candidates share it, the key's rendezvous score among those (one hash each): a decision
  // with one cheapest instance hashes nothing, where scoring ties as they are met would hash
  // every candidate tied with the best seen so far (half an idle fleet before the holder).
  thread_local std::vector<double> costs;
  thread_local std::vector<uint8_t> belows;
  costs.resize(c.size());
  belows.resize(c.size());
  // Plain pointers: the loop below would otherwise reload the thread-local vectors' addresses
  // for every candidate.
  double* const cost_of = costs.data();
  uint8_t* const below_of = belows.data();
  size_t best = 0;
  size_t tied = 0;  // candidates sharing the best (below, cost) so far
  uint64_t longest = 0;
  for (size_t k = 0; k < c.size(); ++k) {
    const uint32_t i = c[k];
    longest = std::max(longest, cached[k]);
    const InstanceState& st = f.state(i);
    const int32_t in_flight = st.in_flight.load(std::memory_order_relaxed);
    const bool below = in_flight < threshold && (over_share.empty() || over_share[k] == 0);
    const double uncached = prompt_tokens > cached[k] ? static_cast<double>(prompt_tokens - cached[k]) : 0;
    // Load(f, i, LoadMeasure::kPromptTokens), from the in-flight count read above.
    const double load = static_cast<double>(
        int64_t{std::max<int32_t>(0, in_flight)} +
        std::max<int64_t>(0, st.outstanding_tokens.load(std::memory_order_relaxed)));
    const double q = queued.empty() ? 0 : queued[k];
    const uint32_t weight = f.weight(i);
    // x / 1 == x exactly: the divisions are skipped for the default weight, not approximated.
    const double cost = weight == 1 ? uncached + q + load_weight * load
                                    : uncached + q / weight + load_weight * load / weight;
    cost_of[k] = cost;
    below_of[k] = below;
    if (k == 0 || (below && !below_of[best]) || (below == static_cast<bool>(below_of[best]) && cost < cost_of[best])) {
      best = k;
      tied = 1;
    } else if (below == static_cast<bool>(below_of[best]) && cost == cost_of[best]) {
      ++tied;
    }
  }
  if (tied > 1) {  // ties go to the key's rendezvous preference; equal scores to the first
    const uint64_t key = r.key.placement_hash();
    const bool best_below = belows[best];
    const double best_cost = costs[best];
    uint64_t best_score = PreferenceScore(key, f, c[best]);
    for (size_t k = best + 1; k < c.size(); ++k) {
      if (static_cast<bool>(belows[k]) != best_below || costs[k] != best_cost) continue;
      const uint64_t score = PreferenceScore(key, f, c[k]);
      if (score > best_score) {
        best = k;
        best_score = score;
      }
    }
  }
  const bool best_below = below_of[best];
  DecisionKind kind = !best_below               ? DecisionKind::kSaturated
                      : longest == 0            ? DecisionKind::kLeastOutstanding
                      : cached[best] == longest ? DecisionKind::kAffinity
                                                : DecisionKind::kOverflow;
  Decision d{c[best], kind, 0};
  d.uncached_tokens = prompt_tokens > cached[best] ? prompt_tokens - cached[best] : 0;
  return d;
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
