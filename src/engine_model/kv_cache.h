// KvCache: the paged KV cache of one engine with automatic prefix caching, as vLLM v1 does it.
//
// The cache has `capacity_blocks` blocks of `block_size` tokens. A request's tokens occupy
// blocks in order; its last block may be partial. A *full* block is identified by a hash
// chained over its parent block's hash, its token ids and the adapter (LoRA) name:
//     hash = XXH3_64(parent_hash | adapter_hash | token ids)       (BlockHash below)
// with parent_hash = kRootParentHash for a request's first block. So a block matches only when
// the whole prefix before it and the adapter match; partial blocks are never shared.
//
// Life of a block (the vLLM KVCacheManager / FreeKVCacheBlockQueue design):
//   - in use: referenced (pinned) by one or more requests; never evicted;
//   - cached: free (reference count 0) but still holding a registered hash, so a later request
//     with the same prefix can reuse it; evictable;
//   - empty: free and holding nothing.
// Free blocks sit on one queue, evicted from the front. Empty blocks go to the front; a freed
// request's hashed blocks go to the back in reverse order (its last block nearest the front),
// so the least recently used block is evicted first and, within a request, the tail goes
// before the prefix that other requests are likelier to share. Taking a block from the front
// forgets its hash (OnBlockRemoved). A hit on a cached block takes it off the queue; when its
// users are done it re-enters at the back: that is the "use" in least recently used.
//
// A request's cached tokens are the longest chain of resident blocks of its prompt, capped as
// vLLM caps them (max_cache_hit_length = prompt length - 1): at least one prompt token must be
// computed to produce logits, so when the whole prompt is cached in full blocks its last block
// is recomputed (an 8,000-token prompt, 500 blocks, reuses at most 499 blocks = 7,984 tokens).
//
// A block's hash is registered when all its tokens are computed (MarkComputed): prompt blocks
// as chunked prefill reaches them, generated tokens' blocks as decoding fills them. If another
// block already holds the same hash (two requests computed the same prefix at the same time),
// the newer block stays unregistered and is dropped when freed, as a duplicate.
//
// Blocks are taken as computation reaches them, as vLLM v1's allocate_slots does: a request is
// admitted with blocks for its cached prefix and its first scheduled chunk only (Allocate), each
// later prefill chunk grows them (Grow) and each generated token appends (AppendTokens). No
// reservation for the rest of the prompt or the output: when no block is free, Grow and
// AppendTokens fail without side effect and the scheduler preempts. A request's `held` tokens
// are those its blocks cover; its token list may be longer (the rest of the prompt).
//
// Cost: Allocate, Grow, AppendTokens, MarkComputed and Free are O(blocks of the request touched),
// with one probe of a flat hash table per block; no allocation in steady state (per-request
// state is recycled). Stats are O(1).
//
// Thread-safety: a KvCache belongs to one thread (the engine's step loop). The listener is
// called synchronously from the mutating calls, on that thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine_model/block_hash_index.h"

namespace prefix_router::engine_model {

// The parent hash of a request's first block.
inline constexpr uint64_t kRootParentHash = 0;
// Largest supported block size (vLLM uses 16 by default; some backends 32..256).
inline constexpr uint32_t kMaxBlockSize = 256;

// The hash of an adapter name as it enters block hashes; 0 for the base model ("").
uint64_t AdapterHash(std::string_view adapter);
// The chained hash of one full block (the same function the cache uses, so that a cache-aware
// router can compute it from a prompt). REQUIRES: 1 <= tokens.size() <= kMaxBlockSize.
uint64_t BlockHash(uint64_t parent_hash, std::span<const uint32_t> tokens, uint64_t adapter_hash);

// Observer of what the cache holds, for publishing KV events (vLLM's BlockStored,
// BlockRemoved, AllBlocksCleared). Called synchronously; must not call back into the cache.
class KvEventListener {
 public:
  virtual ~KvEventListener() = default;
  // A full block was registered: its hash, its parent's (kRootParentHash for a first block),
  // its block_size token ids (valid during the call only) and the adapter ("" = base model).
  virtual void OnBlockStored(uint64_t hash, uint64_t parent_hash, std::span<const uint32_t> token_ids,
                             std::string_view adapter) = 0;
  // A registered block was evicted; its hash is forgotten.
  virtual void OnBlockRemoved(uint64_t hash) = 0;
  // ResetPrefixCache dropped every registered block.
  virtual void OnAllCleared() = 0;
};

struct KvCacheConfig {
  uint32_t block_size = 16;
  uint32_t capacity_blocks = 0;

  // InvalidArgument naming the field unless 1 <= block_size <= kMaxBlockSize and
  // capacity_blocks >= 1.
  Status Validate() const;
};

struct KvCacheStats {
  uint32_t capacity_blocks = 0;
  uint32_t used_blocks = 0;     // referenced by at least one request
  uint32_t cached_blocks = 0;   // holding a registered hash (in use or free)
  uint64_t query_tokens = 0;    // prompt tokens of successful Allocate calls
  uint64_t hit_tokens = 0;      // of which served from the cache
  uint64_t evicted_blocks = 0;  // registered blocks evicted to make room

  // Fraction of blocks in use, as vllm:kv_cache_usage_perc.
  double usage() const { return capacity_blocks == 0 ? 0.0 : static_cast<double>(used_blocks) / capacity_blocks; }
};

class KvCache {
 public:
  // REQUIRES: config.Validate().ok(). `listener` may be null; it must outlive the cache.
  explicit KvCache(KvCacheConfig config, KvEventListener* listener = nullptr);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheConfig& config() const { return config_; }

  // Read-only lookup: how many leading full blocks of `tokens` are resident for `adapter`.
  // Not capped and does not count as a use (no LRU or stats change).
  size_t LongestCachedPrefix(std::span<const uint32_t> tokens, std::string_view adapter) const;

  // Admits request `request_id` with prompt `tokens`: pins its cached prefix and takes blocks
  // for up to `max_new_tokens` tokens after it (its first chunk; SIZE_MAX = the whole prompt).
  // Returns the number of cached prompt tokens (a multiple of block_size, at most
  // tokens.size() - 1). ResourceExhausted, with no side effect, when fewer free blocks than
  // needed exist; InvalidArgument if the id is live, `tokens` is empty or max_new_tokens is 0.
  Result<size_t> Allocate(uint64_t request_id, std::span<const uint32_t> tokens, std::string_view adapter,
                          size_t max_new_tokens = SIZE_MAX);

  // Takes blocks so that the request's first `num_tokens` tokens are held (a later prefill
  // chunk). ResourceExhausted, with no side effect, when too few blocks are free.
  // REQUIRES: request_id is live; num_tokens <= its token count.
  Status Grow(uint64_t request_id, size_t num_tokens);

  // Appends tokens (generated ones) to a live request and takes blocks to hold all its tokens.
  // ResourceExhausted, with no side effect, when too few blocks are free (the caller preempts).
  // REQUIRES: request_id is live.
  Status AppendTokens(uint64_t request_id, std::span<const uint32_t> tokens);

  // Declares the first `num_computed_tokens` tokens of the request computed (their KV is
  // written); full blocks among them get their hash registered. Monotonic.
  // REQUIRES: request_id is live; num_computed_tokens <= its held tokens.
  void MarkComputed(uint64_t request_id, size_t num_computed_tokens);

  // Releases a request's blocks: unpinned, registered ones stay cached. No-op if not live.
  void Free(uint64_t request_id);

  // Forgets every registered block (vLLM's reset_prefix_cache). Unavailable, with no side
  // effect, while any block is in use.
  Status ResetPrefixCache();

  bool IsLive(uint64_t request_id) const { return live_.contains(request_id); }
  // Tokens of a live request (prompt plus appended); 0 if not live.
  size_t NumTokens(uint64_t request_id) const;
  // Of which held in blocks; 0 if not live.
  size_t NumHeld(uint64_t request_id) const;
  uint32_t num_free_blocks() const { return free_count_; }
  KvCacheStats stats() const;
  double usage() const { return stats().usage(); }

  // Checks every internal invariant in O(capacity): for tests.
  Status CheckInvariants() const;

 private:
  static constexpr uint32_t kNil = UINT32_MAX;

  struct Block {
    uint64_t hash = 0;
    uint32_t ref_count = 0;
    uint32_t prev = kNil;  // free-queue links, valid while ref_count == 0
    uint32_t next = kNil;
    bool registered = false;
  };

  struct Sequence {
    std::vector<uint32_t> tokens;
    std::vector<uint32_t> blocks;
    std::vector<uint64_t> hashes;  // of the full blocks, in order
    std::string adapter;
    uint64_t adapter_hash = 0;
    size_t held = 0;        // leading tokens covered by `blocks`
    size_t computed = 0;    // tokens with KV written (<= held)
    size_t registered = 0;  // leading blocks whose registration was attempted
  };

  Sequence& Live(uint64_t request_id);
  // Takes blocks so that `seq` holds `num_tokens` tokens; ResourceExhausted if too few are free.
  Status HoldTokens(Sequence& seq, size_t num_tokens, uint64_t request_id);
  // Hashes of full blocks [hashes.size(), tokens.size() / block_size) appended to `hashes`.
  void ExtendHashes(std::span<const uint32_t> tokens, uint64_t adapter_hash, std::vector<uint64_t>& hashes) const;
  void Unlink(uint32_t b);
  void PushFront(uint32_t b);
  void PushBack(uint32_t b);
  // Pops the front free block, evicting its hash; the block comes back pinned once.
  uint32_t TakeFreeBlock();

  KvCacheConfig config_;
  KvEventListener* listener_;
  std::vector<Block> blocks_;
  uint32_t free_head_ = kNil;
  uint32_t free_tail_ = kNil;
  uint32_t free_count_ = 0;
  BlockHashIndex by_hash_;                       // registered hash -> block
  std::unordered_map<uint64_t, uint32_t> live_;  // request id -> index in sequences_
  std::vector<Sequence> sequences_;
  std::vector<uint32_t> spare_sequences_;  // indices of recyclable Sequences
  std::vector<uint64_t> scratch_hashes_;
  std::vector<uint32_t> scratch_blocks_;
  uint64_t query_tokens_ = 0;
  uint64_t hit_tokens_ = 0;
  uint64_t evicted_blocks_ = 0;
};

}  // namespace prefix_router::engine_model
