#include "core/block_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "testing/test_lcg.h"

namespace prefix_router {
namespace {

// A chain of n distinct hashes starting at `base`.
std::vector<uint64_t> Chain(uint64_t base, size_t n) {
  std::vector<uint64_t> c;
  for (size_t i = 0; i < n; ++i) c.push_back(base * 1000003 + i);
  return c;
}

std::vector<uint32_t> MatchAll(const BlockIndex& index, const std::vector<uint64_t>& chain,
                               const std::vector<uint64_t>& seeds) {
  std::vector<uint32_t> out(seeds.size(), 99);
  index.Match(chain, seeds, out);
  return out;
}

// An instance matches the leading blocks of a chain it was sent, and nothing of others.
TEST(BlockIndexTest, MatchesLeadingBlocksPerInstance) {
  BlockIndex index({});
  const auto doc = Chain(1, 10);
  index.Insert(std::span(doc).first(6), /*seed=*/100);
  index.Insert(doc, 200);
  EXPECT_EQ(MatchAll(index, doc, {100, 200, 300}), (std::vector<uint32_t>{6, 10, 0}));
  // A request sharing the first 3 blocks only (chained hashes diverge after).
  auto other = Chain(1, 3);
  for (uint64_t h : Chain(2, 5)) other.push_back(h);
  EXPECT_EQ(MatchAll(index, other, {100, 200}), (std::vector<uint32_t>{3, 3}));
  EXPECT_EQ(MatchAll(index, {}, {100}), (std::vector<uint32_t>{0}));
  EXPECT_EQ(index.entries(), 16u);
  EXPECT_EQ(index.entries(100), 6u);
}

// Per-instance capacity: the least recently used blocks go first, and a chain is forgotten from
// its end, so what stays is still a matchable prefix.
TEST(BlockIndexTest, PerInstanceCapacityEvictsLeastRecentlyUsedFromChainEnds) {
  BlockIndex index({.blocks_per_instance = 10, .max_bytes = 1 << 20});
  const auto a = Chain(1, 6);
  const auto b = Chain(2, 6);
  index.Insert(a, 1);
  index.Insert(b, 1);  // 12 > 10: a's last two blocks go
  EXPECT_EQ(index.entries(1), 10u);
  EXPECT_EQ(MatchAll(index, a, {1})[0], 4u);
  EXPECT_EQ(MatchAll(index, b, {1})[0], 6u);
  index.Insert(a, 1);  // a is the most recent again: b loses its tail
  EXPECT_EQ(MatchAll(index, a, {1})[0], 6u);
  EXPECT_EQ(MatchAll(index, b, {1})[0], 4u);
  // Matching does not refresh recency: only dispatches (Insert) do.
  for (int i = 0; i < 5; ++i) MatchAll(index, b, {1});
  index.Insert(Chain(3, 2), 1);
  EXPECT_EQ(MatchAll(index, b, {1})[0], 2u);
  EXPECT_EQ(MatchAll(index, a, {1})[0], 6u);
}

// The global bound: past max_bytes the instance holding the most blocks forgets its oldest.
TEST(BlockIndexTest, GlobalBoundEvictsFromTheLargestInstance) {
  const size_t max_bytes = 64 << 10;
  BlockIndex index({.blocks_per_instance = 1 << 20, .max_bytes = max_bytes});
  for (uint64_t base = 1; base <= 1000; ++base) index.Insert(Chain(base, 10), 1);
  EXPECT_LE(index.bytes(), max_bytes);
  const size_t held = index.entries(1);
  EXPECT_LT(held, 10000u);
  EXPECT_GT(held, 0u);
  EXPECT_EQ(MatchAll(index, Chain(1000, 10), {1})[0], 10u);  // the newest stays
  EXPECT_EQ(MatchAll(index, Chain(1, 10), {1})[0], 0u);      // the oldest went
  index.Insert(Chain(5000, 20), 2);                          // instance 1, the largest, makes room
  EXPECT_EQ(index.entries(2), 20u);
  EXPECT_LT(index.entries(1), held);
  EXPECT_LE(index.bytes(), max_bytes);
  for (uint64_t base = 10; base < 2000; ++base) {
    index.Insert(Chain(base, 7), base % 5);
    ASSERT_LE(index.bytes(), max_bytes) << base;
  }
  EXPECT_GT(index.entries(), 0u);
}

// The bound is enforced on a byte count kept per change (no pass over every instance per
// dispatch): under random inserts, capacity changes and forgotten instances it stays under
// max_bytes and (in debug builds, where bytes() checks it) equal to the recomputed count.
TEST(BlockIndexTest, TrackedBytesFollowRandomInserts) {
  const size_t max_bytes = 48 << 10;
  BlockIndex index({.blocks_per_instance = 2000, .max_bytes = max_bytes});
  testing::TestLcg next(5);
  for (int step = 0; step < 5000; ++step) {
    const uint64_t inst = next(20);
    const uint64_t what = next(100);
    if (what < 2) {
      index.ForgetInstance(inst);
    } else if (what < 4) {
      index.SetCapacity(inst, next(3) * 100);
    } else {
      index.Insert(Chain(1 + next(3000), 1 + next(30)), inst);
    }
    ASSERT_LE(index.bytes(), max_bytes) << "step " << step;
  }
  EXPECT_GT(index.entries(), 0u);
}

// bytes() counts what the containers hold: it grows with the blocks held, falls back to one
// empty instance's record when they are forgotten, and an empty index is small.
TEST(BlockIndexTest, BytesFollowsTheContainers) {
  BlockIndex index({.blocks_per_instance = 1 << 20, .max_bytes = 1 << 30});
  const size_t empty = index.bytes();
  EXPECT_GT(empty, 0u);
  EXPECT_LT(empty, 1024u);
  index.Insert(Chain(1, 10000), 1);
  const size_t full = index.bytes();
  // A hash slot (16 bytes) and an LRU node (16) at least per block, not double the estimate.
  EXPECT_GE(full, 10000u * 32);
  EXPECT_LE(full, 10000u * 2 * BlockIndex::kBytesPerEntry);
  index.SetCapacity(1, 1);
  index.SetCapacity(1, 0);  // back to the default: nothing comes back
  // One block left: its containers at their smallest (a group of hash slots, the node vector's
  // headroom, the first-block list), a few hundred bytes, not the 10,000 blocks' capacity.
  EXPECT_LT(index.bytes(), empty + 2048);
  EXPECT_EQ(index.entries(), 1u);
}

// Filling instances one after another moves the bound's entries from each to the next: bytes()
// never exceeds the bound, and the instances that gave their blocks up give their memory back
// (the index still holds about as many blocks as the bound allows, not the few that fit beside
// their peak's empty capacity).
TEST(BlockIndexTest, BoundHoldsWhileEntriesMoveAcrossInstances) {
  const size_t max_bytes = 1 << 20;
  BlockIndex index({.blocks_per_instance = 1 << 20, .max_bytes = max_bytes});
  uint64_t base = 1;
  for (uint64_t seed = 1; seed <= 7; ++seed) {
    for (int c = 0; c < 400; ++c) {
      index.Insert(Chain(base++, 125), seed);
      ASSERT_LE(index.bytes(), max_bytes) << seed << " " << c;
    }
  }
  // 50,000 blocks went to each instance; the last one holds the most.
  size_t total = 0;
  for (uint64_t seed = 1; seed <= 7; ++seed) total += index.entries(seed);
  EXPECT_EQ(total, index.entries());
  EXPECT_GE(index.entries(7), index.entries(1));
  EXPECT_GE(index.entries(), max_bytes / BlockIndex::kBytesPerEntry * 3 / 4);
  // Uneven dispatches over all of them: the bound still holds, every instance keeps some.
  for (int c = 0; c < 2000; ++c) {
    index.Insert(Chain(base++, 125), c % 10 < 7 ? 1 : 2 + c % 5);
    ASSERT_LE(index.bytes(), max_bytes) << c;
  }
  for (uint64_t seed = 1; seed <= 7; ++seed) EXPECT_GT(index.entries(seed), 0u) << seed;
  EXPECT_GE(index.entries(), max_bytes / BlockIndex::kBytesPerEntry * 3 / 4);
}

// Compacting an instance (here after SetCapacity shrinks it far below its peak) keeps every held
// block and their recency order: from then on it answers and evicts exactly as an instance that
// never grew.
TEST(BlockIndexTest, CompactionKeepsHeldBlocksAndRecencyOrder) {
  BlockIndex grown({.blocks_per_instance = 1 << 20, .max_bytes = 1 << 30});
  BlockIndex small({.blocks_per_instance = 35, .max_bytes = 1 << 30});
  std::vector<std::vector<uint64_t>> chains;
  for (uint64_t base = 1; base <= 200; ++base) chains.push_back(Chain(base, 1 + base % 9));
  // Both are sent the same chains, with reuse, so the recency order is not the insertion order.
  uint64_t x = 12345;
  auto next = [&x] { return (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int k = 0; k < 3000; ++k) {
    const auto& c = chains[next() % chains.size()];
    grown.Insert(c, 1);
    small.Insert(c, 1);
  }
  const size_t before = grown.bytes();
  grown.SetCapacity(1, 35);
  EXPECT_LT(grown.bytes(), before / 4);  // compacted: the peak's memory is given back
  EXPECT_EQ(grown.entries(1), small.entries(1));
  auto same = [&] {
    for (const auto& c : chains) {
      if (MatchAll(grown, c, {1}) != MatchAll(small, c, {1})) return false;
    }
    return true;
  };
  EXPECT_TRUE(same());
  for (int k = 0; k < 500; ++k) {
    const auto& c = chains[next() % chains.size()];
    grown.Insert(c, 1);
    small.Insert(c, 1);
    ASSERT_TRUE(same()) << k;
  }
}

// Capacity per instance (e.g. read from its metrics) and leaving instances.
TEST(BlockIndexTest, SetCapacityShrinksAndForgetInstanceDrops) {
  BlockIndex index({.blocks_per_instance = 100, .max_bytes = 1 << 20});
  const auto doc = Chain(1, 50);
  index.Insert(doc, 1);
  index.Insert(doc, 2);
  index.SetCapacity(1, 20);
  EXPECT_EQ(MatchAll(index, doc, {1, 2}), (std::vector<uint32_t>{20, 50}));
  index.ForgetInstance(2);
  EXPECT_EQ(MatchAll(index, doc, {1, 2}), (std::vector<uint32_t>{20, 0}));
  EXPECT_EQ(index.entries(), 20u);
  index.ForgetInstance(99);  // unknown: nothing happens
  EXPECT_EQ(index.entries(), 20u);
}

// The binary search agrees with a linear walk on chains held in part.
TEST(BlockIndexTest, BinarySearchAgreesWithLinearWalk) {
  BlockIndex index({.blocks_per_instance = 64, .max_bytes = 1 << 20});
  std::vector<std::vector<uint64_t>> chains;
  for (uint64_t base = 1; base <= 12; ++base) {
    chains.push_back(Chain(base, 3 + base * 2));
    index.Insert(chains.back(), 1);
  }
  for (const auto& c : chains) {
    std::vector<uint64_t> single{1};
    uint32_t linear = 0;
    for (uint64_t h : c) {
      std::vector<uint32_t> one(1);
      index.Match(std::span(&h, 1), single, one);
      if (one[0] == 0) break;
      ++linear;
    }
    EXPECT_EQ(MatchAll(index, c, {1})[0], linear);
  }
}

// MatchHolders names exactly the instances Match gives a non-zero answer, with the same
// answer, through inserts, both bounds' evictions, capacity changes and departures (the
// first-block holders are kept up to date by every one of them), and their upkeep is counted in
// bytes() (which checks the tracked figure against a recount in debug builds).
TEST(BlockIndexTest, MatchHoldersAgreesWithMatch) {
  const size_t max_bytes = 64 << 10;
  BlockIndex index({.blocks_per_instance = 300, .max_bytes = max_bytes});
  testing::TestLcg next(11);
  std::vector<uint64_t> seeds;
  for (uint64_t s = 0; s < 24; ++s) seeds.push_back(1000 + s);
  // Chains that share openings: 40 documents, each asked with one of 8 continuations.
  auto chain = [&](uint64_t doc, uint64_t tail, size_t n) {
    std::vector<uint64_t> c = Chain(doc, n);
    for (uint64_t h : Chain(100000 + doc * 8 + tail, 1 + tail)) c.push_back(h);
    return c;
  };
  size_t holders_seen = 0;
  for (int step = 0; step < 4000; ++step) {
    const uint64_t inst = seeds[next(seeds.size())];
    const uint64_t what = next(100);
    if (what < 1) {
      index.ForgetInstance(inst);
    } else if (what < 3) {
      index.SetCapacity(inst, next(4) * 40);
    } else {
      index.Insert(chain(1 + next(40), next(8), 1 + next(25)), inst);
    }
    if (step % 50 != 0) continue;
    ASSERT_LE(index.bytes(), max_bytes) << "step " << step;
    for (uint64_t doc = 1; doc <= 40; ++doc) {
      const auto probe = chain(doc, next(8), 20);
      std::vector<uint32_t> all(seeds.size());
      index.Match(probe, seeds, all);
      std::vector<std::pair<uint64_t, uint32_t>> holders;
      index.MatchHolders(probe, holders);
      std::vector<uint32_t> from_holders(seeds.size(), 0);
      for (const auto& [seed, blocks] : holders) {
        ASSERT_GE(seed, 1000u);
        ASSERT_LT(seed, 1000u + seeds.size());
        ASSERT_EQ(from_holders[seed - 1000], 0u) << "instance listed twice";
        ASSERT_GT(blocks, 0u);
        from_holders[seed - 1000] = blocks;
      }
      ASSERT_EQ(from_holders, all) << "step " << step << ", document " << doc;
      holders_seen += holders.size();
    }
  }
  EXPECT_GT(holders_seen, 100u);  // the comparison saw holders, not only empty answers
  std::vector<std::pair<uint64_t, uint32_t>> none{{1, 1}};
  index.MatchHolders({}, none);
  EXPECT_TRUE(none.empty());
  for (uint64_t s : seeds) index.ForgetInstance(s);
  EXPECT_EQ(index.entries(), 0u);
  index.MatchHolders(chain(1, 0, 20), none);
  EXPECT_TRUE(none.empty());
  EXPECT_LT(index.bytes(), 1024u);  // the holder lists went with their blocks
}

}  // namespace
}  // namespace prefix_router
