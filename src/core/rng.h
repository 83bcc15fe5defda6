// Rng: a small, fast, seedable pseudo-random generator (xoshiro256**, seeded by splitmix64).
//
// Policies take an Rng& argument instead of reaching for a global, so the simulator and tests
// are reproducible from a seed. Not thread-safe: give each thread its own.
#pragma once

#include <cstdint>

namespace prefix_router {

// One step of splitmix64 (Steele, Lea and Flood): a fast 64-bit mix of a counter, for seeding
// and for deterministic pseudo-random values derived from ids (the tokenizer, workloads, the
// peers' stand-ins for hash-map order and ring points). Pure; not for security.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed = 0x5eed) {
    for (auto& s : s_) {
      s = Mix64(seed);
      seed += 0x9E3779B97F4A7C15ULL;
    }
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n). REQUIRES: n > 0. Lemire's multiply-shift; the bias is below 2^-32.
  uint32_t Uniform(uint32_t n) { return static_cast<uint32_t>(((Next() >> 32) * static_cast<uint64_t>(n)) >> 32); }

  // Uniform in [0, 1).
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace prefix_router
