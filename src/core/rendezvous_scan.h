// Rendezvous scans: the uniform-weight preference score of many candidates at once, and the
// picks the policies take from it (the best, the best two, how many rank above a given one).
//
// Placement (core/placement.h) scores each candidate with RendezvousHash(key, its seed): two
// dependent multiplies and three shift-xors, about 20 instructions per candidate in a scalar
// loop with the compare, a third of a prefix-aware decision over 10,000 instances. The hash is
// integer arithmetic and the order is total (score, then index), so the same arithmetic on 8
// candidates at once (AVX-512: its 64-bit multiply) gives the scalar loop's results bit for bit:
// placement does not change, only its cost. Each lane keeps its own best (and second best) and
// the lanes are merged at the end. Candidates in index order whose 8 seeds are contiguous in
// the fleet (one pool over the whole fleet, all routable: the usual case) are loaded at once,
// others gathered. On this project's 2-core VM (placement_bench BM_RendezvousBest, 10,000
// candidates) that is 2.5x the scalar loop's rate, 1.9x gathered. AVX2 has no 64-bit multiply:
// emulated with three 32-bit ones it was no faster than the scalar loop, so it is not used.
//
// The kernel is chosen once per process from the CPU (cpuid): AVX-512 F and DQ, else the scalar
// loop. Lists under 256 candidates take the scalar loop in every kernel (the reason is at
// kVectorFrom). Valgrind's CPU has no AVX-512, so scripts/bench-decision.sh's instruction counts are the
// scalar loop's. Weighted fleets (a logarithm per candidate) keep the scalar path in
// placement.cc.
//
// Candidates are given as positions into a seed array (the fleet's placement seeds); results
// are positions in the candidate list. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace prefix_router {

// RendezvousHash's multipliers (the vector kernels repeat its steps).
inline constexpr uint64_t kRendezvousMul1 = 0x3C79AC492BA7B653ULL;
inline constexpr uint64_t kRendezvousMul2 = 0x1C69B3F74AC4AE35ULL;

// A well-mixed 64-bit score for (key, instance seed).
inline uint64_t RendezvousHash(uint64_t key_hash, uint64_t instance_seed) {
  uint64_t x = key_hash ^ instance_seed;
  x ^= x >> 27;
  x *= kRendezvousMul1;
  x ^= x >> 33;
  x *= kRendezvousMul2;
  x ^= x >> 27;
  return x;
}

namespace rendezvous_scan {

// Positions in the candidate list; `second` is kNone when there is one candidate.
inline constexpr size_t kNone = SIZE_MAX;
struct BestTwo {
  size_t first;
  size_t second;
};

// Every function takes the key, the seed array and the candidates (indices into it); candidate
// k's score is RendezvousHash(key, seeds[candidates[k]]), and k ranks before j when its score is
// higher or, at equal scores, its index (candidates[k]) is lower.
struct Kernel {
  const char* name;
  // The position of the best candidate. REQUIRES: n >= 1
  size_t (*best)(uint64_t key, const uint64_t* seeds, const uint32_t* candidates, size_t n);
  // The positions of the best two. REQUIRES: n >= 1
  BestTwo (*best_two)(uint64_t key, const uint64_t* seeds, const uint32_t* candidates, size_t n);
  // out[k] = candidate k's score, for k < n.
  void (*scores)(uint64_t key, const uint64_t* seeds, const uint32_t* candidates, size_t n, uint64_t* out);
  // How many candidates score above `score`, not counting those whose seed is `skip_seed`.
  size_t (*count_above)(uint64_t key, const uint64_t* seeds, const uint32_t* candidates, size_t n, uint64_t score,
                        uint64_t skip_seed);
};

// The kernels this CPU runs, the scalar one first (tests compare every other with it).
std::span<const Kernel> Available();
// The widest of them, chosen on first use.
const Kernel& Best();

}  // namespace rendezvous_scan
}  // namespace prefix_router
