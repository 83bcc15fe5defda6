// Placement: which instance a prefix key prefers, as an ordered preference list.
//
// We use weighted rendezvous hashing (highest random weight; Thaler and Ravishankar, 1998):
// every (key, instance) pair gets a pseudo-random score from the key hash and the instance's
// name-derived seed, and the key prefers instances in decreasing score order. This gives the
// properties the router needs without any shared table:
//   - stable: adding an instance moves exactly the keys it now wins (1/(N+1) of them in
//     expectation) and nothing else; removing one moves only its own keys; an instance that
//     returns gets its old keys back;
//   - balanced: each key lands independently, so shares are within sampling noise of the
//     weights (weight w_i wins with probability w_i / sum(w), using the score -ln(u)/w);
//   - deterministic across processes: scores depend on names and keys only;
//   - a full preference order, so overflow and retries go to a stable second home.
// Cost: one 64-bit mix per candidate for the first choice (plus a log when weights differ), 4 or
// 8 candidates at a time with equal weights (core/rendezvous_scan.h);
// when the first choice cannot take the request, the preference order is extended only as far
// as the decision reads it (PreferenceOrder), not sorted whole.
//
// Thread-safety: pure functions over immutable snapshots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/fleet.h"
#include "core/rendezvous_scan.h"  // RendezvousHash

namespace prefix_router {

// Preference of instance `i` for the key: higher is preferred. With uniform weights it is the
// rendezvous hash itself; otherwise an order-preserving encoding of -ln(u)/w (lower wins).
// (Inline: decisions score every candidate of large fleets.)
uint64_t WeightedPreferenceScore(uint64_t rendezvous_hash, uint32_t weight);
inline uint64_t PreferenceScore(uint64_t key_hash, const FleetSnapshot& fleet, uint32_t i) {
  const uint64_t h = RendezvousHash(key_hash, fleet.placement_seed(i));
  return fleet.uniform_weights() ? h : WeightedPreferenceScore(h, fleet.weight(i));
}

// The most preferred of `candidates`. REQUIRES: candidates is not empty.
uint32_t MostPreferred(uint64_t key_hash, const FleetSnapshot& fleet, std::span<const uint32_t> candidates);

// The two most preferred of `candidates` in one pass (second = UINT32_MAX when there is one
// candidate): a spill to the second choice without ordering the rest. REQUIRES: candidates is
// not empty.
struct TopTwo {
  uint32_t first;
  uint32_t second;
};
TopTwo TwoMostPreferred(uint64_t key_hash, const FleetSnapshot& fleet, std::span<const uint32_t> candidates);

// Sorts `candidates` in place, most preferred first.
void SortByPreference(uint64_t key_hash, const FleetSnapshot& fleet, std::span<uint32_t> candidates);

// A key's preference order over candidates, materialised lazily: the scores are computed once
// (linear), and the sorted prefix is extended by partial selection (std::nth_element, then a
// sort of the new part only, doubling each time) as far as a caller reads it. A decision that
// stops at rank r costs O(n + r log r) instead of SortByPreference's O(n log n). The order is
// SortByPreference's exactly (the same total order: score, then index).
// Not thread-safe: one per pick (policies keep one per thread).
class PreferenceOrder {
 public:
  void Reset(uint64_t key_hash, const FleetSnapshot& fleet, std::span<const uint32_t> candidates);
  size_t size() const { return scored_.size(); }
  // The candidate at `rank`. REQUIRES: rank < size()
  uint32_t operator[](size_t rank) {
    if (rank >= sorted_) Extend(rank + 1);
    return scored_[rank].index;
  }
  // Visits every candidate once, in no particular order, as (instance, score): for scans that
  // want the best by some measure with ties to the better rank (a higher score), without
  // ordering the rest.
  template <typename F>
  void ForEachUnordered(F&& f) const {
    for (const Scored& s : scored_) f(s.index, s.score);
  }
  // The rank of candidate `instance` with score `score` (one pass, no ordering).
  uint32_t RankOf(uint32_t instance, uint64_t score) const;
  // True when candidate (a, score_a) ranks before (b, score_b).
  static bool Before(uint32_t a, uint64_t score_a, uint32_t b, uint64_t score_b) {
    return score_a != score_b ? score_a > score_b : a < b;
  }

 private:
  struct Scored {
    uint64_t score;
    uint32_t index;
  };
  void Extend(size_t count);

  std::vector<Scored> scored_;
  std::vector<uint64_t> scores_;  // equal weights: the scan's scores, before pairing
  size_t sorted_ = 0;  // scored_[0, sorted_) is in preference order and ranks before the rest
};

}  // namespace prefix_router
