// How much of the recent traffic each prefix-aware key carries, and how much of the traffic
// repeats a recent key: the two measurements behind prefix-aware's replication of hot keys and
// its reuse-scaled balance factor (core/prefix_aware_policy.h).
//
// Counts decay exponentially with the number of dispatches, not with time (the policy has no
// clock): after `window` further dispatches a dispatch weighs 1/e. The window is set by the
// caller on every call (kWindowPerInstance x instances, as the share meter's), so it follows the
// fleet's size. The decay is applied lazily: each dispatch adds `unit_`, which grows by
// exp(1/window) per dispatch, so a count read divided by `unit_` is its decayed value; all
// counts are renormalised long before `unit_` overflows.
//
// Bounded: at most kMaxKeys keys. A full table first forgets keys whose decayed count says they
// were last seen more than kReuseWindows windows ago, then, if that was not enough, the
// smaller half of what is left. A forgotten key only loses its history: its next request counts
// as a new key (one home, and not a repeat).
//
// Thread-safety: one mutex; every method locks it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace prefix_router {

class KeyDemand {
 public:
  static constexpr size_t kMaxKeys = 65536;
  // A key counts as a repeat when it was seen within about this many windows: its decayed
  // count is at least exp(-kReuseWindows). Four windows of 128 dispatches per instance are 512
  // requests per instance; an engine's KV cache holds the prompts of a few hundred long
  // requests (llama-70b-h100x8: 1.38M tokens, 172 documents of 8,000 tokens), so a key seen
  // within that span has a fair chance of still being cached, and one not seen for longer
  // little chance. It is a proxy, not a cache model: it only has to tell traffic that repeats
  // (documents, tenants, system prompts) from traffic that does not.
  static constexpr double kReuseWindows = 4;
  // A key dispatched within that span is `seen` (Reading::seen): the same test as a repeat.

  static constexpr double kPriorDispatches = 8;

  struct Reading {
    double share = 0;   // the key's part of the recent dispatches, 0..1
    double reuse = 0;   // the part of the recent dispatches whose key was a repeat, 0..1
    bool seen = false;  // the key was dispatched within about kReuseWindows windows
  };

  // Counts one dispatch of `key`.
  void Count(uint64_t key, double window) {
    std::lock_guard lock(mu_);
    Advance(window);
    double& c = counts_[key];
    const bool repeat = c / unit_ >= std::exp(-kReuseWindows);
    c += unit_;
    total_ += unit_;
    if (repeat) repeats_ += unit_;
    if (counts_.size() > kMaxKeys) Shrink();
  }

  // Reuse starts from a prior of kPriorDispatches repeats, so that the first few dispatches (all
  // new keys) do not read as traffic that never repeats.
  Reading Read(uint64_t key) const {
    std::lock_guard lock(mu_);
    auto it = counts_.find(key);
    const double c = it == counts_.end() ? 0 : it->second / unit_;
    const double total = total_ / unit_;
    const double repeats = repeats_ / unit_;
    return Reading{total > 0 ? c / total : 0, (repeats + kPriorDispatches) / (total + kPriorDispatches),
                   c >= std::exp(-kReuseWindows)};
  }

  size_t size() const {
    std::lock_guard lock(mu_);
    return counts_.size();
  }

 private:
  void Advance(double window) {
    unit_ *= std::exp(1 / std::max(1.0, window));
    if (unit_ > 1e200) {
      for (auto& [key, c] : counts_) c /= unit_;
      total_ /= unit_;
      repeats_ /= unit_;
      unit_ = 1;
    }
  }

  void Shrink() {
    const double stale = unit_ * std::exp(-kReuseWindows);
    std::erase_if(counts_, [&](const auto& kv) { return kv.second < stale; });
    if (counts_.size() <= kMaxKeys / 2) return;
    std::vector<double> values;
    values.reserve(counts_.size());
    for (const auto& kv : counts_) values.push_back(kv.second);
    auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
    std::nth_element(values.begin(), mid, values.end());
    const double median = *mid;
    std::erase_if(counts_, [&](const auto& kv) { return kv.second < median; });
  }

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, double> counts_;  // in units of unit_ at the time of counting
  double total_ = 0;                             // every dispatch, decayed
  double repeats_ = 0;                           // dispatches whose key was a repeat, decayed
  double unit_ = 1;
};

}  // namespace prefix_router
