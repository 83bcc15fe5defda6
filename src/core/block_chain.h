// BlockChain: chained hashes of the fixed-size blocks of a request's routing text, the unit of
// cache-aware routing (core/block_index.h).
//
// The text (the same text the prefix key is computed over: message characters as UTF-8 on the
// OpenAI API, body bytes on the native API) is cut into blocks of `block_bytes`; block k's hash
// is XXH3-64 of its bytes seeded with block k-1's hash (block 0: seeded with `seed`, which
// carries the routing group, so tenants' chains never meet). A block's hash thus stands for the
// whole text up to its end, as an engine's prefix-cache block hash stands for its token prefix.
// Only whole blocks are hashed (engines cache only full blocks), at most `max_blocks` of them.
//
// Not thread-safe; one builder per request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace prefix_router {

class BlockChainBuilder {
 public:
  // REQUIRES: block_bytes > 0
  BlockChainBuilder(uint32_t block_bytes, uint32_t max_blocks, uint64_t seed);

  // Appends text; returns false once max_blocks blocks are complete (more text is ignored).
  bool Append(std::string_view bytes);
  bool full() const { return chain_.size() >= max_blocks_; }
  // The hashes of the whole blocks so far.
  const std::vector<uint64_t>& chain() const { return chain_; }
  std::vector<uint64_t> Take() { return std::move(chain_); }

 private:
  void Seal(std::string_view block);

  uint32_t block_bytes_;
  uint32_t max_blocks_;
  uint64_t previous_;
  std::string pending_;  // the current block's bytes while it is not whole
  std::vector<uint64_t> chain_;
};

// The seed of a request's chain: its served name and routing group, so that chains of different
// models (whose caches are apart) or tenants (kept apart by routing ids) never meet.
uint64_t BlockChainSeed(std::string_view served_name, std::string_view group);

// The chain of `text` in one call.
std::vector<uint64_t> BuildBlockChain(std::string_view text, uint32_t block_bytes, uint32_t max_blocks, uint64_t seed);

}  // namespace prefix_router
