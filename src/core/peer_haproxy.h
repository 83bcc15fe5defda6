// Our re-implementation of HAProxy's published consistent hashing with bounded loads
// (`balance hash` / `hash-type consistent` with `hash-balance-factor`), for side-by-side comparison
// in the simulator (issue 7). Not HAProxy's code: a re-implementation from the notes in
// docs/research/peers.md section 4, which paraphrase src/lb_chash.c (a 2.x copy holding
// chash_server_is_eligible and chash_get_server_hash; the feature dates from HAProxy 1.7, commit
// "MEDIUM: server: Implement bounded-load hash algorithm", 2016) and the hash-balance-factor
// section of doc/configuration.txt.
//
// Ring: a 32-bit ring with weight x 16 (BE_WEIGHT_SCALE) points per server; a server's effective
// weight is also weight x 16. Where HAProxy places a server's points by hashing its numeric id
// (hash-key id), we hash its placement seed with the point number. The request's 32-bit hash is
// the low 32 bits of its prefix key (RouteRequest::key: the first prefix_length characters, as
// prefix-aware keys). Lookup takes the nearer of the next point at or after the hash and the one
// before it (the one before on a tie), then walks clockwise while the server is to be avoided (a
// retry's excluded instances) or, with a balance factor, is not eligible; after wrapping past the
// ring's start a second time it gives up and keeps the server it is on (the last point's), as
// HAProxy does (never "no server"). Only where that server is one the retry excludes do we walk
// on to the next server not excluded (our Pick never returns an excluded instance).
//
// Bounded loads (F = hash_balance_factor, a percentage; 0 = off, HAProxy's default):
//   tot_slots = ceil((served + 1) x F / 100), served = requests in flight over the pool's
//   instances (the +1 is the request being placed); per_weight = tot_slots / W, rem = tot_slots
//   mod W, W = the routable servers' effective weights summed;
//   slots(s) = w_s x per_weight + floor((c_s + w_s) x rem / W) - floor(c_s x rem / W), at least 1,
//   c_s = the effective weights of the servers before s in snapshot order;
//   eligible iff in_flight(s) < slots(s).
//
// Thread-safety: the policy is stateless apart from a per-thread cache of the last ring built.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/policy.h"

namespace prefix_router {

inline constexpr uint32_t kHaproxyWeightScale = 16;  // BE_WEIGHT_SCALE
// The factor we run at. HAProxy's default is 0, which turns bounded loads off (plain consistent
// hashing: haproxy-chash-bl-f0); its documentation's example is 150 ("no server above 1.5x the
// average"), inside the 125-200 it calls reasonable, so that is our default.
inline constexpr uint32_t kHaproxyDefaultBalanceFactor = 150;

// The slot formula above.
uint64_t HaproxyTotalSlots(uint64_t served, uint32_t factor);
uint64_t HaproxyServerSlots(uint64_t tot_slots, uint64_t tot_weight, uint64_t cumulative_weight, uint64_t weight);

// A consistent-hash ring over servers 0..n-1 (their positions in `seeds`).
class HaproxyRing {
 public:
  // REQUIRES: seeds.size() == weights.size(); weights >= 1.
  HaproxyRing(std::span<const uint64_t> seeds, std::span<const uint32_t> weights);
  struct Point {
    uint32_t key;
    uint32_t server;
  };
  // Index of the point a hash starts from (the nearer neighbour). REQUIRES: !empty().
  size_t Start(uint32_t hash) const;
  const std::vector<Point>& points() const { return points_; }
  bool empty() const { return points_.empty(); }

 private:
  std::vector<Point> points_;  // by key, then server
};

class HaproxyChashPolicy final : public Policy {
 public:
  HaproxyChashPolicy(uint32_t balance_factor, std::string name);
  Result<Decision> Pick(const RouteRequest& request, const FleetSnapshot& fleet, Rng& rng) const override;
  std::string_view name() const override { return name_; }

 private:
  const uint32_t factor_;
  const std::string name_;
};

}  // namespace prefix_router
