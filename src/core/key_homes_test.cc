#include "core/key_homes.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace prefix_router {
namespace {

// Spreads consecutive integers over the whole 64-bit range, as key hashes are.
uint64_t Key(uint64_t i) { return (i + 1) * 0x9E3779B97F4A7C15ULL; }

TEST(KeyHomesTest, SetFindErase) {
  KeyHomes homes;
  EXPECT_FALSE(homes.Find(Key(1)).has_value());
  homes.Set(Key(1), 7);
  homes.Set(Key(2), 8);
  EXPECT_EQ(homes.Find(Key(1)), 7u);
  homes.Set(Key(1), 9);  // a key moves again: overwritten, not added
  EXPECT_EQ(homes.Find(Key(1)), 9u);
  EXPECT_EQ(homes.size(), 2u);
  homes.Erase(Key(1));
  EXPECT_FALSE(homes.Find(Key(1)).has_value());
  EXPECT_EQ(homes.Find(Key(2)), 8u);
  EXPECT_EQ(homes.size(), 1u);
}

TEST(KeyHomesTest, NeverHoldsMoreThanItsBound) {
  KeyHomes homes;
  const uint64_t n = 3 * KeyHomes::kMaxKeys;
  for (uint64_t i = 0; i < n; ++i) {
    homes.Set(Key(i), i);
    if (i % 7 == 0) homes.Erase(Key(i / 2));    // erased keys leave stale ring slots
    if (i % 11 == 0) homes.Set(Key(i / 3), i);  // and keys come back
  }
  EXPECT_LE(homes.size(), KeyHomes::kMaxKeys);
  EXPECT_GT(homes.size(), KeyHomes::kMaxKeys * 9 / 10);  // full, not emptied
}

TEST(KeyHomesTest, FullTableForgetsTheOldestKeysFirst) {
  KeyHomes homes;
  const uint64_t n = 2 * KeyHomes::kMaxKeys;
  for (uint64_t i = 0; i < n; ++i) homes.Set(Key(i), i);
  // The most recent keys are all there; most of the first half is forgotten (shards fill at
  // slightly different rates, so the boundary is not exact).
  uint64_t recent = 0, old = 0;
  for (uint64_t i = n - 1000; i < n; ++i) recent += homes.Find(Key(i)).has_value();
  for (uint64_t i = 0; i < 1000; ++i) old += homes.Find(Key(i)).has_value();
  EXPECT_EQ(recent, 1000u);
  EXPECT_EQ(old, 0u);
  EXPECT_EQ(homes.Find(Key(n - 1)), n - 1);
}

}  // namespace
}  // namespace prefix_router
