#include "core/rendezvous_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace prefix_router::rendezvous_scan {
namespace {

// The contract, written plainly: candidate positions ordered by score (higher first), then by
// index (lower first), then by position (the earlier first).
std::vector<size_t> Ranked(uint64_t key, const std::vector<uint64_t>& seeds, const std::vector<uint32_t>& c) {
  std::vector<size_t> order(c.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const uint64_t sa = RendezvousHash(key, seeds[c[a]]), sb = RendezvousHash(key, seeds[c[b]]);
    return sa != sb ? sa > sb : c[a] < c[b];
  });
  return order;
}

// Checks every kernel against the plain contract on one candidate list.
void ExpectAllKernelsAgree(uint64_t key, const std::vector<uint64_t>& seeds, const std::vector<uint32_t>& c,
                           const std::string& what) {
  const std::vector<size_t> ranked = Ranked(key, seeds, c);
  std::vector<uint64_t> want_scores(c.size());
  for (size_t k = 0; k < c.size(); ++k) want_scores[k] = RendezvousHash(key, seeds[c[k]]);
  // The rank of a middle candidate, by counting (skipping its own seed, as FindHome does).
  const size_t probe = ranked[ranked.size() / 2];
  const uint64_t probe_seed = seeds[c[probe]], probe_score = RendezvousHash(key, probe_seed);
  size_t want_above = 0;
  for (uint32_t i : c) want_above += seeds[i] != probe_seed && RendezvousHash(key, seeds[i]) > probe_score;
  for (const Kernel& kernel : Available()) {
    SCOPED_TRACE(std::string(kernel.name) + ", " + what + ", " + std::to_string(c.size()) + " candidates");
    EXPECT_EQ(kernel.best(key, seeds.data(), c.data(), c.size()), ranked[0]);
    const BestTwo two = kernel.best_two(key, seeds.data(), c.data(), c.size());
    EXPECT_EQ(two.first, ranked[0]);
    EXPECT_EQ(two.second, c.size() > 1 ? ranked[1] : kNone);
    std::vector<uint64_t> scores(c.size(), 0);
    kernel.scores(key, seeds.data(), c.data(), c.size(), scores.data());
    EXPECT_EQ(scores, want_scores);
    EXPECT_EQ(kernel.count_above(key, seeds.data(), c.data(), c.size(), probe_score, probe_seed), want_above);
    // Without the skip (a seed no candidate has), the probe's equal score is not above itself.
    EXPECT_EQ(kernel.count_above(key, seeds.data(), c.data(), c.size(), probe_score, ~probe_seed ^ 1),
              want_above);
  }
}

// The kernels run on this CPU include the scalar reference, first, and the one in use.
TEST(RendezvousScanTest, ScalarFirstAndTheWidestInUse) {
  ASSERT_FALSE(Available().empty());
  EXPECT_STREQ(Available().front().name, "scalar");
  EXPECT_STREQ(Best().name, Available().back().name);
}

// Every kernel gives the scalar order's results, over sizes around the vector widths and large
// fleets, candidates in index order (as Candidates gives them) or shuffled, all or some.
TEST(RendezvousScanTest, EveryKernelMatchesTheContract) {
  std::mt19937_64 rng(12345);
  std::vector<uint64_t> seeds(12000);
  for (uint64_t& s : seeds) s = rng();
  std::vector<size_t> sizes;
  // Small lists take the scalar loop in every kernel; from 256 the vector lanes and their tail.
  for (size_t n = 1; n <= 20; ++n) sizes.push_back(n);
  for (size_t n = 250; n <= 270; ++n) sizes.push_back(n);
  sizes.insert(sizes.end(), {1000, 1024, 10000});
  for (size_t n : sizes) {
    for (int round = 0; round < 3; ++round) {
      const uint64_t key = rng();
      std::vector<uint32_t> all(seeds.size());
      std::iota(all.begin(), all.end(), 0u);
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<uint32_t> some(all.begin(), all.begin() + static_cast<ptrdiff_t>(n));
      ExpectAllKernelsAgree(key, seeds, some, "shuffled");
      std::sort(some.begin(), some.end());
      ExpectAllKernelsAgree(key, seeds, some, "ascending");
      std::vector<uint32_t> prefix(n);
      std::iota(prefix.begin(), prefix.end(), 0u);
      ExpectAllKernelsAgree(key, seeds, prefix, "the first n");
    }
  }
}

// Equal scores (two instances with one seed, or one instance listed twice) order by index,
// then position, as the scalar loop does, wherever they fall among the vector lanes.
TEST(RendezvousScanTest, EqualScoresKeepTheScalarOrder) {
  std::mt19937_64 rng(7);
  for (size_t n : {2, 5, 9, 256, 257, 263, 300}) {
    for (int round = 0; round < 20; ++round) {
      std::vector<uint64_t> seeds(n);
      for (uint64_t& s : seeds) s = rng();
      const uint64_t key = rng();
      std::vector<uint32_t> c(n);
      std::iota(c.begin(), c.end(), 0u);
      // The best instance's seed given to another (a lower or higher index), so they tie at the top.
      const size_t top = Ranked(key, seeds, c)[0];
      const size_t twin = rng() % n;
      seeds[twin] = seeds[top];
      ExpectAllKernelsAgree(key, seeds, c, "seed shared by " + std::to_string(top) + " and " + std::to_string(twin));
      // One instance listed twice.
      std::vector<uint32_t> repeated = c;
      repeated.push_back(static_cast<uint32_t>(rng() % n));
      std::shuffle(repeated.begin(), repeated.end(), rng);
      ExpectAllKernelsAgree(key, seeds, repeated, "an instance listed twice");
    }
  }
}

// A candidate whose score is 0 (the lanes' starting value) is still found.
TEST(RendezvousScanTest, AScoreOfZeroIsACandidateLikeAnyOther) {
  // RendezvousHash is a bijection of key ^ seed, and 0 maps to 0: seed == key scores 0.
  const uint64_t key = 0x1234567890abcdefULL;
  ASSERT_EQ(RendezvousHash(key, key), 0u);
  for (size_t n : {1, 4, 9, 256, 265}) {
    std::vector<uint64_t> seeds(n, key);  // every candidate scores 0: the lowest index wins
    std::vector<uint32_t> c(n);
    std::iota(c.rbegin(), c.rend(), 0u);  // listed in descending index order
    ExpectAllKernelsAgree(key, seeds, c, "all zero");
  }
}

}  // namespace
}  // namespace prefix_router::rendezvous_scan
