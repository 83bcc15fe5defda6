#include "core/block_chain.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace prefix_router {
namespace {

std::vector<uint64_t> ChainOf(std::string_view text, uint32_t block = 4, uint32_t max = 100, uint64_t seed = 7) {
  BlockChainBuilder b(block, max, seed);
  b.Append(text);
  return b.chain();
}

// Only whole blocks are hashed; a trailing partial block is not.
TEST(BlockChainTest, HashesWholeBlocksOnly) {
  EXPECT_TRUE(ChainOf("abc").empty());
  EXPECT_EQ(ChainOf("abcd").size(), 1u);
  EXPECT_EQ(ChainOf("abcdefg").size(), 1u);
  EXPECT_EQ(ChainOf("abcdefgh").size(), 2u);
}

// Two texts share block k's hash exactly when they share their first k+1 blocks.
TEST(BlockChainTest, SharedPrefixSharesLeadingHashes) {
  const auto a = ChainOf("aaaabbbbccccdddd");
  const auto b = ChainOf("aaaabbbbXcccdddd");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_EQ(a[1], b[1]);
  EXPECT_NE(a[2], b[2]);
  EXPECT_NE(a[3], b[3]);  // chained: the same block after a different one hashes differently
  const auto c = ChainOf("Zaaabbbbccccdddd");
  EXPECT_NE(a[1], c[1]);
}

// The seed (the routing group) separates chains of equal texts.
TEST(BlockChainTest, SeedSeparatesEqualTexts) {
  EXPECT_NE(ChainOf("aaaabbbb", 4, 100, 1), ChainOf("aaaabbbb", 4, 100, 2));
  EXPECT_EQ(ChainOf("aaaabbbb", 4, 100, 1), ChainOf("aaaabbbb", 4, 100, 1));
}

// Appending in pieces of any size gives the same chain as appending at once.
TEST(BlockChainTest, PiecewiseAppendMatchesWholeAppend) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  const auto whole = ChainOf(text, 16);
  ASSERT_EQ(whole.size(), 300u / 16);
  for (size_t piece : {1u, 3u, 15u, 16u, 17u, 100u}) {
    BlockChainBuilder b(16, 100, 7);
    for (size_t at = 0; at < text.size(); at += piece) b.Append(std::string_view(text).substr(at, piece));
    EXPECT_EQ(b.chain(), whole) << "piece " << piece;
  }
}

// At most max_blocks blocks; Append says when it is full.
TEST(BlockChainTest, StopsAtMaxBlocks) {
  BlockChainBuilder b(4, 3, 7);
  EXPECT_TRUE(b.Append("aaaabbbb"));
  EXPECT_FALSE(b.Append("ccccddddeeee"));
  EXPECT_TRUE(b.full());
  EXPECT_EQ(b.chain().size(), 3u);
  EXPECT_EQ(b.chain(), ChainOf("aaaabbbbcccc"));
}

}  // namespace
}  // namespace prefix_router
