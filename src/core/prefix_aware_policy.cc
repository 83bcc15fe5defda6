#include "core/prefix_aware_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/key_demand.h"
#include "core/key_homes.h"
#include "core/placement.h"
#include "core/policy_internal.h"
#include "core/rendezvous_scan.h"
#include "core/rng.h"

namespace prefix_router {
namespace {

using policy_internal::Candidates;
using policy_internal::InFlight;
using policy_internal::IsExcluded;
using policy_internal::kShareSlack;
using policy_internal::kShareTolerance;
using policy_internal::Load;
using policy_internal::NoCandidate;
using policy_internal::ShareMeter;

class PrefixAwarePolicy final : public Policy {
 public:
  explicit PrefixAwarePolicy(const RoutingOptions& o)
      : threshold_(static_cast<int32_t>(o.concurrency_threshold)),
        spill_(o.spill),
        balance_factor_(o.balance_factor),
        measure_(o.load_measure) {}

  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const override {
    policy_internal::CandidateTotals totals;
    auto c = Candidates(r, f, true, balance_factor_ > 0 ? &totals : nullptr);
    if (c.empty()) return NoCandidate(r, f);
    const uint64_t key = r.key.placement_hash();
    const KeyDemand::Reading demand = balance_factor_ > 0 ? demand_.Read(key) : KeyDemand::Reading{};
    const Limits limits = MakeLimits(f, c, totals, demand.reuse);
    if (balance_factor_ > 0) {
      if (limits.busy) {
        if (auto d = PickReplica(r, f, c, limits, key, demand.share)) return *d;
      }
      const bool new_key_by_load = !demand.seen && r.exclude.empty() && PlacedByLoad(key, demand.reuse);
      return PickBalanced(r, f, c, limits, key, new_key_by_load);
    }
    if (r.exclude.empty()) {  // fast path: the first choice usually takes it, else the second
      const TopTwo top = TwoMostPreferred(key, f, c);
      if (InFlight(f, top.first) < limits.For(f, top.first)) return Decision{top.first, DecisionKind::kAffinity, 0};
      // PickInOrder's rank 1 without a balance factor: no share bound, so a next-preferred
      // spill takes the second choice when it is below its limit.
      if (spill_ == SpillMode::kNextPreferred && top.second != UINT32_MAX &&
          InFlight(f, top.second) < limits.For(f, top.second)) {
        return Decision{top.second, DecisionKind::kOverflow, 1};
      }
    }
    return PickInOrder(r, f, c, limits, key);
  }
  std::string_view name() const override { return StrategyName(Strategy::kPrefixAware); }
  void OnDispatched(const RouteRequest& r, const Decision& d, const FleetSnapshot& f) override {
    if (balance_factor_ <= 0) return;
    shares_.Count(f, d.instance);
    demand_.Count(r.key.placement_hash(), ShareMeter::kShareWindowPerInstance * f.size());
  }

 private:
  struct Limits;

  // Replication of a hot key (with a balance factor, once the pool is busy): a key that carries
  // more of the recent dispatches than one instance's fair share (plus the share tolerance) has
  // r = ceil(share x instances / (1 + tolerance)) homes, the first r instances of its preference
  // order, and each request goes to the least loaded of them that is below its limit (ties to the
  // better rank). Every home keeps the key's prefix warm, and the key's traffic is spread instead
  // of moving whole from one overloaded home to the next (which, with one key for all traffic,
  // sent everything to one instance at a time). As the key cools its share falls and so does r.
  // r counts homes as if they carried this key alone; when they also carry other hot keys (the
  // homes of keys placed independently overlap), the least loaded home is above its fair share
  // of recent dispatches, and the next instance of the preference order joins the homes, until
  // one below its fair share is found. Without this, the overlap overloaded the shared homes and
  // their traffic spilled to instances cold for the key (agentic with cache_key=tenant: 17% of
  // requests spilled on seed 5, P50 1.10 x least-outstanding-requests; 0.1% with it, 0.96 x).
  // Nullopt when the key needs one home, or when all its homes are at their limits (it then
  // spills as any key does, without moving: its homes are already several).
  std::optional<Decision> PickReplica(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> c,
                                      const Limits& limits, uint64_t key, double share) const {
    const double n = static_cast<double>(c.size());
    const auto homes = static_cast<uint32_t>(std::min(n, std::ceil(share * n / (1 + kShareTolerance) - 1e-9)));
    if (homes < 2) return std::nullopt;
    PreferenceOrder& order = Order(key, f, c);
    uint32_t best = LeastLoadedRank(r, f, order, homes, limits);
    for (uint32_t count = homes; best != UINT32_MAX && count < c.size() && !limits.AtMostFairShare(f, order[best]);) {
      best = LeastLoadedRank(r, f, order, ++count, limits);
    }
    if (r.exclude.empty()) homes_.Erase(key);  // replicated: no single moved home
    if (best == UINT32_MAX) return std::nullopt;
    return Decision{order[best], DecisionKind::kAffinity, best};
  }

  // The key's preference order over `c`, extended as far as it is read (a per-thread buffer,
  // valid until this thread's next call).
  static PreferenceOrder& Order(uint64_t key, const FleetSnapshot& f, std::span<const uint32_t> c) {
    thread_local PreferenceOrder order;
    order.Reset(key, f, c);
    return order;
  }

  // A key with no recent dispatch (KeyDemand: none within about kReuseWindows windows) and no
  // moved home has nothing cached that the policy knows of: its first choice would hold it only
  // by chance, so sending it there buys no hit and costs balance (on traffic that never repeats
  // prefix-aware's P90 was 4-7% above least-outstanding-requests'). It goes to the least loaded
  // candidate below its limit (load per weight, ties to the better rank, so an idle pool keeps
  // the first choice). The key's home stays its first choice (nothing is recorded in KeyHomes):
  // placement by load depends on each gateway's own view of the load, and a home recorded from
  // it would differ from one gateway replica to the next and stay so (with 4 gateways on
  // long-context, hit rate 78.6% -> 68.5%), while the rendezvous home is the same for all. A key
  // that does repeat then moves once, to its first choice, at its second request. Nullopt when
  // every candidate is at its limit (the saturated fallback then decides). Called by
  // PickBalanced for a key without a moved home.
  //
  // Only a part of new keys is placed so, 1 - reuse of them (PlacedByLoad, by the key's hash, so
  // replicas agree which): where traffic repeats (reuse near 1) new keys keep their first choice
  // and lose no hit; where it does not, balance decides, as the balance factor scales with reuse.
  static bool PlacedByLoad(uint64_t key, double reuse) {
    const double u = static_cast<double>(Mix64(key ^ 0x6e65772d6b657973ull) >> 11) * 0x1.0p-53;
    return u >= reuse;
  }
  std::optional<Decision> PlaceNewKey(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> c,
                                      const Limits& limits, uint64_t key) const {
    PreferenceOrder& order = Order(key, f, c);
    const uint32_t best = LeastLoadedRank(r, f, order, static_cast<uint32_t>(c.size()), limits);
    if (best == UINT32_MAX) return std::nullopt;
    return Decision{order[best], DecisionKind::kLeastOutstanding, best};
  }

  // Among c[0..count) (in preference order): the rank of the least loaded untried instance below
  // its limit (load per weight, ties to the better rank); UINT32_MAX when there is none.
  uint32_t LeastLoadedRank(const RouteRequest& r, const FleetSnapshot& f, PreferenceOrder& order, uint32_t count,
                           const Limits& limits) const {
    if (count == order.size()) {  // all of them: one pass, no ordering
      uint32_t best = UINT32_MAX;
      uint64_t best_score = 0;
      double best_load = 0;
      order.ForEachUnordered([&](uint32_t i, uint64_t score) {
        if (IsExcluded(r, i) || InFlight(f, i) >= limits.For(f, i)) return;
        const double load = static_cast<double>(Load(f, i, measure_)) / f.weight(i);
        if (best == UINT32_MAX || load < best_load ||
            (load == best_load && PreferenceOrder::Before(i, score, best, best_score))) {
          best = i;
          best_score = score;
          best_load = load;
        }
      });
      return best == UINT32_MAX ? UINT32_MAX : order.RankOf(best, best_score);
    }
    uint32_t best = UINT32_MAX;
    double best_load = 0;
    for (uint32_t rank = 0; rank < count; ++rank) {
      const uint32_t i = order[rank];
      if (IsExcluded(r, i) || InFlight(f, i) >= limits.For(f, i)) continue;
      const double load = static_cast<double>(Load(f, i, measure_)) / f.weight(i);
      if (best == UINT32_MAX || load < best_load) {
        best = rank;
        best_load = load;
      }
    }
    return best;
  }

  // Bounded load with sticky homes: a key lives on its first choice until that instance is
  // over its limit when one of the key's requests arrives; the key then moves, for good, to
  // where the spill sends it (next preferred or least loaded below its limit), so its later
  // requests find their prefix cached there instead of spilling one by one. It moves again
  // only if its new home is over its limit in turn; it goes back to its first choice when that
  // has room again at a later spill, or when the table forgets it.
  // `new_key_by_load`: a new key that PlaceNewKey places when it has no moved home.
  Result<Decision> PickBalanced(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> c,
                                const Limits& limits, uint64_t key, bool new_key_by_load) const {
    if (auto home_seed = homes_.Find(key)) {
      if (auto home = FindHome(f, c, key, *home_seed)) {
        if (!IsExcluded(r, home->instance) && InFlight(f, home->instance) < limits.For(f, home->instance)) {
          return Decision{home->instance, DecisionKind::kAffinity, home->rank};
        }
      }
    } else if (new_key_by_load) {
      if (auto d = PlaceNewKey(r, f, c, limits, key)) return *d;
    } else if (r.exclude.empty()) {
      // The first choice usually takes it (PickInOrder's rank 0, without ordering the rest; the
      // key has no moved home to erase).
      const uint32_t top = MostPreferred(key, f, c);
      if (InFlight(f, top) < limits.For(f, top)) return Decision{top, DecisionKind::kAffinity, 0};
    }
    auto d = PickInOrder(r, f, c, limits, key);
    if (!d.ok()) return d;
    if (!r.exclude.empty()) return d;  // a retry after a failure is not a spill: no move
    if (d->kind == DecisionKind::kAffinity && d->rank == 0) {
      homes_.Erase(key);
    } else if (d->kind != DecisionKind::kSaturated) {
      homes_.Set(key, f.placement_seed(d->instance));
    }
    return d;
  }

  // The candidate with placement seed `home_seed` and its rank in the key's order; nullopt when
  // it is not a candidate. With uniform weights its score follows from the seed alone: it is
  // found by its seed and ranked by counting the candidates that score higher.
  struct Home {
    uint32_t instance;
    uint32_t rank;
  };
  static std::optional<Home> FindHome(const FleetSnapshot& f, std::span<const uint32_t> c, uint64_t key,
                                      uint64_t home_seed) {
    if (!f.uniform_weights()) {
      for (uint32_t i : c) {
        if (f.placement_seed(i) == home_seed) return Home{i, RankOf(key, f, c, i)};
      }
      return std::nullopt;
    }
    const std::optional<size_t> at = policy_internal::CandidatePosition(f, c, home_seed);
    if (!at) return std::nullopt;
    // Its rank: the candidates scoring higher (a vector scan, core/rendezvous_scan.h).
    const size_t before = rendezvous_scan::Best().count_above(key, f.placement_seeds(), c.data(), c.size(),
                                                               RendezvousHash(key, home_seed), home_seed);
    return Home{c[*at], static_cast<uint32_t>(before)};
  }

  static uint32_t RankOf(uint64_t key, const FleetSnapshot& f, std::span<const uint32_t> c, uint32_t i) {
    const uint64_t score = PreferenceScore(key, f, i);
    uint32_t rank = 0;
    for (uint32_t j : c) rank += j != i && PreferenceScore(key, f, j) > score;
    return rank;
  }

  Result<Decision> PickInOrder(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> cs,
                               const Limits& limits, uint64_t key) const {
    // Read in preference order: extended only as far as the loop below goes (usually a few
    // ranks); the scans over every candidate after it do not order them.
    PreferenceOrder& c = Order(key, f, cs);
    // In overload (the pool's mean above the threshold, so limits follow the mean) every
    // instance sits near its limit, and the next preferred one below it is just under: a key
    // moved there moves again at its next spill, each move a cold prefill that deepens the
    // overload (at 300% of random's saturation, P50 17.5 s). The least loaded instance gives the
    // moved key the most room, and the key stays there (0.086 s).
    const bool least_loaded = spill_ == SpillMode::kLeastLoaded || limits.Overloaded();
    // First untried instance in preference order that is below its limit.
    bool passed_full = false;  // a better-ranked untried instance was at its limit
    uint32_t first_untried_rank = UINT32_MAX;
    uint32_t spill_rank = UINT32_MAX;  // next preferred below its limit but above its fair share
    bool share_spill = false;          // the first choice is over its share (not just busy)
    for (uint32_t rank = 0; rank < c.size(); ++rank) {
      if (IsExcluded(r, c[rank])) continue;
      if (first_untried_rank == UINT32_MAX) first_untried_rank = rank;
      if (InFlight(f, c[rank]) < limits.For(f, c[rank])) {
        if (!passed_full) return Decision{c[rank], DecisionKind::kAffinity, rank};
        if (least_loaded) break;  // least-loaded spill: choose below
        // Next preferred. When the first choice is over its share the key goes to the instance
        // furthest below its share (chosen after this loop); when it is only busy, to the
        // second choice unless that is above its fair share, else to the next one below its
        // limit, so that keys moved off busy instances refill the ones that get too few.
        if (share_spill) continue;
        if (rank > 1 || limits.AtMostFairShare(f, c[rank])) {
          return Decision{c[rank], DecisionKind::kOverflow, rank};
        }
        if (spill_rank == UINT32_MAX) spill_rank = rank;
      } else if (!passed_full && limits.OverShare(f, c[rank])) {
        share_spill = true;
      }
      passed_full = true;
    }
    if (share_spill && !least_loaded) {
      // The first choice is over its share: the key moves to the instance furthest below its
      // fair share (among those below their limits), ties to the better rank.
      uint32_t best = UINT32_MAX;
      uint64_t best_score = 0;
      double best_share = 0;
      c.ForEachUnordered([&](uint32_t i, uint64_t score) {
        if (IsExcluded(r, i) || InFlight(f, i) >= limits.For(f, i)) return;
        const double share = limits.RecentPerWeight(f, i);
        if (best == UINT32_MAX || share < best_share ||
            (share == best_share && PreferenceOrder::Before(i, score, best, best_score))) {
          best = i;
          best_score = score;
          best_share = share;
        }
      });
      if (best != UINT32_MAX) return Decision{best, DecisionKind::kOverflow, c.RankOf(best, best_score)};
    }
    if (spill_rank != UINT32_MAX) return Decision{c[spill_rank], DecisionKind::kOverflow, spill_rank};
    if (first_untried_rank == UINT32_MAX) return NoCandidate(r, f);
    // Least loaded untried instance; ties go to the better rank. Below its limit it is an
    // overflow (least-loaded spill), otherwise every candidate is full: saturated. With the
    // prompt-tokens measure, instances below their limit come first (load ranks by work, the
    // limit counts requests).
    // (Every untried instance: those ranked before first_untried_rank were all tried.)
    const bool by_work = measure_ != LoadMeasure::kRequests;
    uint32_t best = UINT32_MAX;
    uint64_t best_score = 0;
    bool best_below = false;
    int64_t best_load = std::numeric_limits<int64_t>::max();
    c.ForEachUnordered([&](uint32_t i, uint64_t score) {
      if (IsExcluded(r, i)) return;
      const bool below = by_work && InFlight(f, i) < limits.For(f, i);
      const int64_t load = by_work ? Load(f, i, measure_) : InFlight(f, i);
      if (best == UINT32_MAX || (below && !best_below) ||
          (below == best_below &&
           (load < best_load || (load == best_load && PreferenceOrder::Before(i, score, best, best_score))))) {
        best = i;
        best_score = score;
        best_load = load;
        best_below = below;
      }
    });
    const DecisionKind kind = InFlight(f, best) < limits.For(f, best) ? DecisionKind::kOverflow : DecisionKind::kSaturated;
    return Decision{best, kind, c.RankOf(best, best_score)};
  }

  // Per-instance in-flight limit: the concurrency threshold, and with a balance factor also
  // the bounded-load cap ceil(factor * (in-flight over the candidates + 1) * weight / total
  // weight) (consistent hashing with bounded loads, as HAProxy's hash-balance-factor), but
  // never below kMinBalanceCap: at low load the cap would otherwise be 1 or 2 and move keys
  // whenever two of their requests overlap. That floor, like the factor, only protects
  // affinity, so it shrinks with reuse too: ceil(kMinBalanceCap x reuse), at least 1.
  static constexpr int32_t kMinBalanceCap = 4;
  struct Limits {
    int32_t threshold;
    double per_weight = 0;  // 0 = no balance cap
    // With a balance factor: the candidates' mean in-flight requests per unit of weight, which
    // raises the threshold when the whole pool is above it (see For).
    double mean_per_weight = 0;
    bool busy = false;  // on average at least one request in flight per candidate
    int32_t min_cap = kMinBalanceCap;
    const std::vector<double>* recent = nullptr;  // recent dispatches per instance (share bound)
    double share_limit_per_weight = 0;
    double fair_per_weight = 0;
    double RecentPerWeight(const FleetSnapshot& f, uint32_t i) const {
      return recent ? (*recent)[i] / f.weight(i) : 0;
    }
    bool AtMostFairShare(const FleetSnapshot& f, uint32_t i) const {
      return !recent || (*recent)[i] <= fair_per_weight * f.weight(i);
    }
    bool Overloaded() const { return per_weight > 0 && (1 + kShareTolerance) * mean_per_weight > threshold; }
    bool OverShare(const FleetSnapshot& f, uint32_t i) const {
      return recent && (*recent)[i] > share_limit_per_weight * f.weight(i) + kShareSlack;
    }
    int32_t For(const FleetSnapshot& f, uint32_t i) const {
      if (per_weight <= 0) return threshold;
      if (OverShare(f, i)) return 0;
      const double w = f.weight(i);
      const double cap = std::ceil(per_weight * w);
      // The threshold is relative to the pool's load: when every instance is above the
      // configured threshold (overload), a fixed threshold would call them all full and send
      // every request to the least loaded instance, scattering keys over cold caches; prefill
      // then slows, queues grow and the pool sinks further. Above the mean (plus the share
      // tolerance) an instance is still full, so the spill rules keep working.
      const double relative = std::ceil((1 + kShareTolerance) * mean_per_weight * w);
      const int32_t limit = std::max<int32_t>(threshold, static_cast<int32_t>(relative));
      return std::min<int32_t>(limit, std::max<int32_t>(min_cap, static_cast<int32_t>(cap)));
    }
  };
  // `reuse`: the part of recent dispatches whose key repeated a recent one (KeyDemand).
  // REQUIRES: `totals` are c's (Candidates)
  Limits MakeLimits(const FleetSnapshot& f, std::span<const uint32_t> c, const policy_internal::CandidateTotals& totals,
                    double reuse) const {
    Limits l{threshold_};
    if (balance_factor_ <= 0) return l;
    const int64_t load = totals.in_flight, weight = totals.weight;
    // The balance factor buys cache hits with imbalance. Traffic whose keys do not repeat gets
    // no hits for it, only the imbalance, so the factor shrinks towards 1 (perfect balance,
    // least-outstanding behaviour) with the part of the traffic that repeats a recent key:
    // F' = 1 + (F - 1) x reuse.
    reuse = std::clamp(reuse, 0.0, 1.0);
    const double factor = 1 + (balance_factor_ - 1) * reuse;
    l.min_cap = std::max<int32_t>(1, static_cast<int32_t>(std::ceil(kMinBalanceCap * reuse - 1e-9)));
    l.per_weight = std::max(1.0, factor) * static_cast<double>(load + 1) / static_cast<double>(weight);
    l.mean_per_weight = static_cast<double>(load + 1) / static_cast<double>(weight);
    // The share bound and replication apply once the pool is busy (on average a request in
    // flight per instance): at lower loads queues are empty, balance costs hits and buys nothing.
    l.busy = load >= static_cast<int64_t>(c.size());
    if (!l.busy) return l;
    thread_local std::vector<double> recent;
    const double total = shares_.Read(f, c, recent);
    l.recent = &recent;
    l.fair_per_weight = total / static_cast<double>(weight);
    l.share_limit_per_weight = (1 + kShareTolerance) * l.fair_per_weight;
    return l;
  }

  int32_t threshold_;
  SpillMode spill_;
  double balance_factor_;
  LoadMeasure measure_;
  // Pick is const for callers (safe to share across threads), not pure: with a balance factor it
  // records and erases moved keys in homes_, and reading shares_ remaps it to a new snapshot.
  // OnDispatched counts into shares_ and demand_. Each is internally locked (KeyHomes by shard,
  // ShareMeter and KeyDemand by one mutex), so concurrent picks and hooks are safe.
  mutable KeyHomes homes_;
  mutable ShareMeter shares_;
  mutable KeyDemand demand_;
};

}  // namespace

std::unique_ptr<Policy> MakePrefixAwarePolicy(const RoutingOptions& o) {
  return std::make_unique<PrefixAwarePolicy>(o);
}

}  // namespace prefix_router
