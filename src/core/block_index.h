// BlockIndex: which blocks of routing text each instance was recently sent, for cache-aware
// routing (the gateway's own view of the fleet's prefix caches, without engine cooperation).
//
// A request's routing text is cut into fixed-size blocks and each block is hashed together with
// the hash of the block before it (BlockChain, core/block_chain.h), so one 64-bit value stands
// for the whole text up to the end of its block: two requests share block k's hash only if they
// share their first k+1 blocks. An instance's match for a request is the number of leading
// blocks of its chain the instance holds.
//
// Bounded twice, least recently used first:
// - per instance, `blocks_per_instance` (the instance's KV cache in blocks: what it can hold, so
//   what it has evicted is forgotten here too), overridable per instance (SetCapacity);
// - over all instances, `max_bytes` of bookkeeping, counted as what the containers hold (bytes():
//   vector capacities, hash-map nodes and bucket arrays, each instance's record), not per entry:
//   beyond it, the instance holding the most blocks forgets its least recently used one. An
//   instance whose blocks fall below half its node capacity is compacted (nodes renumbered, map
//   rehashed), so the memory an instance held at its peak is given back when the bound moves its
//   entries to other instances, amortised over the evictions; the node vector grows by a quarter,
//   not double, so little is held unused.
// Insert makes a chain's first block the most recently used of its blocks (blocks are touched
// from the last to the first), so an instance forgets a chain from its end, as engines evict
// (vLLM frees a sequence's blocks tail first): a held block implies its predecessors are held,
// which lets Match binary-search the chain.
//
// Instances are named by their placement seed (FleetSnapshot::placement_seed), which survives
// snapshot changes; ForgetInstance drops one that left.
//
// Which instances hold each chain's first block is kept as well (a block hash depends on every
// block before it, so a first block's hash is only ever a first block's), so that a decision
// over 10,000 instances looks up the few that hold the request's first block (MatchHolders), not
// every instance: the others match nothing.
//
// Thread-safety: every method takes one mutex; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "core/holder_lists.h"

namespace prefix_router {

class BlockIndex {
 public:
  // Bookkeeping per held block, an estimate for sizing `max_bytes` (the bound itself counts what
  // the containers hold, see bytes()), kept from when the map was node-based (a 32-byte node and
  // its bucket) so that sizes derived from it do not change: with the open-addressing map, a
  // 16-byte slot at a load of 0.44 to 0.875, an LRU list node (16 bytes, up to a quarter more
  // unused) and its free-list slot, index_bench's BM_BlockIndexFill holds 51 to 74 per block.
  static constexpr size_t kBytesPerEntry = 80;

  struct Options {
    uint64_t blocks_per_instance = 1u << 16;  // default capacity of every instance
    uint64_t max_bytes = 64ull << 20;         // all instances together
  };

  explicit BlockIndex(Options options) : options_(options) {}
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // For each instance of `seeds`, the number of leading blocks of `chain` it holds (into `out`,
  // same order). Does not change recency: only Insert does (a match is a guess, a dispatch is
  // what reaches the engine). REQUIRES: out.size() == seeds.size()
  void Match(std::span<const uint64_t> chain, std::span<const uint64_t> seeds, std::span<uint32_t> out) const;

  // The instances that hold `chain`'s first block, each with the number of leading blocks of
  // `chain` it holds (at least 1), into `out` (cleared first), in no particular order: the
  // instances Match would give a non-zero answer, found with one lookup per holder rather than per
  // instance. Does not change recency.
  void MatchHolders(std::span<const uint64_t> chain, std::vector<std::pair<uint64_t, uint32_t>>& out) const;

  // Records that instance `seed` was sent `chain`: its blocks become the instance's most recently
  // used (the first block most recent of all), then the bounds are enforced.
  void Insert(std::span<const uint64_t> chain, uint64_t seed);

  // Capacity in blocks of one instance (0 = the default); shrinking evicts at once.
  void SetCapacity(uint64_t seed, uint64_t blocks);
  void ForgetInstance(uint64_t seed);

  size_t entries() const;
  size_t entries(uint64_t seed) const;
  // The memory the index's containers hold, all instances: vector capacities x element size,
  // hash-map nodes (with the allocator's rounding) and bucket arrays, each instance's record.
  // Stays at most max_bytes once any block is held (instances' records alone may exceed a tiny
  // bound).
  size_t bytes() const;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint64_t hash;
    uint32_t newer;  // towards the most recently used end
    uint32_t older;
  };
  struct Instance {
    uint64_t seed = 0;
    boost::unordered_flat_map<uint64_t, uint32_t> where;  // block hash -> node (open addressing)
    std::vector<Node> nodes;
    std::vector<uint32_t> free;
    uint32_t newest = kNone;
    uint32_t oldest = kNone;
    uint64_t capacity = 0;  // 0 = options_.blocks_per_instance
    size_t bytes = 0;       // BytesLocked(*this) when last counted into instance_bytes_

    bool Holds(uint64_t hash) const { return where.contains(hash); }
    bool Touch(uint64_t hash);  // inserts (true) or moves to the newest end (false)
    uint64_t EvictOldest();  // returns the evicted block's hash
    void Unlink(uint32_t n);
    void LinkNewest(uint32_t n);
  };

  uint64_t CapacityOf(const Instance& in) const {
    return in.capacity != 0 ? in.capacity : options_.blocks_per_instance;
  }
  static size_t BytesLocked(const Instance& in);
  // Recomputed over every instance (bytes()); TrackedBytesLocked is the same figure kept up to
  // date per change (RecountLocked), so that a dispatch costs no pass over every instance.
  size_t TotalBytesLocked() const;
  size_t TrackedBytesLocked() const;
  void RecountLocked(Instance& in);
  // Gives back the memory of an instance holding well under its node capacity (amortised: only
  // when its blocks are below half of it). Renumbers its nodes, keeping their recency order.
  static void MaybeShrinkLocked(Instance& in);
  void EnforceBoundsLocked(Instance& touched);
  // The leading blocks of `chain` that `in` holds (0 when not its first).
  static uint32_t MatchLocked(const Instance& in, std::span<const uint64_t> chain);
  Instance& InstanceLocked(uint64_t seed);
  void EvictOldestLocked(Instance& in);

  const Options options_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Instance> instances_;  // by placement seed
  HolderLists first_;  // a chain's first block -> the instances that hold it
  size_t entries_ = 0;
  size_t instance_bytes_ = 0;  // the sum of every instance's `bytes`
};

}  // namespace prefix_router
