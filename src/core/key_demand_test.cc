#include "core/key_demand.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace prefix_router {
namespace {

uint64_t Key(uint64_t i) { return (i + 1) * 0x9E3779B97F4A7C15ULL; }

// With no dispatch counted, no key has a share and reuse is the prior's (all repeats).
TEST(KeyDemandTest, EmptyReadsNoShareAndThePrior) {
  KeyDemand d;
  const KeyDemand::Reading r = d.Read(Key(1));
  EXPECT_EQ(r.share, 0);
  EXPECT_DOUBLE_EQ(r.reuse, 1);
}

// Shares follow the mix of recent dispatches: one key in three dispatches reads about 1/3.
TEST(KeyDemandTest, ShareIsTheKeysPartOfRecentDispatches) {
  KeyDemand d;
  for (uint64_t n = 0; n < 3000; ++n) d.Count(n % 3 == 0 ? Key(0) : Key(1 + n), 1000);
  EXPECT_NEAR(d.Read(Key(0)).share, 1.0 / 3, 0.01);
  EXPECT_LT(d.Read(Key(5)).share, 0.002);
  EXPECT_EQ(d.Read(Key(999999)).share, 0);
}

// Old dispatches fade: a key that had all the traffic and then none falls to about
// exp(-k) after k windows.
TEST(KeyDemandTest, SharesDecayWithTheWindow) {
  KeyDemand d;
  for (int n = 0; n < 5000; ++n) d.Count(Key(0), 100);
  EXPECT_NEAR(d.Read(Key(0)).share, 1, 1e-6);
  for (int n = 0; n < 200; ++n) d.Count(Key(1 + n % 50), 100);
  EXPECT_NEAR(d.Read(Key(0)).share, std::exp(-2.0), 0.005);
}

// Reuse is the part of recent dispatches whose key was seen recently: a rotation over 10 keys
// repeats all the time; a stream of keys never seen before does not.
TEST(KeyDemandTest, ReuseTellsRepeatingTrafficFromNew) {
  KeyDemand repeating, fresh;
  for (uint64_t n = 0; n < 5000; ++n) {
    repeating.Count(Key(n % 10), 500);
    fresh.Count(Key(n), 500);
  }
  EXPECT_GT(repeating.Read(Key(0)).reuse, 0.99);
  EXPECT_LT(fresh.Read(Key(0)).reuse, 0.03);  // the prior's 8 over ~500 decayed dispatches
}

// A key seen long ago (more than kReuseWindows windows) is no longer a repeat.
TEST(KeyDemandTest, AKeyLastSeenLongAgoIsNew) {
  KeyDemand d;
  d.Count(Key(0), 10);
  for (uint64_t n = 0; n < 100; ++n) d.Count(Key(100 + n), 10);  // 10 windows of new keys
  const double before = d.Read(Key(1)).reuse;
  d.Count(Key(0), 10);
  EXPECT_LT(d.Read(Key(1)).reuse, before);  // counted as new: reuse fell further
}

TEST(KeyDemandTest, NeverHoldsMoreThanItsBound) {
  KeyDemand d;
  for (uint64_t n = 0; n < 3 * KeyDemand::kMaxKeys; ++n) d.Count(Key(n), 1e9);  // nothing decays
  EXPECT_LE(d.size(), KeyDemand::kMaxKeys);
  EXPECT_GE(d.size(), KeyDemand::kMaxKeys / 4);
}

// Counts stay finite over far more dispatches than one renormalisation needs.
TEST(KeyDemandTest, RenormalisesLongRuns) {
  KeyDemand d;
  for (uint64_t n = 0; n < 200000; ++n) d.Count(Key(n % 2), 100);  // unit grows by e^2000
  EXPECT_NEAR(d.Read(Key(0)).share, 0.5, 0.01);
  EXPECT_GT(d.Read(Key(0)).reuse, 0.99);
}

}  // namespace
}  // namespace prefix_router
