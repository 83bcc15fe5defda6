#include "core/policy.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <deque>
#include <cmath>
#include <optional>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/block_index.h"
#include "core/kv_index.h"
#include "core/key_demand.h"
#include "core/key_homes.h"
#include "core/placement.h"

namespace prefix_router {
namespace {

std::string Range(uint32_t lo, uint32_t hi) {
  return std::to_string(lo) + ".." + std::to_string(hi);
}

bool IsExcluded(const RouteRequest& r, uint32_t i) {
  return std::find(r.exclude.begin(), r.exclude.end(), i) != r.exclude.end();
}

int32_t InFlight(const FleetSnapshot& f, uint32_t i) {
  return f.state(i).in_flight.load(std::memory_order_relaxed);
}

// The load compared where "least loaded" decides: in-flight requests, or their estimated prompt
// tokens plus one per request (so that requests with empty prompts still count).
// With the engine measure, the engine's reported running and waiting requests plus the requests
// sent since that report (the file comment of policy.h).
int64_t Load(const FleetSnapshot& f, uint32_t i, LoadMeasure m) {
  const int64_t requests = std::max<int32_t>(0, InFlight(f, i));
  if (m == LoadMeasure::kRequests) return requests;
  const InstanceState& st = f.state(i);
  if (m == LoadMeasure::kEngine) {
    const int32_t running = st.engine_running.load(std::memory_order_relaxed);
    const int32_t waiting = st.engine_waiting.load(std::memory_order_relaxed);
    if (running < 0 && waiting < 0) return requests;
    const uint64_t sent = st.dispatched.load(std::memory_order_relaxed);
    const uint64_t at_report = st.engine_report_dispatched.load(std::memory_order_relaxed);
    const int64_t since = sent > at_report ? static_cast<int64_t>(sent - at_report) : 0;
    return int64_t{std::max(0, running)} + std::max(0, waiting) + since;
  }
  return requests + std::max<int64_t>(0, st.outstanding_tokens.load(std::memory_order_relaxed));
}

// Eligible, available candidates into a per-thread buffer (no allocation once warm).
// Excluded instances are kept when `keep_excluded` (prefix-aware ranks count them).
std::span<uint32_t> Candidates(const RouteRequest& r, const FleetSnapshot& f, bool keep_excluded) {
  thread_local std::vector<uint32_t> buf;
  buf.clear();
  for (uint32_t i : f.Eligible(r.served_name)) {
    if (!f.state(i).routable()) continue;
    if (!keep_excluded && !r.exclude.empty() && IsExcluded(r, i)) continue;
    buf.push_back(i);
  }
  return {buf.data(), buf.size()};
}

Status NoCandidate(const RouteRequest& r, const FleetSnapshot& f) {
  std::string what = r.served_name.empty() ? std::string("the default pool")
                                           : "'" + std::string(r.served_name) + "'";
  if (f.Eligible(r.served_name).empty()) return Status::Unavailable("no instance serves " + what);
  return Status::Unavailable("no available instance left for " + what);
}

class RandomPolicy final : public Policy {
 public:
  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng& rng) const override {
    auto c = Candidates(r, f, false);
    if (c.empty()) return NoCandidate(r, f);
    if (f.uniform_weights()) return Decision{c[rng.Uniform(c.size())], DecisionKind::kRandom, 0};
    uint64_t total = 0;
    for (uint32_t i : c) total += f.spec(i).weight;
    uint64_t x = static_cast<uint64_t>(rng.NextDouble() * static_cast<double>(total));
    for (uint32_t i : c) {
      if (x < f.spec(i).weight) return Decision{i, DecisionKind::kRandom, 0};
      x -= f.spec(i).weight;
    }
    return Decision{c.back(), DecisionKind::kRandom, 0};
  }
  std::string_view name() const override { return "random"; }
};

class LeastOutstandingPolicy final : public Policy {
 public:
  explicit LeastOutstandingPolicy(LoadMeasure measure) : measure_(measure) {}
  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng& rng) const override {
    auto c = Candidates(r, f, false);
    if (c.empty()) return NoCandidate(r, f);
    uint32_t best = c[0];
    uint32_t ties = 1;
    for (size_t k = 1; k < c.size(); ++k) {
      const uint32_t i = c[k];
      // Compare load/weight without division (tokens < 2^40 and weights <= 10^4: no overflow).
      const int64_t lhs = Load(f, i, measure_) * f.spec(best).weight;
      const int64_t rhs = Load(f, best, measure_) * f.spec(i).weight;
      if (lhs < rhs) {
        best = i;
        ties = 1;
      } else if (lhs == rhs && rng.Uniform(++ties) == 0) {  // reservoir: uniform among ties
        best = i;
      }
    }
    return Decision{best, DecisionKind::kLeastOutstanding, 0};
  }
  std::string_view name() const override { return "least-outstanding-requests"; }

 private:
  LoadMeasure measure_;
};

class RoundRobinPolicy final : public Policy {
 public:
  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const override {
    auto c = Candidates(r, f, false);
    if (c.empty()) return NoCandidate(r, f);
    // One turn counter per served name: with a shared counter, alternating requests for two
    // models would each always land on the same instance of their own set.
    uint64_t n = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = next_.find(r.served_name);
      if (it == next_.end()) it = next_.emplace(std::string(r.served_name), 0).first;
      n = it->second++;
    }
    return Decision{c[n % c.size()], DecisionKind::kRoundRobin, 0};
  }
  std::string_view name() const override { return "round-robin"; }

 private:
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex mu_;  // guards next_; round-robin is a baseline, not a hot path
  mutable std::unordered_map<std::string, uint64_t, NameHash, std::equal_to<>> next_;
};

// Recent dispatches per instance of one pool, for the share bound of bounded loads: counts that
// decay exponentially with the pool's dispatches (each dispatch weighs e^(1/window) times the one
// before; window = kShareWindowPerInstance x instances). Kept in snapshot order, remapped by
// placement seed when the snapshot changes. An instance that joins starts at its fair share of
// the current total (it would otherwise make every other instance look over its share at once).
// Share bound (prefix-aware with a balance factor, cache-aware, kv-aware): an instance whose
// recent dispatches exceed its fair share (weight share of the candidates' recent dispatches) by
// more than kShareTolerance plus kShareSlack requests is full. Tuned with `simulate` on
// long-context at 70% load (seeds 1-6) for prefix-aware: every share of the demo's
// 4,000-request window within 13.7-14.8% (13.2-15.4% without), for about one point of hit rate
// over a simulated hour (94% instead of 95%).
constexpr double kShareTolerance = 0.05;
constexpr double kShareSlack = 4;

class ShareMeter {
 public:
  static constexpr double kShareWindowPerInstance = 128;

  void Count(const FleetSnapshot& f, uint32_t i) {
    std::lock_guard lock(mu_);
    Sync(f);
    unit_ *= std::exp(1 / (kShareWindowPerInstance * f.size()));
    counts_[i] += unit_;
    if (unit_ > 1e200) {  // renormalise long before overflow
      for (double& c : counts_) c /= unit_;
      unit_ = 1;
    }
  }

  // Copies the counts of instances `c` into `out` (indexed like the snapshot, in units of the
  // latest dispatch) and returns their sum.
  double Read(const FleetSnapshot& f, std::span<const uint32_t> c, std::vector<double>& out) {
    out.resize(f.size());
    std::lock_guard lock(mu_);
    Sync(f);
    double total = 0;
    for (uint32_t i : c) total += out[i] = counts_[i] / unit_;
    return total;
  }

 private:
  void Sync(const FleetSnapshot& f) {
    if (snapshot_ == &f && seeds_.size() == f.size()) {
      bool same = true;
      for (uint32_t i = 0; i < f.size() && same; ++i) same = seeds_[i] == f.placement_seed(i);
      if (same) return;
    }
    std::unordered_map<uint64_t, double> old;
    double total = 0, weight = 0;
    for (size_t i = 0; i < seeds_.size(); ++i) old.emplace(seeds_[i], counts_[i]);
    std::vector<double> next(f.size(), -1);
    for (uint32_t i = 0; i < f.size(); ++i) {
      auto it = old.find(f.placement_seed(i));
      if (it == old.end()) continue;
      next[i] = it->second;
      total += it->second;
      weight += f.spec(i).weight;
    }
    for (uint32_t i = 0; i < f.size(); ++i) {
      if (next[i] >= 0) continue;
      next[i] = weight > 0 ? total * f.spec(i).weight / weight : 0;  // a newcomer: fair share
    }
    seeds_.resize(f.size());
    for (uint32_t i = 0; i < f.size(); ++i) seeds_[i] = f.placement_seed(i);
    counts_ = std::move(next);
    snapshot_ = &f;
  }

  std::mutex mu_;
  const FleetSnapshot* snapshot_ = nullptr;  // compared only, never dereferenced
  std::vector<uint64_t> seeds_;
  std::vector<double> counts_;
  double unit_ = 1;  // weight of the latest dispatch
};

class PrefixAwarePolicy final : public Policy {
 public:
  explicit PrefixAwarePolicy(const RoutingOptions& o)
      : threshold_(static_cast<int32_t>(o.concurrency_threshold)),
        spill_(o.spill),
        balance_factor_(o.balance_factor),
        measure_(o.load_measure) {}

  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const override {
    auto c = Candidates(r, f, true);
    if (c.empty()) return NoCandidate(r, f);
    const uint64_t key = r.key.placement_hash();
    const KeyDemand::Reading demand =
        balance_factor_ > 0 ? demand_.Read(key) : KeyDemand::Reading{};
    const Limits limits = MakeLimits(f, c, demand.reuse);
    if (balance_factor_ > 0) {
      if (limits.busy) {
        if (auto d = PickReplica(r, f, c, limits, key, demand.share)) return *d;
      }
      const bool new_key_by_load =
          !demand.seen && r.exclude.empty() && PlacedByLoad(key, demand.reuse);
      return PickBalanced(r, f, c, limits, key, new_key_by_load);
    }
    if (r.exclude.empty()) {  // fast path: the first choice usually takes it
      const uint32_t top = MostPreferred(key, f, c);
      if (InFlight(f, top) < limits.For(f, top)) return Decision{top, DecisionKind::kAffinity, 0};
    }
    return PickInOrder(r, f, c, limits, key);
  }
  std::string_view name() const override { return "prefix-aware"; }
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
  std::optional<Decision> PickReplica(const RouteRequest& r, const FleetSnapshot& f,
                                      std::span<uint32_t> c, const Limits& limits, uint64_t key,
                                      double share) const {
    const double n = static_cast<double>(c.size());
    const auto homes = static_cast<uint32_t>(
        std::min(n, std::ceil(share * n / (1 + kShareTolerance) - 1e-9)));
    if (homes < 2) return std::nullopt;
    SortByPreference(key, f, c);
    uint32_t best = LeastLoadedRank(r, f, c, homes, limits);
    for (uint32_t count = homes; best != UINT32_MAX && count < c.size() &&
                                 !limits.AtMostFairShare(f, c[best]);) {
      best = LeastLoadedRank(r, f, c, ++count, limits);
    }
    if (r.exclude.empty()) homes_.Erase(key);  // replicated: no single moved home
    if (best == UINT32_MAX) return std::nullopt;
    return Decision{c[best], DecisionKind::kAffinity, best};
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
  std::optional<Decision> PlaceNewKey(const RouteRequest& r, const FleetSnapshot& f,
                                      std::span<uint32_t> c, const Limits& limits,
                                      uint64_t key) const {
    SortByPreference(key, f, c);
    const uint32_t best = LeastLoadedRank(r, f, c, static_cast<uint32_t>(c.size()), limits);
    if (best == UINT32_MAX) return std::nullopt;
    return Decision{c[best], DecisionKind::kLeastOutstanding, best};
  }

  // Among c[0..count) (in preference order): the rank of the least loaded untried instance below
  // its limit (load per weight, ties to the better rank); UINT32_MAX when there is none.
  uint32_t LeastLoadedRank(const RouteRequest& r, const FleetSnapshot& f,
                           std::span<const uint32_t> c, uint32_t count,
                           const Limits& limits) const {
    uint32_t best = UINT32_MAX;
    double best_load = 0;
    for (uint32_t rank = 0; rank < count; ++rank) {
      const uint32_t i = c[rank];
      if (IsExcluded(r, i) || InFlight(f, i) >= limits.For(f, i)) continue;
      const double load = static_cast<double>(Load(f, i, measure_)) / f.spec(i).weight;
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
  Result<Decision> PickBalanced(const RouteRequest& r, const FleetSnapshot& f, std::span<uint32_t> c,
                                const Limits& limits, uint64_t key, bool new_key_by_load) const {
    if (auto home_seed = homes_.Find(key)) {
      for (uint32_t i : c) {
        if (f.placement_seed(i) != *home_seed) continue;
        if (!IsExcluded(r, i) && InFlight(f, i) < limits.For(f, i)) {
          return Decision{i, DecisionKind::kAffinity, RankOf(key, f, c, i)};
        }
        break;
      }
    } else if (new_key_by_load) {
      if (auto d = PlaceNewKey(r, f, c, limits, key)) return *d;
    }
    auto d = PickInOrder(r, f, c, limits, key);  // sorts c by preference
    if (!d.ok()) return d;
    if (!r.exclude.empty()) return d;  // a retry after a failure is not a spill: no move
    if (d->kind == DecisionKind::kAffinity && d->rank == 0) {
      homes_.Erase(key);
    } else if (d->kind != DecisionKind::kSaturated) {
      homes_.Set(key, f.placement_seed(d->instance));
    }
    return d;
  }

  static uint32_t RankOf(uint64_t key, const FleetSnapshot& f, std::span<const uint32_t> c, uint32_t i) {
    const uint64_t score = PreferenceScore(key, f, i);
    uint32_t rank = 0;
    for (uint32_t j : c) rank += j != i && PreferenceScore(key, f, j) > score;
    return rank;
  }

  Result<Decision> PickInOrder(const RouteRequest& r, const FleetSnapshot& f, std::span<uint32_t> c,
                               const Limits& limits, uint64_t key) const {
    SortByPreference(key, f, c);
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
    bool share_spill = false;  // the first choice is over its share (not just busy)
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
      double best_share = 0;
      for (uint32_t rank = 0; rank < c.size(); ++rank) {
        if (IsExcluded(r, c[rank]) || InFlight(f, c[rank]) >= limits.For(f, c[rank])) continue;
        const double share = limits.RecentPerWeight(f, c[rank]);
        if (best == UINT32_MAX || share < best_share) {
          best = rank;
          best_share = share;
        }
      }
      if (best != UINT32_MAX) return Decision{c[best], DecisionKind::kOverflow, best};
    }
    if (spill_rank != UINT32_MAX) return Decision{c[spill_rank], DecisionKind::kOverflow, spill_rank};
    if (first_untried_rank == UINT32_MAX) return NoCandidate(r, f);
    // Least loaded untried instance; ties go to the better rank. Below its limit it is an
    // overflow (least-loaded spill), otherwise every candidate is full: saturated. With the
    // prompt-tokens measure, instances below their limit come first (load ranks by work, the
    // limit counts requests).
    const bool by_work = measure_ != LoadMeasure::kRequests;
    uint32_t best_rank = UINT32_MAX;
    bool best_below = false;
    int64_t best_load = std::numeric_limits<int64_t>::max();
    for (uint32_t rank = first_untried_rank; rank < c.size(); ++rank) {
      if (IsExcluded(r, c[rank])) continue;
      const bool below = by_work && InFlight(f, c[rank]) < limits.For(f, c[rank]);
      const int64_t load = by_work ? Load(f, c[rank], measure_) : InFlight(f, c[rank]);
      if ((below && !best_below) || (below == best_below && load < best_load)) {
        best_load = load;
        best_rank = rank;
        best_below = below;
      }
    }
    const DecisionKind kind = InFlight(f, c[best_rank]) < limits.For(f, c[best_rank])
                                  ? DecisionKind::kOverflow
                                  : DecisionKind::kSaturated;
    return Decision{c[best_rank], kind, best_rank};
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
      return recent ? (*recent)[i] / f.spec(i).weight : 0;
    }
    bool AtMostFairShare(const FleetSnapshot& f, uint32_t i) const {
      return !recent || (*recent)[i] <= fair_per_weight * f.spec(i).weight;
    }
    bool Overloaded() const { return per_weight > 0 && (1 + kShareTolerance) * mean_per_weight > threshold; }
    bool OverShare(const FleetSnapshot& f, uint32_t i) const {
      return recent && (*recent)[i] > share_limit_per_weight * f.spec(i).weight + kShareSlack;
    }
    int32_t For(const FleetSnapshot& f, uint32_t i) const {
      if (per_weight <= 0) return threshold;
      if (OverShare(f, i)) return 0;
      const double w = f.spec(i).weight;
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
  Limits MakeLimits(const FleetSnapshot& f, std::span<const uint32_t> c, double reuse) const {
    Limits l{threshold_};
    if (balance_factor_ <= 0) return l;
    int64_t load = 0, weight = 0;
    for (uint32_t i : c) {
      load += std::max<int32_t>(0, InFlight(f, i));
      weight += f.spec(i).weight;
    }
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
  mutable KeyHomes homes_;  // Pick is const for callers; the table is internally locked
  mutable ShareMeter shares_;
  mutable KeyDemand demand_;
};

// The gateway's estimate, as in api::EstimatePromptTokens: about 4 bytes of text per token.
constexpr uint32_t kBytesPerToken = 4;

// The instances a learning policy has indexed, so that those that leave the fleet are forgotten:
// when a dispatch comes with a snapshot other than the last one seen, the indexed instances it
// no longer contains are returned (once). Internally locked.
class Departures {
 public:
  void Note(uint64_t seed) {
    std::lock_guard lock(mu_);
    known_.insert(seed);
  }
  std::vector<uint64_t> Left(const FleetSnapshot& f) {
    std::vector<uint64_t> left;
    std::lock_guard lock(mu_);
    if (&f == snapshot_) return left;
    snapshot_ = &f;
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

 private:
  std::mutex mu_;
  const FleetSnapshot* snapshot_ = nullptr;  // compared only, never dereferenced
  std::unordered_set<uint64_t> known_;
};

// cache-aware's decision (the file comment) once each candidate's cached tokens are known: below
// the threshold first, then the lowest cost, ties to the key's rendezvous preference.
// REQUIRES: !c.empty(), cached.size() == c.size()
// `over_share` (empty, or one flag per candidate): candidates over their share, which rank with
// those at the threshold. `queued` (one per candidate): the prompt tokens the instance still has
// to compute for requests already sent there (PrefillQueue).
Decision PickByCost(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> c,
                    std::span<const uint64_t> cached, uint64_t prompt_tokens, int32_t threshold,
                    double load_weight, std::span<const uint8_t> over_share,
                    std::span<const double> queued) {
  const uint64_t key = r.key.placement_hash();
  size_t best = SIZE_MAX;
  bool best_below = false;
  double best_cost = 0;
  uint64_t best_score = 0;
  uint64_t longest = 0;
  for (size_t k = 0; k < c.size(); ++k) {
    const uint32_t i = c[k];
    longest = std::max(longest, cached[k]);
    const bool below = InFlight(f, i) < threshold && (over_share.empty() || over_share[k] == 0);
    const double uncached = prompt_tokens > cached[k] ? static_cast<double>(prompt_tokens - cached[k]) : 0;
    const double w = static_cast<double>(f.spec(i).weight);
    const double cost = uncached + queued[k] / w +
                        load_weight * static_cast<double>(Load(f, i, LoadMeasure::kPromptTokens)) / w;
    const uint64_t score = PreferenceScore(key, f, i);
    if (best == SIZE_MAX || (below && !best_below) ||
        (below == best_below && (cost < best_cost || (cost == best_cost && score > best_score)))) {
      best = k;
      best_below = below;
      best_cost = cost;
      best_score = score;
    }
  }
  DecisionKind kind = !best_below                ? DecisionKind::kSaturated
                      : longest == 0             ? DecisionKind::kLeastOutstanding
                      : cached[best] == longest  ? DecisionKind::kAffinity
                                                 : DecisionKind::kOverflow;
  Decision d{c[best], kind, 0};
  d.uncached_tokens = prompt_tokens > cached[best] ? prompt_tokens - cached[best] : 0;
  return d;
}

// The uncached prompt tokens each instance still has to compute (cache-aware, kv-aware): a
// dispatch adds its request's prompt tokens minus those the policy found cached on the chosen
// instance; the request's first token (its prefill is done) or its completion takes them off.
// A request waits for the prefills queued ahead of it on its instance (engines schedule FCFS
// with chunked prefill), so these tokens delay it one for one, as its own uncached tokens do:
// they enter the cost with weight 1 (no tuning). The outstanding prompt tokens, with
// load_weight, stay for what this misses (decode steps share the batch with prefills). Dynamo's
// router counts the same "active prefill tokens" (dynamo-kv). Requests without an id are not
// tracked. Bounded by the requests in flight. Internally locked.
class PrefillQueue {
 public:
  void Add(uint64_t request_id, uint64_t seed, double tokens) {
    if (request_id == 0 || tokens <= 0) return;
    std::lock_guard lock(mu_);
    if (!requests_.try_emplace(request_id, Entry{seed, tokens}).second) return;
    queued_[seed] += tokens;
  }
  void Release(uint64_t request_id) {
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
  // Fills `out` with the queued tokens of each seed and returns it.
  std::span<const double> Read(std::span<const uint64_t> seeds) const {
    thread_local std::vector<double> out;
    out.assign(seeds.size(), 0);
    std::lock_guard lock(mu_);
    if (queued_.empty()) return {out.data(), out.size()};
    for (size_t k = 0; k < seeds.size(); ++k) {
      auto it = queued_.find(seeds[k]);
      if (it != queued_.end()) out[k] = it->second;
    }
    return {out.data(), out.size()};
  }
  void Forget(uint64_t seed) {
    std::lock_guard lock(mu_);
    queued_.erase(seed);
    std::erase_if(requests_, [&](const auto& kv) { return kv.second.seed == seed; });
  }

 private:
  struct Entry {
    uint64_t seed;
    double tokens;
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> requests_;  // request id -> where, how many
  std::unordered_map<uint64_t, double> queued_;   // seed -> queued uncached tokens
};

// The share bound of cache-aware and kv-aware (see policy.h): once the pool is busy (on average a
// request in flight per candidate), candidates whose recent dispatches exceed their fair share by
// more than kShareTolerance + kShareSlack rank with those at the threshold, so the cost picks
// among the others. A cost that weighs cached tokens against load alone lets a popular tenant's
// or document's instance take far more than its share while its queue stays short (the
// agentic workload: shares 12.8-19.9% on 7 instances), which leaves the others idle and the
// fleet's capacity unused when the load rises.
class CostShareBound {
 public:
  // Fills `over` (one flag per candidate) and returns it; empty when no candidate is over.
  std::span<const uint8_t> Mark(const FleetSnapshot& f, std::span<const uint32_t> c) const {
    thread_local std::vector<uint8_t> over;
    thread_local std::vector<double> recent;
    int64_t load = 0;
    double weight = 0;
    for (uint32_t i : c) {
      load += std::max<int32_t>(0, InFlight(f, i));
      weight += f.spec(i).weight;
    }
    if (load < static_cast<int64_t>(c.size()) || c.size() < 2) return {};
    const double total = meter_.Read(f, c, recent);
    const double fair_per_weight = total / weight;
    const double limit_per_weight = (1 + kShareTolerance) * fair_per_weight;
    const double floor_per_weight = (1 - kShareTolerance) * fair_per_weight;
    over.assign(c.size(), 0);
    bool any = false, under = false;
    for (size_t k = 0; k < c.size(); ++k) {
      const uint32_t i = c[k];
      const double w = f.spec(i).weight;
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
        if (recent[i] > limit_per_weight * f.spec(i).weight) over[k] = 1;
        any |= over[k] != 0;
      }
    }
    if (!any) return {};
    return {over.data(), over.size()};
  }
  void Count(const FleetSnapshot& f, uint32_t i) { meter_.Count(f, i); }

 private:
  mutable ShareMeter meter_;  // internally locked
};

class CacheAwarePolicy final : public Policy {
 public:
  explicit CacheAwarePolicy(const RoutingOptions& o)
      : threshold_(static_cast<int32_t>(o.concurrency_threshold)),
        block_tokens_(std::max<uint32_t>(1, o.cache_aware.block_bytes / kBytesPerToken)),
        load_weight_(o.cache_aware.load_weight),
        index_(BlockIndex::Options{o.cache_aware.capacity_blocks, o.cache_aware.max_index_bytes}) {}

  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const override {
    auto c = Candidates(r, f, false);
    if (c.empty()) return NoCandidate(r, f);
    thread_local std::vector<uint64_t> seeds, cached;
    thread_local std::vector<uint32_t> matched;
    seeds.resize(c.size());
    matched.assign(c.size(), 0);
    for (size_t k = 0; k < c.size(); ++k) seeds[k] = f.placement_seed(c[k]);
    if (!r.blocks.empty()) index_.Match(r.blocks, seeds, matched);
    cached.resize(c.size());
    for (size_t k = 0; k < c.size(); ++k) cached[k] = uint64_t{matched[k]} * block_tokens_;
    return PickByCost(r, f, c, cached, r.work_tokens, threshold_, load_weight_, shares_.Mark(f, c),
                      queue_.Read(seeds));
  }
  std::string_view name() const override { return "cache-aware"; }
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
  mutable BlockIndex index_;  // internally locked
  Departures departures_;
  CostShareBound shares_;
  PrefillQueue queue_;
};

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
    ring.chains[ring.next] = std::move(chain);
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
  void Forget(uint64_t seed) {
    std::lock_guard lock(mu_);
    rings_.erase(seed);
  }

 private:
  struct Ring {
    std::array<std::vector<uint64_t>, kPerInstance> chains;
    size_t next = 0;
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Ring> rings_;
};

// The chains of one request's prompt, one per block size, computed once per pick.
class PromptChains {
 public:
  PromptChains(const RouteRequest& r, uint64_t chain_seed, uint64_t max_tokens)
      : r_(r), seed_(chain_seed), max_tokens_(max_tokens) {}
  std::span<const uint64_t> At(uint32_t block_size) {
    for (auto& [bs, chain] : chains_) {
      if (bs == block_size) return chain;
    }
    chains_.emplace_back(block_size, std::vector<uint64_t>());
    KvBlockChain(r_.prompt_tokens, block_size, max_tokens_ / block_size, seed_, chains_.back().second);
    return chains_.back().second;
  }

 private:
  const RouteRequest& r_;
  uint64_t seed_;
  uint64_t max_tokens_;
  std::vector<std::pair<uint32_t, std::vector<uint64_t>>> chains_;
};

// Records the prompt chain of a request dispatched to instance `seed` (once its block size is known).
void NoteRecent(const KvIndex& index, RecentChains& recent, const RouteRequest& r, uint64_t seed,
                uint64_t max_tokens) {
  if (r.prompt_tokens.empty()) return;
  const uint32_t bs = index.block_size(seed);
  if (bs == 0) return;
  std::vector<uint64_t> chain;
  KvBlockChain(r.prompt_tokens, bs, max_tokens / bs, index.ChainSeedFor(r.served_name), chain);
  recent.Add(seed, std::move(chain));
}

// kv-aware (see policy.h): the engines' reported blocks (KvIndex) for instances whose event
// stream is fresh, cache-aware's sent-block view (a BlockIndex fed by OnDispatched) for the
// others, and the larger of the two for a fresh instance joined mid-stream (its view misses what
// was held before the join: KvIndex's file comment). The pool's max_index_bytes is split between the two indexes so that both cover about
// as many tokens (the sent view has 64-token blocks at about 80 bytes each, the reported view
// engine blocks, 16 tokens in vLLM, at about 160 bytes each (BlockIndex::kBytesPerEntry,
// KvIndex::kBytesPerEntry): 1.25 and 10 bytes per token, so 1/9 and 8/9), so kv-aware's
// bookkeeping stays under the same bound as cache-aware's.
class KvAwarePolicy final : public Policy {
 public:
  explicit KvAwarePolicy(const RoutingOptions& o)
      : threshold_(static_cast<int32_t>(o.concurrency_threshold)),
        block_tokens_(std::max<uint32_t>(1, o.cache_aware.block_bytes / kBytesPerToken)),
        max_tokens_(uint64_t{o.cache_aware.max_blocks} * block_tokens_),
        load_weight_(o.cache_aware.load_weight),
        sent_(BlockIndex::Options{o.cache_aware.capacity_blocks, o.cache_aware.max_index_bytes / 9}),
        reported_(KvIndex::Options{o.cache_aware.capacity_blocks * block_tokens_,
                                   o.cache_aware.max_index_bytes / 9 * 8}) {}

  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const override {
    auto c = Candidates(r, f, false);
    if (c.empty()) return NoCandidate(r, f);
    thread_local std::vector<uint64_t> seeds, cached;
    thread_local std::vector<uint32_t> matched;
    thread_local std::vector<KvIndex::InstanceMatch> reported;
    seeds.resize(c.size());
    matched.assign(c.size(), 0);
    reported.assign(c.size(), KvIndex::InstanceMatch{});
    for (size_t k = 0; k < c.size(); ++k) seeds[k] = f.placement_seed(c[k]);
    if (!r.blocks.empty()) sent_.Match(r.blocks, seeds, matched);
    bool any_fresh = false;
    if (!r.prompt_tokens.empty()) {
      reported_.Match(r.prompt_tokens, r.served_name, max_tokens_, seeds, reported, false);
      for (const auto& m : reported) any_fresh |= m.fresh;
    }
    cached.resize(c.size());
    if (!any_fresh) {  // exactly cache-aware
      for (size_t k = 0; k < c.size(); ++k) cached[k] = uint64_t{matched[k]} * block_tokens_;
      return PickByCost(r, f, c, cached, r.work_tokens, threshold_, load_weight_, shares_.Mark(f, c),
                        queue_.Read(seeds));
    }
    const uint64_t prompt = r.prompt_tokens.size();
    PromptChains chains(r, reported_.ChainSeedFor(r.served_name), max_tokens_);
    for (size_t k = 0; k < c.size(); ++k) {
      if (!reported[k].fresh) {
        cached[k] = std::min(prompt, uint64_t{matched[k]} * block_tokens_);
        continue;
      }
      cached[k] = reported[k].matched_tokens;
      if (reported[k].partial) {  // joined mid-stream: the sent view may know more
        cached[k] = std::max(cached[k], std::min(prompt, uint64_t{matched[k]} * block_tokens_));
      }
      if (const uint32_t bs = reported[k].block_size; bs != 0) {  // and what is being computed
        const size_t pending = recent_.Match(seeds[k], chains.At(bs));
        cached[k] = std::max<uint64_t>(cached[k], uint64_t{pending} * bs);
      }
    }
    return PickByCost(r, f, c, cached, prompt, threshold_, load_weight_, shares_.Mark(f, c),
                      queue_.Read(seeds));
  }
  std::string_view name() const override { return "kv-aware"; }
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
  mutable BlockIndex sent_;    // internally locked
  KvIndex reported_;           // internally locked
  RecentChains recent_;        // internally locked
  Departures departures_;
  CostShareBound shares_;
  PrefillQueue queue_;
};

// dynamo-kv: our re-implementation of Dynamo's KV router (see policy.h). The bookkeeping
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
      const std::span<const uint64_t> chain =
          r.prompt_tokens.empty() ? std::span<const uint64_t>() : chains.At(bs);
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
    const DecisionKind kind = longest == 0                           ? DecisionKind::kLeastOutstanding
                              : reported[best].matched_tokens == longest ? DecisionKind::kAffinity
                                                                         : DecisionKind::kOverflow;
    return Decision{c[best], kind, 0};
  }
  std::string_view name() const override { return "dynamo-kv"; }

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
      if (id == 0) {  // unnamed: released in dispatch order (see policy.h)
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
    uint64_t seed = 0;            // the worker's placement seed
    double prefill_tokens = 0;    // still active (0 after the first token)
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
  mutable std::mutex mu_;  // guards workers_, requests_, next_unnamed_
  std::unordered_map<uint64_t, Worker> workers_;    // by placement seed
  std::unordered_map<uint64_t, Request> requests_;  // by request id
  uint64_t next_unnamed_ = 1;
};

}  // namespace

std::string_view StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kRandom: return "random";
    case Strategy::kLeastOutstanding: return "least-outstanding-requests";
    case Strategy::kRoundRobin: return "round-robin";
    case Strategy::kPrefixAware: return "prefix-aware";
    case Strategy::kCacheAware: return "cache-aware";
    case Strategy::kKvAware: return "kv-aware";
    case Strategy::kDynamoKv: return "dynamo-kv";
  }
  return "unknown";
}

std::string StrategyNames(std::string_view separator) {
  std::string out;
  for (Strategy s : kStrategies) {
    if (!out.empty()) out += separator;
    out += StrategyName(s);
  }
  return out;
}

Result<Strategy> ParseStrategy(std::string_view name) {
  for (Strategy s : kStrategies) {
    if (name == StrategyName(s)) return s;
  }
  return Status::InvalidArgument("strategy: '" + std::string(name) + "' is not one of " + StrategyNames(", "));
}

double DynamoKvLogit(const DynamoWorkerLoad& w, double overlap_score_weight) {
  const double bs = w.block_size;
  // new_tokens = isl - overlap x block_size, clamped at 0 (Dynamo logs an error there).
  const double new_tokens = std::max(0.0, w.isl_tokens - static_cast<double>(w.overlap_blocks) * bs);
  const double prefill_blocks = (w.active_tokens + new_tokens) / bs;
  const double decode_blocks = w.active_blocks + w.new_blocks;
  return overlap_score_weight * prefill_blocks + decode_blocks;
}

std::string_view SpillModeName(SpillMode m) {
  return m == SpillMode::kNextPreferred ? "next-preferred" : "least-loaded";
}

Result<SpillMode> ParseSpillMode(std::string_view name) {
  if (name == "next-preferred") return SpillMode::kNextPreferred;
  if (name == "least-loaded") return SpillMode::kLeastLoaded;
  return Status::InvalidArgument("spill_mode: '" + std::string(name) +
                                 "' is not one of next-preferred, least-loaded");
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

std::string_view TokenizerSourceName(TokenizerSource t) {
  return t == TokenizerSource::kEngine ? "engine" : "local";
}

Result<TokenizerSource> ParseTokenizerSource(std::string_view name) {
  if (name == "local") return TokenizerSource::kLocal;
  if (name == "engine") return TokenizerSource::kEngine;
  return Status::InvalidArgument("tokenizer: '" + std::string(name) + "' is not one of local, engine");
}

std::string_view CompatibilityName(Compatibility c) {
  return c == Compatibility::kSageMaker ? "sagemaker" : "none";
}

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
                                   " is outside the allowed range " +
                                   Range(kMinPrefixLength, kMaxPrefixLength));
  }
  if (concurrency_threshold < kMinConcurrencyThreshold ||
      concurrency_threshold > kMaxConcurrencyThreshold) {
    return Status::InvalidArgument("concurrency_threshold: " + std::to_string(concurrency_threshold) +
                                   " is outside the allowed range " +
                                   Range(kMinConcurrencyThreshold, kMaxConcurrencyThreshold));
  }
  if (balance_factor != 0 && !(balance_factor >= kMinBalanceFactor && balance_factor <= kMaxBalanceFactor)) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, balance_factor);
    const std::string shown = ec == std::errc() ? std::string(buf, end) : std::string("?");
    return Status::InvalidArgument("balance_factor: " + shown +
                                   " must be 0 (off) or between 1 and 100");
  }
  if (max_in_flight > kMaxPoolInFlight) {
    return Status::InvalidArgument("max_in_flight: " + std::to_string(max_in_flight) +
                                   " is outside the allowed range " + Range(0, kMaxPoolInFlight) +
                                   " (0 = no ceiling)");
  }
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
    const char* field = spill != SpillMode::kLeastLoaded    ? "spill_mode"
                        : balance_factor != 0               ? "balance_factor"
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
  switch (o.strategy) {
    case Strategy::kRandom: return std::make_unique<RandomPolicy>();
    case Strategy::kLeastOutstanding: return std::make_unique<LeastOutstandingPolicy>(o.load_measure);
    case Strategy::kRoundRobin: return std::make_unique<RoundRobinPolicy>();
    case Strategy::kPrefixAware: return std::make_unique<PrefixAwarePolicy>(o);
    case Strategy::kCacheAware: return std::make_unique<CacheAwarePolicy>(o);
    case Strategy::kKvAware: return std::make_unique<KvAwarePolicy>(o);
    case Strategy::kDynamoKv: return std::make_unique<DynamoKvPolicy>(o);
  }
  return nullptr;
}

}  // namespace prefix_router
