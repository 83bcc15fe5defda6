// A small deterministic generator for randomised tests: the same sequence on every platform and
// standard library (Knuth's MMIX linear congruential step, high bits), so a failing step number
// reproduces anywhere.
#pragma once

#include <cstdint>

namespace prefix_router::testing {

class TestLcg {
 public:
  explicit TestLcg(uint64_t seed) : x_(seed) {}
  // A value in [0, n). REQUIRES: n > 0
  uint64_t operator()(uint64_t n) {
    x_ = x_ * 6364136223846793005ull + 1442695040888963407ull;
    return (x_ >> 33) % n;
  }

 private:
  uint64_t x_;
};

}  // namespace prefix_router::testing
