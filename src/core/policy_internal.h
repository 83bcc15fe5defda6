// Pieces shared by several policies of core/ (not part of the routing interface: include it only
// from core/*_policy.cc). Candidate selection and load, the share meter behind the share bound
// (prefix-aware, cache-aware, kv-aware), the departure tracker of the learning policies, and
// cache-aware's cost decision with its prefill queue and share bound, which kv-aware reuses.
// docs/policies.md explains the ideas; the comments here say what each piece guarantees.
//
// Thread-safety: the free functions are pure but for Candidates, which fills a per-thread
// buffer (valid until the calling thread's next call). ShareMeter, Departures, PrefillQueue and
// CostShareBound are internally locked and safe from any thread; PromptChains is per pick, on
// one thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/fleet.h"
#include "core/policy.h"
#include "core/status.h"

namespace prefix_router::policy_internal {

inline bool IsExcluded(const RouteRequest& r, uint32_t i) {
  return std::find(r.exclude.begin(), r.exclude.end(), i) != r.exclude.end();
}

inline int32_t InFlight(const FleetSnapshot& f, uint32_t i) {
  return f.live(i).in_flight(std::memory_order_relaxed);
}

// The load compared where "least loaded" decides: in-flight requests, or their estimated prompt
// tokens plus one per request (so that requests with empty prompts still count).
// With the engine measure, the engine's reported running and waiting requests plus the requests
// sent since that report (docs/policies.md, "Load measure").
inline int64_t Load(const FleetSnapshot& f, uint32_t i, LoadMeasure m) {
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
  return requests + std::max<int64_t>(0, f.live(i).outstanding_tokens().load(std::memory_order_relaxed));
}

// What the load bounds read of the candidates, summed in Candidates' pass over them (on large
// fleets a second pass over every instance's state costs as much as the first).
struct CandidateTotals {
  int64_t in_flight = 0;  // requests in flight (a negative count as 0)
  int64_t weight = 0;
};

// Eligible, available candidates, indices ascending, in a per-thread buffer (no allocation once
// warm; valid until the thread's next call). Excluded instances are kept when `keep_excluded`
// (prefix-aware ranks count them). When `totals` is given it receives the candidates' sums.
std::span<const uint32_t> Candidates(const RouteRequest& r, const FleetSnapshot& f, bool keep_excluded,
                               CandidateTotals* totals = nullptr);

// Unavailable, saying whether no instance serves the name or none is left to try.
// Where instance `seed` stands in `c` (the span Candidates returned: indices ascending), if it
// is a candidate: a lookup and a binary search, for decisions that learn about a few instances
// by seed and must not scan a fleet of 10,000 for them.
std::optional<size_t> CandidatePosition(const FleetSnapshot& f, std::span<const uint32_t> c, uint64_t seed);

Status NoCandidate(const RouteRequest& r, const FleetSnapshot& f);

// Share bound (prefix-aware with a balance factor, cache-aware, kv-aware): an instance whose
// recent dispatches exceed its fair share (weight share of the candidates' recent dispatches) by
// more than kShareTolerance plus kShareSlack requests is full. Tuned with `simulate` on
// long-context at 70% load (seeds 1-6) for prefix-aware: every share of the demo's
// 4,000-request window within 13.7-14.8% (13.2-15.4% without), for about one point of hit rate
// over a simulated hour (94% instead of 95%).
inline constexpr double kShareTolerance = 0.05;
inline constexpr double kShareSlack = 4;

// The gateway's estimate, as in api::EstimatePromptTokens: about 4 bytes of text per token.
inline constexpr uint32_t kBytesPerToken = 4;

// Recent dispatches per instance of one pool, for the share bound of bounded loads: counts that
// decay exponentially with the pool's dispatches (each dispatch weighs e^(1/window) times the one
// before; window = kShareWindowPerInstance x instances). Kept in snapshot order, remapped by
// placement seed when the snapshot changes. An instance that joins starts at its fair share of
// the current total (it would otherwise make every other instance look over its share at once).
// A dispatch on the snapshot the counts follow costs O(1): the snapshot is recognised by its
// generation, not by comparing every instance's seed. Internally locked: both methods take mu_
// (Read too: it may remap to a new snapshot).
class ShareMeter {
 public:
  static constexpr double kShareWindowPerInstance = 128;

  void Count(const FleetSnapshot& f, uint32_t i);
  // Copies the counts of instances `c` into `out` (indexed like the snapshot, in units of the
  // latest dispatch) and returns their sum.
  double Read(const FleetSnapshot& f, std::span<const uint32_t> c, std::vector<double>& out);

 private:
  void Sync(const FleetSnapshot& f);  // REQUIRES: mu_ held

  std::mutex mu_;
  uint64_t generation_ = 0;  // of the snapshot counts_ follows (0: none yet)
  std::vector<uint64_t> seeds_;
  std::vector<double> counts_;
  double unit_ = 1;  // weight of the latest dispatch
};

// The instances a learning policy has indexed, so that those that leave the fleet are forgotten:
// when a dispatch comes with a snapshot other than the last one seen, the indexed instances it
// no longer contains are returned (once). Internally locked.
class Departures {
 public:
  void Note(uint64_t seed);
  std::vector<uint64_t> Left(const FleetSnapshot& f);

 private:
  std::mutex mu_;
  uint64_t generation_ = 0;  // of the last snapshot seen (FleetSnapshot::generation)
  std::unordered_set<uint64_t> known_;
};

// cache-aware's decision (docs/policies.md) once each candidate's cached tokens are known: below
// the threshold first, then the lowest cost, ties to the key's rendezvous preference.
// REQUIRES: !c.empty(), cached.size() == c.size(), c ascending without repeats (as Candidates)
// `over_share` (empty, or one flag per candidate): candidates over their share, which rank with
// those at the threshold. `queued` (empty, or one per candidate): the prompt tokens the instance
// still has to compute for requests already sent there (PrefillQueue).
Decision PickByCost(const RouteRequest& r, const FleetSnapshot& f, std::span<const uint32_t> c,
                    std::span<const uint64_t> cached, uint64_t prompt_tokens, int32_t threshold, double load_weight,
                    std::span<const uint8_t> over_share, std::span<const double> queued);

// The cached tokens of each candidate for PickByCost, in a per-thread buffer that is all zeros
// between decisions: a decision sets its few holders' positions and the destructor zeroes those
// again, so a decision over 10,000 candidates that no instance holds costs no 80 KB memset.
// One per thread at a time (a decision does not nest). Not copyable.
class CachedTokens {
 public:
  explicit CachedTokens(size_t candidates);
  ~CachedTokens();
  CachedTokens(const CachedTokens&) = delete;
  CachedTokens& operator=(const CachedTokens&) = delete;
  // Position k's tokens, to read or write (every position written is zeroed at the end).
  uint64_t& operator[](size_t k) {
    touched_.push_back(k);
    return tokens_[k];
  }
  std::span<const uint64_t> view() const { return {tokens_.data(), size_}; }

 private:
  std::vector<uint64_t>& tokens_;
  std::vector<size_t>& touched_;
  size_t size_;
};

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
  void Add(uint64_t request_id, uint64_t seed, double tokens);
  void Release(uint64_t request_id);
  // Fills a per-thread buffer with the queued tokens of each candidate of `c` (Candidates'
  // span) and returns it: one lookup per queued instance or per candidate, whichever is fewer.
  // Empty when nothing is queued anywhere (PickByCost reads that as zeros).
  std::span<const double> Read(const FleetSnapshot& f, std::span<const uint32_t> c) const;
  void Forget(uint64_t seed);

 private:
  struct Entry {
    uint64_t seed;
    double tokens;
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> requests_;  // request id -> where, how many
  std::unordered_map<uint64_t, double> queued_;   // seed -> queued uncached tokens
};

// The share bound of cache-aware and kv-aware (docs/policies.md): once the pool is busy (on
// average a request in flight per candidate), candidates whose recent dispatches exceed their fair
// share by more than kShareTolerance + kShareSlack rank with those at the threshold, so the cost
// picks among the others. A cost that weighs cached tokens against load alone lets a popular
// tenant's or document's instance take far more than its share while its queue stays short (the
// agentic workload: shares 12.8-19.9% on 7 instances), which leaves the others idle and the
// fleet's capacity unused when the load rises.
class CostShareBound {
 public:
  // Fills a per-thread buffer (one flag per candidate) and returns it; empty when no candidate
  // is over.
  // REQUIRES: `totals` are c's (Candidates)
  std::span<const uint8_t> Mark(const FleetSnapshot& f, std::span<const uint32_t> c, const CandidateTotals& totals) const;
  void Count(const FleetSnapshot& f, uint32_t i) { meter_.Count(f, i); }

 private:
  // Mutable because Mark is const (called from Pick) yet reading the meter may remap it to a
  // new snapshot; the meter is internally locked.
  mutable ShareMeter meter_;
};

// The chains of one request's prompt, one per block size, computed once per pick.
class PromptChains {
 public:
  PromptChains(const RouteRequest& r, uint64_t chain_seed, uint64_t max_tokens)
      : r_(r), seed_(chain_seed), max_tokens_(max_tokens) {}
  std::span<const uint64_t> At(uint32_t block_size);

 private:
  const RouteRequest& r_;
  uint64_t seed_;
  uint64_t max_tokens_;
  std::vector<std::pair<uint32_t, std::vector<uint64_t>>> chains_;
};

}  // namespace prefix_router::policy_internal
