#include "core/peer_gie.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace prefix_router {

std::vector<uint64_t> GieHashPrompt(std::string_view model, std::string_view text, uint32_t block_size,
                                    uint32_t max_blocks) {
  std::vector<uint64_t> hashes;
  const size_t limit = std::min<size_t>(text.size(), size_t{block_size} * max_blocks);
  if (limit < block_size) return hashes;
  uint64_t previous = XXH64(model.data(), model.size(), 0);
  XXH64_state_t* state = XXH64_createState();
  hashes.reserve(limit / block_size);
  for (size_t at = 0; at + block_size <= limit; at += block_size) {
    unsigned char le[8];
    for (int k = 0; k < 8; ++k) le[k] = static_cast<unsigned char>(previous >> (8 * k));
    XXH64_reset(state, 0);
    XXH64_update(state, text.data() + at, block_size);
    XXH64_update(state, le, sizeof le);
    previous = XXH64_digest(state);
    hashes.push_back(previous);
  }
  XXH64_freeState(state);
  return hashes;
}

void GiePrefixIndexer::Add(const std::vector<uint64_t>& hashes, Pod pod, uint32_t pod_capacity) {
  auto [at, created] = pods_.try_emplace(pod);
  Lru& lru = at->second;
  if (created) lru.capacity = pod_capacity > 0 ? pod_capacity : capacity_;
  if (lru.capacity == 0) return;
  for (uint64_t h : hashes) {
    if (auto it = lru.where.find(h); it != lru.where.end()) {
      lru.order.splice(lru.order.begin(), lru.order, it->second);
      continue;
    }
    lru.order.push_front(h);
    lru.where.emplace(h, lru.order.begin());
    hash_to_pods_[h].push_back(pod);
    if (lru.order.size() > lru.capacity) {
      const uint64_t old = lru.order.back();
      lru.order.pop_back();
      lru.where.erase(old);
      auto pods = hash_to_pods_.find(old);
      std::erase(pods->second, pod);
      if (pods->second.empty()) hash_to_pods_.erase(pods);
    }
  }
}

std::unordered_map<GiePrefixIndexer::Pod, uint32_t> GiePrefixIndexer::MatchLongestPrefix(
    const std::vector<uint64_t>& hashes) const {
  std::unordered_map<Pod, uint32_t> hits;
  for (uint64_t h : hashes) {
    auto it = hash_to_pods_.find(h);
    if (it == hash_to_pods_.end() || it->second.empty()) break;
    for (Pod p : it->second) ++hits[p];
  }
  return hits;
}

void GiePrefixIndexer::RemovePod(Pod pod) {
  auto it = pods_.find(pod);
  if (it == pods_.end()) return;
  for (uint64_t h : it->second.order) {
    auto pods = hash_to_pods_.find(h);
    if (pods == hash_to_pods_.end()) continue;
    std::erase(pods->second, pod);
    if (pods->second.empty()) hash_to_pods_.erase(pods);
  }
  pods_.erase(it);
}

std::vector<GiePrefixIndexer::Pod> GiePrefixIndexer::Pods() const {
  std::vector<Pod> out;
  for (const auto& [p, lru] : pods_) out.push_back(p);
  return out;
}

size_t GiePrefixIndexer::PodEntries(Pod pod) const {
  auto it = pods_.find(pod);
  return it == pods_.end() ? 0 : it->second.order.size();
}

size_t GiePrefixIndexer::PodCapacity(Pod pod) const {
  auto it = pods_.find(pod);
  return it == pods_.end() ? 0 : it->second.capacity;
}

std::vector<double> GieQueueScores(const std::vector<double>& queues) {
  std::vector<double> scores(queues.size(), 1.0);
  if (queues.empty()) return scores;
  const auto [lo, hi] = std::minmax_element(queues.begin(), queues.end());
  if (*hi == *lo) return scores;
  for (size_t k = 0; k < queues.size(); ++k) scores[k] = (*hi - queues[k]) / (*hi - *lo);
  return scores;
}

GieSchedulerPolicy::GieSchedulerPolicy(GieOptions options, std::string name)
    : options_(options), name_(std::move(name)), indexer_(options.lru_capacity_per_server) {}

GieSchedulerPolicy::Scores GieSchedulerPolicy::Score(const RouteRequest& r, const FleetSnapshot& f) const {
  Scores s;
  for (uint32_t i : f.Eligible(r.served_name)) {
    if (!f.state(i).routable()) continue;
    if (std::find(r.exclude.begin(), r.exclude.end(), i) != r.exclude.end()) continue;
    s.instances.push_back(i);
  }
  const size_t n = s.instances.size();
  const std::vector<uint64_t> hashes =
      GieHashPrompt(r.served_name, r.text, options_.HashBlockSize(), options_.max_prefix_blocks);
  std::unordered_map<GiePrefixIndexer::Pod, uint32_t> hits;
  if (!hashes.empty()) {
    std::lock_guard lock(mu_);
    hits = indexer_.MatchLongestPrefix(hashes);
  }
  std::vector<double> queues(n);
  s.prefix.resize(n);
  s.kv_cache.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const InstanceState& st = f.state(s.instances[k]);
    const int32_t waiting = st.engine_waiting.load(std::memory_order_relaxed);
    queues[k] = waiting >= 0 ? waiting : std::max(0, st.in_flight.load(std::memory_order_relaxed));
    double usage = st.engine_kv_usage.load(std::memory_order_relaxed);
    if (std::isnan(usage)) usage = 0;
    s.kv_cache[k] = std::clamp(1.0 - usage, 0.0, 1.0);
    if (!hashes.empty()) {
      auto it = hits.find(f.placement_seed(s.instances[k]));
      const double count = it == hits.end() ? 0.0 : it->second;
      s.prefix[k] = std::clamp(count / static_cast<double>(hashes.size()), 0.0, 1.0);
    }
  }
  s.queue = GieQueueScores(queues);
  s.total.resize(n);
  for (size_t k = 0; k < n; ++k) {
    // In the default profile's order: queue, KV cache, prefix.
    s.total[k] = options_.queue_weight * std::clamp(s.queue[k], 0.0, 1.0) + options_.kv_cache_weight * s.kv_cache[k] +
                 options_.prefix_weight * s.prefix[k];
  }
  return s;
}

Result<Decision> GieSchedulerPolicy::Pick(const RouteRequest& r, const FleetSnapshot& f, Rng& rng) const {
  const Scores s = Score(r, f);
  if (s.instances.empty()) {
    const std::string what = r.served_name.empty() ? "the default pool" : "'" + std::string(r.served_name) + "'";
    if (f.Eligible(r.served_name).empty()) return Status::Unavailable("no instance serves " + what);
    return Status::Unavailable("no available instance left for " + what);
  }
  size_t best = 0;
  uint32_t ties = 1;
  double best_prefix = s.prefix[0];
  for (size_t k = 1; k < s.instances.size(); ++k) {
    best_prefix = std::max(best_prefix, s.prefix[k]);
    if (s.total[k] > s.total[best]) {
      best = k;
      ties = 1;
    } else if (s.total[k] == s.total[best] && rng.Uniform(++ties) == 0) {
      best = k;
    }
  }
  DecisionKind kind = DecisionKind::kLeastOutstanding;  // no instance holds any block
  if (best_prefix > 0) kind = s.prefix[best] == best_prefix ? DecisionKind::kAffinity : DecisionKind::kOverflow;
  return Decision{s.instances[best], kind, 0};
}

void GieSchedulerPolicy::OnDispatched(const RouteRequest& r, const Decision& d, const FleetSnapshot& f) {
  const std::vector<uint64_t> hashes =
      GieHashPrompt(r.served_name, r.text, options_.HashBlockSize(), options_.max_prefix_blocks);
  std::lock_guard lock(mu_);
  // Pods gone from the pool leave the index (GIE checks every 2 minutes; here at the next dispatch).
  for (GiePrefixIndexer::Pod p : indexer_.Pods()) {
    bool present = false;
    for (uint32_t i = 0; i < f.size() && !present; ++i) present = f.placement_seed(i) == p;
    if (!present) indexer_.RemovePod(p);
  }
  if (d.instance < f.size() && !hashes.empty()) {
    indexer_.Add(hashes, f.placement_seed(d.instance), options_.LruCapacity());
  }
}

}  // namespace prefix_router
