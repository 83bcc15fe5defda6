#include "core/placement.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

namespace prefix_router {

uint64_t WeightedPreferenceScore(uint64_t h, uint32_t weight) {
  // u in (0, 1]; -ln(u)/w is an exponential variable of rate w: the smallest wins with
  // probability w_i / sum(w). Positive doubles order like their bit patterns, so the
  // complement of the bits turns "smallest wins" into "highest wins".
  const double u = (static_cast<double>(h >> 11) + 1.0) * 0x1.0p-53;
  // 0.0 - x, not -x: at u == 1, -log(u) is -0.0, whose sign bit would rank the best possible
  // draw last; 0.0 - 0.0 is +0.0 and every other value is unchanged.
  const double score = (0.0 - std::log(u)) / static_cast<double>(weight);
  return ~std::bit_cast<uint64_t>(score);
}

uint32_t MostPreferred(uint64_t key_hash, const FleetSnapshot& fleet, std::span<const uint32_t> candidates) {
  if (fleet.uniform_weights()) {  // the score is the hash: one mix per candidate, nothing else
    const size_t k =
        rendezvous_scan::Best().best(key_hash, fleet.placement_seeds(), candidates.data(), candidates.size());
    return candidates[k];
  }
  uint32_t best = candidates[0];
  uint64_t best_score = PreferenceScore(key_hash, fleet, best);
  for (size_t k = 1; k < candidates.size(); ++k) {
    const uint64_t s = PreferenceScore(key_hash, fleet, candidates[k]);
    // Ties (astronomically rare) go to the lower index, so the order is total.
    if (s > best_score || (s == best_score && candidates[k] < best)) {
      best = candidates[k];
      best_score = s;
    }
  }
  return best;
}

TopTwo TwoMostPreferred(uint64_t key_hash, const FleetSnapshot& fleet, std::span<const uint32_t> candidates) {
  if (fleet.uniform_weights()) {
    const rendezvous_scan::BestTwo top =
        rendezvous_scan::Best().best_two(key_hash, fleet.placement_seeds(), candidates.data(), candidates.size());
    return {candidates[top.first], top.second == rendezvous_scan::kNone ? UINT32_MAX : candidates[top.second]};
  }
  uint32_t first = candidates[0], second = UINT32_MAX;
  uint64_t first_score = PreferenceScore(key_hash, fleet, first), second_score = 0;
  for (size_t k = 1; k < candidates.size(); ++k) {
    const uint32_t i = candidates[k];
    const uint64_t s = PreferenceScore(key_hash, fleet, i);
    if (PreferenceOrder::Before(i, s, first, first_score)) {
      second = first;
      second_score = first_score;
      first = i;
      first_score = s;
    } else if (second == UINT32_MAX || PreferenceOrder::Before(i, s, second, second_score)) {
      second = i;
      second_score = s;
    }
  }
  return {first, second};
}

void SortByPreference(uint64_t key_hash, const FleetSnapshot& fleet, std::span<uint32_t> candidates) {
  struct Scored {
    uint64_t score;
    uint32_t index;
  };
  thread_local std::vector<Scored> scored;  // reused: no allocation per pick once warm
  scored.clear();
  for (uint32_t c : candidates) scored.push_back({PreferenceScore(key_hash, fleet, c), c});
  std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    return a.score != b.score ? a.score > b.score : a.index < b.index;
  });
  for (size_t k = 0; k < scored.size(); ++k) candidates[k] = scored[k].index;
}

}  // namespace prefix_router

namespace prefix_router {

void PreferenceOrder::Reset(uint64_t key_hash, const FleetSnapshot& fleet, std::span<const uint32_t> candidates) {
  scored_.resize(candidates.size());
  sorted_ = 0;
  if (candidates.empty()) return;
  // The first two ranks, which most spills stop at, are found in the scoring pass itself.
  const auto before = [](const Scored& a, const Scored& b) { return Before(a.index, a.score, b.index, b.score); };
  size_t first = 0, second = SIZE_MAX;
  if (fleet.uniform_weights()) {
    // Equal weights: the scores and the first two come from vector scans (core/rendezvous_scan.h).
    const rendezvous_scan::Kernel& scan = rendezvous_scan::Best();
    const uint64_t* seeds = fleet.placement_seeds();
    scores_.resize(candidates.size());
    scan.scores(key_hash, seeds, candidates.data(), candidates.size(), scores_.data());
    for (size_t k = 0; k < candidates.size(); ++k) scored_[k] = {scores_[k], candidates[k]};
    const rendezvous_scan::BestTwo top = scan.best_two(key_hash, seeds, candidates.data(), candidates.size());
    first = top.first;
    second = top.second == rendezvous_scan::kNone ? SIZE_MAX : top.second;
  } else {
    for (size_t k = 0; k < candidates.size(); ++k) {
      scored_[k] = {PreferenceScore(key_hash, fleet, candidates[k]), candidates[k]};
      if (k == 0) continue;
      if (before(scored_[k], scored_[first])) {
        second = first;
        first = k;
      } else if (second == SIZE_MAX || before(scored_[k], scored_[second])) {
        second = k;
      }
    }
  }
  std::swap(scored_[0], scored_[first]);
  sorted_ = 1;
  if (second == SIZE_MAX) return;
  if (second == 0) second = first;  // the swap moved it
  std::swap(scored_[1], scored_[second]);
  sorted_ = 2;
}

void PreferenceOrder::Extend(size_t count) {
  const auto before = [](const Scored& a, const Scored& b) { return Before(a.index, a.score, b.index, b.score); };
  const auto first = scored_.begin() + static_cast<ptrdiff_t>(sorted_);
  if (count == sorted_ + 1 && sorted_ < 2) {
    // The first ranks, which most decisions stop at: one pass finds the next best.
    std::iter_swap(first, std::min_element(first, scored_.end(), before));
    ++sorted_;
    return;
  }
  const size_t end = std::min(scored_.size(), std::max({count, 2 * sorted_, size_t{8}}));
  const auto last = scored_.begin() + static_cast<ptrdiff_t>(end);
  if (last != scored_.end()) std::nth_element(first, last, scored_.end(), before);
  std::sort(first, last, before);
  sorted_ = end;
}

uint32_t PreferenceOrder::RankOf(uint32_t instance, uint64_t score) const {
  uint32_t rank = 0;
  for (const Scored& s : scored_) rank += Before(s.index, s.score, instance, score);
  return rank;
}

}  // namespace prefix_router
