#include "core/peer_haproxy.h"

#include <algorithm>
#include <memory>

#include "core/rng.h"

namespace prefix_router {

uint64_t HaproxyTotalSlots(uint64_t served, uint32_t factor) { return ((served + 1) * factor + 99) / 100; }

uint64_t HaproxyServerSlots(uint64_t tot_slots, uint64_t tot_weight, uint64_t cumulative_weight, uint64_t weight) {
  if (tot_weight == 0) return 1;
  const uint64_t per_weight = tot_slots / tot_weight;
  const uint64_t rem = tot_slots % tot_weight;
  uint64_t slots =
      weight * per_weight + (cumulative_weight + weight) * rem / tot_weight - cumulative_weight * rem / tot_weight;
  return slots == 0 ? 1 : slots;
}

HaproxyRing::HaproxyRing(std::span<const uint64_t> seeds, std::span<const uint32_t> weights) {
  for (uint32_t s = 0; s < seeds.size(); ++s) {
    const uint64_t n = uint64_t{weights[s]} * kHaproxyWeightScale;
    for (uint64_t p = 0; p < n; ++p) {
      points_.push_back(Point{static_cast<uint32_t>(Mix64(seeds[s] ^ Mix64(p))), s});
    }
  }
  std::sort(points_.begin(), points_.end(),
            [](const Point& a, const Point& b) { return a.key != b.key ? a.key < b.key : a.server < b.server; });
}

size_t HaproxyRing::Start(uint32_t hash) const {
  auto it =
      std::lower_bound(points_.begin(), points_.end(), hash, [](const Point& p, uint32_t h) { return p.key < h; });
  const size_t next = it == points_.end() ? 0 : static_cast<size_t>(it - points_.begin());
  const size_t prev = next == 0 ? points_.size() - 1 : next - 1;
  const uint32_t dp = hash - points_[prev].key;  // distances on the ring (wrapping)
  const uint32_t dn = points_[next].key - hash;
  return dp <= dn ? prev : next;
}

HaproxyChashPolicy::HaproxyChashPolicy(uint32_t balance_factor, std::string name)
    : factor_(balance_factor), name_(std::move(name)) {}

Result<Decision> HaproxyChashPolicy::Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const {
  const std::span<const uint32_t> eligible = f.Eligible(r.served_name);
  const std::string what = r.served_name.empty() ? "the default pool" : "'" + std::string(r.served_name) + "'";
  if (eligible.empty()) return Status::Unavailable("no instance serves " + what);
  // The ring holds the routable servers (HAProxy takes down servers' points off the ring).
  thread_local std::vector<uint32_t> servers;
  thread_local std::vector<uint64_t> seeds;
  thread_local std::vector<uint32_t> weights;
  servers.clear();
  std::vector<uint64_t> want_seeds;
  std::vector<uint32_t> want_weights;
  uint64_t served = 0;
  for (uint32_t i : eligible) {
    served += static_cast<uint64_t>(std::max(0, f.state(i).in_flight.load(std::memory_order_relaxed)));
    if (!f.state(i).routable()) continue;
    servers.push_back(i);
    want_seeds.push_back(f.placement_seed(i));
    want_weights.push_back(f.spec(i).weight);
  }
  const auto excluded = [&](uint32_t i) { return std::find(r.exclude.begin(), r.exclude.end(), i) != r.exclude.end(); };
  bool any = false;
  for (uint32_t i : servers) any = any || !excluded(i);
  if (!any) return Status::Unavailable("no available instance left for " + what);
  // One ring per thread, rebuilt when the servers or their weights change.
  thread_local std::unique_ptr<HaproxyRing> ring;
  if (!ring || want_seeds != seeds || want_weights != weights) {
    seeds = want_seeds;
    weights = want_weights;
    ring = std::make_unique<HaproxyRing>(seeds, weights);
  }
  const auto& points = ring->points();

  uint64_t tot_weight = 0;
  std::vector<uint64_t> cumulative(servers.size());
  for (size_t s = 0; s < servers.size(); ++s) {
    cumulative[s] = tot_weight;
    tot_weight += uint64_t{weights[s]} * kHaproxyWeightScale;
  }
  const uint64_t tot_slots = HaproxyTotalSlots(served, factor_);
  const auto eligible_by_load = [&](uint32_t s) {
    const uint64_t slots =
        HaproxyServerSlots(tot_slots, tot_weight, cumulative[s], uint64_t{weights[s]} * kHaproxyWeightScale);
    return static_cast<uint64_t>(std::max(0, f.state(servers[s]).in_flight.load(std::memory_order_relaxed))) < slots;
  };

  size_t pos = ring->Start(static_cast<uint32_t>(r.key.placement_hash()));
  uint32_t server = points[pos].server;
  uint32_t steps = 0;
  int loops = 0;
  bool gave_up = false;
  while (excluded(servers[server]) || (factor_ != 0 && !eligible_by_load(server))) {
    ++pos;
    if (pos == points.size()) {
      pos = 0;
      if (++loops > 1) {  // wrapped twice: keep the server we are on
        gave_up = true;
        break;
      }
    }
    server = points[pos].server;
    ++steps;
  }
  if (gave_up && excluded(servers[server])) {
    // Our contract: never an excluded instance. Walk on to the next server not excluded.
    while (excluded(servers[points[pos].server])) pos = (pos + 1) % points.size();
    server = points[pos].server;
  }
  const DecisionKind kind = gave_up      ? DecisionKind::kSaturated
                            : steps == 0 ? DecisionKind::kAffinity
                                         : DecisionKind::kOverflow;
  return Decision{servers[server], kind, steps};
}

}  // namespace prefix_router
