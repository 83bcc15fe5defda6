#include "engine_model/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "core/prefix_key.h"  // xxhash.h, with XXH_STATIC_LINKING_ONLY handled

namespace prefix_router::engine_model {
namespace {

// Fixed seeds: block hashes must agree across processes (engine, simulator, router).
constexpr uint64_t kBlockSeed = 0x626c6f636b763031ULL;    // "blockv01"
constexpr uint64_t kAdapterSeed = 0x6c6f726176303031ULL;  // "lorav001"

size_t CeilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

}  // namespace

uint64_t AdapterHash(std::string_view adapter) {
  if (adapter.empty()) return 0;
  return XXH3_64bits_withSeed(adapter.data(), adapter.size(), kAdapterSeed);
}

uint64_t BlockHash(uint64_t parent_hash, std::span<const uint32_t> tokens, uint64_t adapter_hash) {
  assert(!tokens.empty() && tokens.size() <= kMaxBlockSize);
  // Token ids in native byte order (little-endian on every supported target).
  unsigned char buf[16 + kMaxBlockSize * sizeof(uint32_t)];
  std::memcpy(buf, &parent_hash, 8);
  std::memcpy(buf + 8, &adapter_hash, 8);
  std::memcpy(buf + 16, tokens.data(), tokens.size_bytes());
  return XXH3_64bits_withSeed(buf, 16 + tokens.size_bytes(), kBlockSeed);
}

Status KvCacheConfig::Validate() const {
  if (block_size < 1 || block_size > kMaxBlockSize) {
    return Status::InvalidArgument("block_size must be in [1, " + std::to_string(kMaxBlockSize) + "], got " +
                                   std::to_string(block_size));
  }
  if (capacity_blocks < 1) return Status::InvalidArgument("capacity_blocks must be >= 1, got 0");
  return Status::Ok();
}

KvCache::KvCache(KvCacheConfig config, KvEventListener* listener)
    : config_(config), listener_(listener), blocks_(config.capacity_blocks), by_hash_(config.capacity_blocks) {
  assert(config_.Validate().ok());
  for (uint32_t b = 0; b < config_.capacity_blocks; ++b) PushBack(b);
}

void KvCache::Unlink(uint32_t b) {
  Block& blk = blocks_[b];
  (blk.prev == kNil ? free_head_ : blocks_[blk.prev].next) = blk.next;
  (blk.next == kNil ? free_tail_ : blocks_[blk.next].prev) = blk.prev;
  blk.prev = blk.next = kNil;
  --free_count_;
}

void KvCache::PushFront(uint32_t b) {
  Block& blk = blocks_[b];
  blk.prev = kNil;
  blk.next = free_head_;
  (free_head_ == kNil ? free_tail_ : blocks_[free_head_].prev) = b;
  free_head_ = b;
  ++free_count_;
}

void KvCache::PushBack(uint32_t b) {
  Block& blk = blocks_[b];
  blk.next = kNil;
  blk.prev = free_tail_;
  (free_tail_ == kNil ? free_head_ : blocks_[free_tail_].next) = b;
  free_tail_ = b;
  ++free_count_;
}

uint32_t KvCache::TakeFreeBlock() {
  assert(free_head_ != kNil);
  const uint32_t b = free_head_;
  Unlink(b);
  Block& blk = blocks_[b];
  if (blk.registered) {
    by_hash_.Erase(blk.hash);
    blk.registered = false;
    ++evicted_blocks_;
    if (listener_ != nullptr) listener_->OnBlockRemoved(blk.hash);
  }
  blk.hash = 0;
  blk.ref_count = 1;
  return b;
}

void KvCache::ExtendHashes(std::span<const uint32_t> tokens, uint64_t adapter_hash,
                           std::vector<uint64_t>& hashes) const {
  const size_t bs = config_.block_size;
  const size_t full = tokens.size() / bs;
  uint64_t parent = hashes.empty() ? kRootParentHash : hashes.back();
  for (size_t b = hashes.size(); b < full; ++b) {
    parent = BlockHash(parent, tokens.subspan(b * bs, bs), adapter_hash);
    hashes.push_back(parent);
  }
}

size_t KvCache::LongestCachedPrefix(std::span<const uint32_t> tokens, std::string_view adapter) const {
  const size_t bs = config_.block_size;
  const uint64_t adapter_hash = AdapterHash(adapter);
  uint64_t parent = kRootParentHash;
  size_t b = 0;
  for (; (b + 1) * bs <= tokens.size(); ++b) {
    parent = BlockHash(parent, tokens.subspan(b * bs, bs), adapter_hash);
    if (!by_hash_.Contains(parent)) break;
  }
  return b;
}

Result<size_t> KvCache::Allocate(uint64_t request_id, std::span<const uint32_t> tokens, std::string_view adapter,
                                 size_t max_new_tokens) {
  if (tokens.empty()) return Status::InvalidArgument("a request needs at least one token");
  if (max_new_tokens == 0) return Status::InvalidArgument("max_new_tokens must be >= 1");
  if (live_.contains(request_id)) {
    return Status::InvalidArgument("request " + std::to_string(request_id) + " is already live");
  }
  const size_t bs = config_.block_size;
  const uint64_t adapter_hash = AdapterHash(adapter);
  scratch_hashes_.clear();
  ExtendHashes(tokens, adapter_hash, scratch_hashes_);

  // Longest chain of resident blocks, leaving at least one prompt token to compute.
  const size_t max_hit_blocks = std::min(scratch_hashes_.size(), (tokens.size() - 1) / bs);
  scratch_blocks_.clear();
  size_t hit_free = 0;  // hits that are on the free queue now and would leave it
  for (size_t b = 0; b < max_hit_blocks; ++b) {
    const uint32_t block = by_hash_.Find(scratch_hashes_[b]);
    if (block == BlockHashIndex::kAbsent) break;
    scratch_blocks_.push_back(block);
    if (blocks_[block].ref_count == 0) ++hit_free;
  }
  const size_t hits = scratch_blocks_.size();
  const size_t held = hits * bs + std::min(tokens.size() - hits * bs, max_new_tokens);
  const size_t needed = CeilDiv(held, bs) - hits;
  if (needed > free_count_ - hit_free) {
    return Status::ResourceExhausted("need " + std::to_string(needed) + " free KV blocks, have " +
                                     std::to_string(free_count_ - hit_free));
  }

  // Commit: pin the hits first so taking free blocks cannot evict them.
  for (uint32_t b : scratch_blocks_) {
    if (blocks_[b].ref_count++ == 0) Unlink(b);
  }
  uint32_t slot;
  if (spare_sequences_.empty()) {
    slot = static_cast<uint32_t>(sequences_.size());
    sequences_.emplace_back();
  } else {
    slot = spare_sequences_.back();
    spare_sequences_.pop_back();
  }
  Sequence& seq = sequences_[slot];
  seq.tokens.assign(tokens.begin(), tokens.end());
  seq.blocks.assign(scratch_blocks_.begin(), scratch_blocks_.end());
  for (size_t i = 0; i < needed; ++i) seq.blocks.push_back(TakeFreeBlock());
  seq.hashes.assign(scratch_hashes_.begin(), scratch_hashes_.end());
  seq.adapter.assign(adapter);
  seq.adapter_hash = adapter_hash;
  seq.held = held;
  seq.computed = hits * bs;
  seq.registered = hits;
  live_.emplace(request_id, slot);

  query_tokens_ += tokens.size();
  hit_tokens_ += hits * bs;
  return hits * bs;
}

KvCache::Sequence& KvCache::Live(uint64_t request_id) {
  auto it = live_.find(request_id);
  assert(it != live_.end());
  return sequences_[it->second];
}

size_t KvCache::NumTokens(uint64_t request_id) const {
  auto it = live_.find(request_id);
  return it == live_.end() ? 0 : sequences_[it->second].tokens.size();
}

size_t KvCache::NumHeld(uint64_t request_id) const {
  auto it = live_.find(request_id);
  return it == live_.end() ? 0 : sequences_[it->second].held;
}

Status KvCache::HoldTokens(Sequence& seq, size_t num_tokens, uint64_t request_id) {
  if (num_tokens <= seq.held) return Status::Ok();
  const size_t extra = CeilDiv(num_tokens, config_.block_size) - seq.blocks.size();
  if (extra > free_count_) {
    return Status::ResourceExhausted("no free KV block for request " + std::to_string(request_id));
  }
  for (size_t i = 0; i < extra; ++i) seq.blocks.push_back(TakeFreeBlock());
  seq.held = num_tokens;
  return Status::Ok();
}

Status KvCache::Grow(uint64_t request_id, size_t num_tokens) {
  Sequence& seq = Live(request_id);
  assert(num_tokens <= seq.tokens.size());
  return HoldTokens(seq, num_tokens, request_id);
}

Status KvCache::AppendTokens(uint64_t request_id, std::span<const uint32_t> tokens) {
  Sequence& seq = Live(request_id);
  if (Status s = HoldTokens(seq, seq.tokens.size() + tokens.size(), request_id); !s.ok()) {
    return s;
  }
  seq.tokens.insert(seq.tokens.end(), tokens.begin(), tokens.end());
  ExtendHashes(seq.tokens, seq.adapter_hash, seq.hashes);
  return Status::Ok();
}

void KvCache::MarkComputed(uint64_t request_id, size_t num_computed_tokens) {
  Sequence& seq = Live(request_id);
  assert(num_computed_tokens <= seq.held);
  seq.computed = std::max(seq.computed, num_computed_tokens);
  const size_t bs = config_.block_size;
  const size_t complete = seq.computed / bs;  // full blocks entirely computed
  for (size_t b = seq.registered; b < complete; ++b) {
    Block& blk = blocks_[seq.blocks[b]];
    const uint64_t hash = seq.hashes[b];
    if (blk.registered || !by_hash_.Insert(hash, seq.blocks[b])) continue;
    blk.registered = true;
    blk.hash = hash;
    if (listener_ != nullptr) {
      listener_->OnBlockStored(hash, b == 0 ? kRootParentHash : seq.hashes[b - 1],
                               std::span<const uint32_t>(seq.tokens).subspan(b * bs, bs), seq.adapter);
    }
  }
  seq.registered = std::max(seq.registered, complete);
}

void KvCache::Free(uint64_t request_id) {
  auto it = live_.find(request_id);
  if (it == live_.end()) return;
  Sequence& seq = sequences_[it->second];
  // Reverse order: the request's tail reaches the front of the queue before its prefix.
  for (auto b = seq.blocks.rbegin(); b != seq.blocks.rend(); ++b) {
    Block& blk = blocks_[*b];
    assert(blk.ref_count > 0);
    if (--blk.ref_count > 0) continue;
    if (blk.registered) {
      PushBack(*b);
    } else {
      PushFront(*b);
    }
  }
  seq.tokens.clear();
  seq.blocks.clear();
  seq.hashes.clear();
  seq.held = 0;
  seq.computed = 0;
  seq.registered = 0;
  spare_sequences_.push_back(it->second);
  live_.erase(it);
}

Status KvCache::ResetPrefixCache() {
  if (free_count_ != config_.capacity_blocks) {
    return Status::Unavailable(std::to_string(config_.capacity_blocks - free_count_) + " KV blocks are still in use");
  }
  for (Block& blk : blocks_) {
    blk.registered = false;
    blk.hash = 0;
  }
  by_hash_.Clear();
  if (listener_ != nullptr) listener_->OnAllCleared();
  return Status::Ok();
}

KvCacheStats KvCache::stats() const {
  KvCacheStats s;
  s.capacity_blocks = config_.capacity_blocks;
  s.used_blocks = config_.capacity_blocks - free_count_;
  s.cached_blocks = static_cast<uint32_t>(by_hash_.size());
  s.query_tokens = query_tokens_;
  s.hit_tokens = hit_tokens_;
  s.evicted_blocks = evicted_blocks_;
  return s;
}

Status KvCache::CheckInvariants() const {
  // The free queue holds exactly the unreferenced blocks, linked consistently.
  uint32_t walked = 0;
  uint32_t prev = kNil;
  for (uint32_t b = free_head_; b != kNil; b = blocks_[b].next) {
    if (blocks_[b].ref_count != 0) return Status::Internal("pinned block on the free queue");
    if (blocks_[b].prev != prev) return Status::Internal("broken free-queue link");
    prev = b;
    if (++walked > config_.capacity_blocks) return Status::Internal("free-queue cycle");
  }
  if (prev != free_tail_ || walked != free_count_) return Status::Internal("free count mismatch");
  std::vector<uint32_t> refs(blocks_.size(), 0);
  for (const auto& [id, slot] : live_) {
    const Sequence& seq = sequences_[slot];
    if (seq.held > seq.tokens.size() || seq.computed > seq.held ||
        seq.blocks.size() != CeilDiv(seq.held, config_.block_size)) {
      return Status::Internal("request " + std::to_string(id) + " holds the wrong block count");
    }
    for (uint32_t b : seq.blocks) ++refs[b];
  }
  uint32_t unreferenced = 0;
  for (uint32_t b = 0; b < blocks_.size(); ++b) {
    if (refs[b] != blocks_[b].ref_count) return Status::Internal("reference count mismatch");
    if (refs[b] == 0) ++unreferenced;
    if (blocks_[b].registered) {
      if (by_hash_.Find(blocks_[b].hash) != b) return Status::Internal("hash map mismatch");
    }
  }
  if (unreferenced != free_count_) return Status::Internal("unreferenced blocks off the queue");
  bool index_ok = true;
  by_hash_.ForEach([&](uint64_t hash, uint32_t b) {
    index_ok = index_ok && b < blocks_.size() && blocks_[b].registered && blocks_[b].hash == hash;
  });
  if (!index_ok) return Status::Internal("hash map entry for an unregistered block");
  return Status::Ok();
}

}  // namespace prefix_router::engine_model
