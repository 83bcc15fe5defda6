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
// Cost: one 64-bit mix per candidate for the first choice (plus a log when weights differ);
// a sort of the candidates only when the first choice cannot take the request.
//
// Thread-safety: pure functions over immutable snapshots.
#pragma once

#include <cstdint>
#include <span>

#include "core/fleet.h"

namespace prefix_router {

// A well-mixed 64-bit score for (key, instance seed).
inline uint64_t RendezvousHash(uint64_t key_hash, uint64_t instance_seed) {
  uint64_t x = key_hash ^ instance_seed;
  x ^= x >> 27;
  x *= 0x3C79AC492BA7B653ULL;
  x ^= x >> 33;
  x *= 0x1C69B3F74AC4AE35ULL;
  x ^= x >> 27;
  return x;
}

// Preference of instance `i` for the key: higher is preferred. With uniform weights it is the
// rendezvous hash itself; otherwise an order-preserving encoding of -ln(u)/w (lower wins).
uint64_t PreferenceScore(uint64_t key_hash, const FleetSnapshot& fleet, uint32_t i);

// The most preferred of `candidates`. REQUIRES: candidates is not empty.
uint32_t MostPreferred(uint64_t key_hash, const FleetSnapshot& fleet, std::span<const uint32_t> candidates);

// Sorts `candidates` in place, most preferred first.
void SortByPreference(uint64_t key_hash, const FleetSnapshot& fleet, std::span<uint32_t> candidates);

}  // namespace prefix_router
