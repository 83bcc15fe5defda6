#include "engine_model/block_hash_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <unordered_map>

#include "core/rng.h"

namespace prefix_router::engine_model {
namespace {

// Inserts, finds and erases agree with a reference map, through collisions and wrap-around.
TEST(BlockHashIndexTest, MatchesAReferenceMapUnderChurn) {
  BlockHashIndex index(16);  // 32 slots
  std::unordered_map<uint64_t, uint32_t> reference;
  Rng rng(99);
  for (int op = 0; op < 20000; ++op) {
    // Few distinct low bits (homes 28..31 and 0..3) force long clusters that wrap.
    const uint64_t key = (static_cast<uint64_t>(rng.Uniform(64)) << 5) | ((28 + rng.Uniform(8)) & 31);
    if (rng.Uniform(2) == 0 && reference.size() < 16) {
      const uint32_t value = rng.Uniform(1000);
      const bool inserted = index.Insert(key, value);
      EXPECT_EQ(inserted, reference.emplace(key, value).second);
    } else {
      index.Erase(key);
      reference.erase(key);
    }
    ASSERT_EQ(index.size(), reference.size());
    for (const auto& [k, v] : reference) ASSERT_EQ(index.Find(k), v) << "op " << op;
  }
  size_t visited = 0;
  index.ForEach([&](uint64_t k, uint32_t v) {
    ++visited;
    EXPECT_EQ(reference.at(k), v);
  });
  EXPECT_EQ(visited, reference.size());
  index.Clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.Find(reference.empty() ? 1 : reference.begin()->first), BlockHashIndex::kAbsent);
}

// A key of 0 is an ordinary key (hashes may be any 64-bit value).
TEST(BlockHashIndexTest, ZeroIsAValidKey) {
  BlockHashIndex index(4);
  EXPECT_FALSE(index.Contains(0));
  EXPECT_TRUE(index.Insert(0, 7));
  EXPECT_FALSE(index.Insert(0, 8));
  EXPECT_EQ(index.Find(0), 7u);
  index.Erase(0);
  EXPECT_FALSE(index.Contains(0));
}

}  // namespace
}  // namespace prefix_router::engine_model
