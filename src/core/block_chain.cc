#include "core/block_chain.h"

#include <xxhash.h>

#include <algorithm>

namespace prefix_router {

BlockChainBuilder::BlockChainBuilder(uint32_t block_bytes, uint32_t max_blocks, uint64_t seed)
    : block_bytes_(block_bytes), max_blocks_(max_blocks), previous_(seed) {
  pending_.reserve(block_bytes_);
}

void BlockChainBuilder::Seal(std::string_view block) {
  previous_ = XXH3_64bits_withSeed(block.data(), block.size(), previous_);
  chain_.push_back(previous_);
}

bool BlockChainBuilder::Append(std::string_view bytes) {
  while (!bytes.empty() && !full()) {
    if (pending_.empty() && bytes.size() >= block_bytes_) {  // a whole block in place: no copy
      Seal(bytes.substr(0, block_bytes_));
      bytes.remove_prefix(block_bytes_);
      continue;
    }
    const size_t take = std::min<size_t>(block_bytes_ - pending_.size(), bytes.size());
    pending_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (pending_.size() == block_bytes_) {
      Seal(pending_);
      pending_.clear();
    }
  }
  return !full();
}

uint64_t BlockChainSeed(std::string_view served_name, std::string_view group) {
  const uint64_t name = XXH3_64bits_withSeed(served_name.data(), served_name.size(), 0x6361636865ULL);
  return XXH3_64bits_withSeed(group.data(), group.size(), name);
}

std::vector<uint64_t> BuildBlockChain(std::string_view text, uint32_t block_bytes, uint32_t max_blocks, uint64_t seed) {
  BlockChainBuilder b(block_bytes, max_blocks, seed);
  b.Append(text);
  return b.Take();
}

}  // namespace prefix_router
