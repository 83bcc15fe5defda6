// HolderLists (core/holder_lists.h): the instances listed under each chain's first block.
#include "core/holder_lists.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace prefix_router {
namespace {

std::vector<uint64_t> Sorted(std::span<const uint64_t> s) {
  std::vector<uint64_t> v(s.begin(), s.end());
  std::sort(v.begin(), v.end());
  return v;
}

// Add lists, Drop removes one entry (an instance added twice stays listed once), unknown drops
// change nothing, and a block whose last holder leaves is gone with its memory.
TEST(HolderListsTest, AddDropAndBytes) {
  HolderLists lists;
  EXPECT_TRUE(lists.empty());
  EXPECT_EQ(lists.bytes(), 0u);
  EXPECT_TRUE(lists.Of(7).empty());
  lists.Add(7, 1);
  lists.Add(7, 2);
  lists.Add(7, 1);
  lists.Add(9, 3);
  EXPECT_EQ(Sorted(lists.Of(7)), (std::vector<uint64_t>{1, 1, 2}));
  EXPECT_EQ(Sorted(lists.Of(9)), (std::vector<uint64_t>{3}));
  const size_t full = lists.bytes();
  EXPECT_GT(full, 2 * 32u);  // two map nodes at least, and the lists
  lists.Drop(7, 1);
  EXPECT_EQ(Sorted(lists.Of(7)), (std::vector<uint64_t>{1, 2}));
  lists.Drop(7, 5);   // not listed
  lists.Drop(8, 1);   // no such block
  EXPECT_EQ(Sorted(lists.Of(7)), (std::vector<uint64_t>{1, 2}));
  lists.Drop(9, 3);
  EXPECT_TRUE(lists.Of(9).empty());
  EXPECT_LT(lists.bytes(), full);
  lists.Drop(7, 1);
  lists.Drop(7, 2);
  EXPECT_TRUE(lists.empty());
  EXPECT_LE(lists.bytes(), 256u);  // only the map's small bucket array stays
}

}  // namespace
}  // namespace prefix_router
