#include "core/block_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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
  const size_t max_entries = 20;
  BlockIndex index({.blocks_per_instance = 1000, .max_bytes = max_entries * BlockIndex::kBytesPerEntry});
  index.Insert(Chain(1, 15), 1);
  index.Insert(Chain(2, 4), 2);
  EXPECT_EQ(index.entries(), 19u);
  index.Insert(Chain(3, 4), 2);  // 23 > 20: instance 1 (15 blocks) gives 3 back
  EXPECT_EQ(index.entries(), max_entries);
  EXPECT_EQ(index.entries(1), 12u);
  EXPECT_EQ(index.entries(2), 8u);
  EXPECT_LE(index.bytes(), max_entries * BlockIndex::kBytesPerEntry);
  for (uint64_t base = 10; base < 200; ++base) index.Insert(Chain(base, 7), base % 5);
  EXPECT_EQ(index.entries(), max_entries);
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

}  // namespace
}  // namespace prefix_router
