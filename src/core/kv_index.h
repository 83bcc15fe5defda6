// KvIndex: which token blocks each instance's engine reports it holds in its prefix cache, from
// the engines' KV events (core/kv_events.h), for kv-aware routing.
//
// Keys. The index is keyed on hashes the router computes itself from each BlockStored's token
// ids, chained per block exactly as a request's prompt is chained at pick time (KvBlockChain):
//     router_hash(block k) = XXH3-64(token ids of block k, seed = router_hash(block k-1)),
//     router_hash(block -1) = KvChainSeed(adapter)      ("" = the base model)
// so the engine's own hash function (SHA-256 or Python hash() in vLLM, by version and settings)
// never needs to be reproduced. The engine's hashes are kept only to map engine hash -> router
// hash: a BlockRemoved names blocks by engine hash, and a BlockStored's first block chains off
// its parent, named by engine hash. A BlockStored whose parent is unknown (stored before we
// listened, or dropped by the bounds below) cannot be chained: its blocks are skipped and
// counted (orphaned_blocks); its children, which name it as parent, are skipped in turn.
//
// Adapters. A BlockStored's adapter seeds its chain, so an adapter's blocks never match the base
// model's. At pick time the request's served name is taken for an adapter when some engine has
// reported blocks stored under that name (vLLM reports lora_name, the name the adapter is served
// under); any other name is a base model and chains from KvChainSeed(""). At most kMaxAdapters
// names are remembered.
//
// Sequence numbers and trust. Each instance's batches carry the publisher's sequence number (+1
// per batch, from 0 at the publisher's start). An instance's view is FRESH when every batch
// since its publisher started, or since we joined its stream, has been applied, and STALE
// otherwise; kv-aware routes a stale
// instance on the gateway's own view (cache-aware's) instead. Rules, per instance:
//   - the first batch ever seen: accepted, fresh. If its seq is above 0 we joined mid-stream (a
//     gateway started while its engines ran: no replay buffer reaches back to seq 0 on a
//     long-running engine). Such a view can only UNDER-report: every block in it was stored
//     after we joined and every removal since is seen (removing an unknown hash is a no-op), so
//     it never claims a block the engine does not hold. It is exact for everything since the
//     join, and PARTIAL: blocks held since before the join are missing (cache hits produce no
//     events, and blocks chained off them are orphaned), so kv-aware takes, for a partial
//     instance, the larger of its reported and its sent-view match. Partial ends at a restart
//     or a live AllBlocksCleared; earlier batches (seq below the join) are ignored;
//   - seq == last + 1: in sequence;
//   - seq > last + 1: a gap: the batch is applied (what it says is true now) and the missing
//     sequence numbers are remembered; stale;
//   - seq == 0 after any batch: the publisher restarted (its engine's cache is new): the
//     instance's view is cleared and the batch accepted; fresh;
//   - seq < last + 1 and in a missing range: a replayed batch (vLLM's replay socket, which the
//     caller asks for after a gap): applied; each block remembers the seq of the last event that
//     touched it, and blocks removed while a gap is open leave a tombstone, so a replayed event
//     never undoes a newer one; any other seq < last + 1 is a duplicate and ignored;
//   - StreamLost (connection lost, silence beyond the caller's timeout): stale until the next
//     batch shows, by its seq, whether anything was missed.
// An instance becomes fresh again when no sequence number is missing: a replay filled every gap,
// or an AllBlocksCleared (the engine holds nothing; every earlier event is moot) or a restart
// made the missing ones irrelevant. Without a replay it stays stale, however many batches follow:
// a lost BlockRemoved leaves a block the engine no longer holds, and no later event reveals which
// (cache hits produce no events), so no count of later batches would make the view exact again.
// An unfilled gap could instead clear the view and rejoin as a partial mid-stream join; measured
// in the simulator (Release, `prefix-router simulate --workload W --strategy cache-aware,kv-aware
// --seed 1 --duration 900 --warmup 300 --load 70 --no-bounds --kv-event-loss L`; clear after 8
// batches without a replay or at StreamLost), it loses, so unfilled gaps stay stale:
//   kv-aware hit rate / TTFT P90       loss 0.01       loss 0.1
//   long-context  stale (this rule)   99.0% 0.073 s   98.9% 0.073 s   (cache-aware 99.0% 0.073 s)
//                 clear and rejoin    38.5% 0.467 s   69.2% 0.294 s
//                 rejoin, partial 64  69.4% 0.293 s   98.9% 0.073 s   (max of views, 64 batches)
//                 rejoin, partial     99.0% 0.073 s   98.9% 0.073 s   (max of views until clear)
//   agentic       stale (this rule)   96.4% 0.121 s   96.4% 0.121 s   (cache-aware 96.5% 0.121 s)
//                 clear and rejoin    95.8% 0.131 s   95.9% 0.129 s
//                 rejoin, partial 64  96.0% 0.128 s   96.4% 0.121 s
//                 rejoin, partial     96.4% 0.122 s   96.4% 0.121 s
// A cleared view loses every hot prefix for good (hits produce no events, its continuations are
// orphaned): routed on alone it scatters requests. With the larger of the two views it only ties
// the stale rule, which is simpler. The same measurement is why a mid-stream join is partial.
// At most kMaxMissingRanges gaps and kMaxTombstones tombstones are tracked per instance; beyond
// that the instance stays stale until an AllBlocksCleared or a restart.
//
// Bounds, each least recently used first (used: stored, or its prefix sent to the instance,
// Touch; the blocks of one BlockStored or Touch are recorded from the last to the first, so the
// first is the most recent, and a chain is dropped from its tail, as engines evict):
//   - per instance, `tokens_per_instance` tokens (its KV cache: a lost BlockRemoved cannot make
//     the view grow without end);
//   - over all instances, `max_bytes` of bookkeeping, counted as what the containers hold
//     (bytes(): vector capacities, hash-map nodes and bucket arrays, each instance's record),
//     not per entry: beyond it the instance with the most entries drops its tombstones first (it
//     then stays stale until a clear or restart), then its least recently used block. An
//     instance whose blocks fall below half its node capacity is compacted (nodes renumbered,
//     maps rehashed), so memory an instance held at its peak is given back, amortised over the
//     drops; the node vector grows by a quarter, not double, so little is held unused.
// Dropping a block the engine still holds only makes the view miss it (and orphans the blocks
// later stored after it).
//
// Instances are named by their placement seed (FleetSnapshot::placement_seed); ForgetInstance
// drops one that left the fleet.
//
// Thread-safety: one mutex guards everything; every method may be called from any thread. Match
// hashes the request's tokens outside the lock (it locks twice, briefly), so event batches and
// concurrent picks wait only for table lookups.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "core/holder_lists.h"
#include "core/kv_events.h"

namespace prefix_router {

// The seed of a token-block chain: the adapter's name ("" = the base model).
uint64_t KvChainSeed(std::string_view adapter);
// Appends to `out` the router hashes of the leading whole blocks of `tokens` (at most
// `max_blocks`), chained from `seed`. REQUIRES: block_size > 0
void KvBlockChain(std::span<const uint32_t> tokens, uint32_t block_size, size_t max_blocks, uint64_t seed,
                  std::vector<uint64_t>& out);

class KvIndex {
 public:
  // Bookkeeping per held block, an estimate for sizing `max_bytes` (the bound itself counts what
  // the containers hold, see bytes()), kept from when the maps were node-based (two 32-byte
  // nodes and their buckets) so that sizes derived from it do not change: with open addressing,
  // two 16-byte slots (engine hash -> block, router hash -> reference count) at a load of 0.44 to
  // 0.875, the block's record (32 bytes, up to a quarter more unused) and its free-list slot,
  // index_bench's BM_KvIndexFill holds 106 to 110 per block.
  static constexpr size_t kBytesPerEntry = 160;
  static constexpr size_t kMaxMissingRanges = 32;
  static constexpr size_t kMaxTombstones = 4096;
  static constexpr size_t kMaxAdapters = 1024;

  struct Options {
    uint64_t tokens_per_instance = 1u << 20;  // per instance, in tokens of held blocks
    uint64_t max_bytes = 32ull << 20;         // all instances together
  };

  // One instance's answer to Match.
  struct InstanceMatch {
    bool fresh = false;           // false: unknown or stale (see the file comment)
    uint32_t matched_tokens = 0;  // tokens of the leading blocks held (0 when not fresh, unless
                                  // stale_too)
    uint32_t block_size = 0;      // the instance's block size (0 = unknown)
    bool partial = false;         // fresh, joined mid-stream: may miss blocks held before
  };

  explicit KvIndex(Options options) : options_(options) {}
  KvIndex(const KvIndex&) = delete;
  KvIndex& operator=(const KvIndex&) = delete;

  // Applies one batch of instance `seed`'s events (see the file comment for the sequence rules).
  // Malformed events (block size 0, token count not block count x block size) are skipped.
  void Apply(uint64_t seed, const KvEventBatch& batch);
  // A request for `tokens` was sent to instance `seed`: the leading blocks it holds become its
  // most recently used (the first most recent of all), as the engine's use makes them, so the
  // bounds drop what the engine is least likely to still hold (hits produce no events: without
  // this, a hot prefix stored once would age in the index while the engine keeps it).
  void Touch(uint64_t seed, std::span<const uint32_t> tokens, std::string_view served_name, size_t max_tokens);
  // The instance's stream was lost: stale until its next batch arrives.
  void StreamLost(uint64_t seed);
  void ForgetInstance(uint64_t seed);
  // The seeds of every instance the index knows, in no particular order.
  std::vector<uint64_t> Instances() const;

  // For each instance of `seeds`, whether its view is fresh and, if so (or with `stale_too`), the
  // tokens of the leading blocks of `tokens` (chained for `served_name`, see the file comment) it
  // holds, at most `max_tokens`. Does not change recency (a match is a guess).
  // REQUIRES: out.size() == seeds.size()
  void Match(std::span<const uint32_t> tokens, std::string_view served_name, size_t max_tokens,
             std::span<const uint64_t> seeds, std::span<InstanceMatch> out, bool stale_too = false) const;

  // The instances whose blocks include the first block of `tokens` (chained for `served_name`)
  // at their own block size, into `out` (cleared first), in no particular order, fresh or not:
  // the only instances Match can give matched tokens, found with one lookup per block size in
  // use and per holder, not per instance (a decision over 10,000 instances).
  void Holders(std::span<const uint32_t> tokens, std::string_view served_name, size_t max_tokens,
               std::vector<uint64_t>& out) const;
  // Whether any of the instances `is_candidate` accepts (a predicate on seeds) has a fresh view.
  // Walks whichever is fewer, the `candidates` (seeds by index, `seed_of(k)` for k < candidates)
  // or the instances the index knows, and stops at the first fresh candidate.
  template <typename SeedOf, typename IsCandidate>
  bool AnyFresh(size_t candidates, SeedOf seed_of, IsCandidate is_candidate) const {
    std::lock_guard lock(mu_);
    if (candidates <= instances_.size()) {
      for (size_t k = 0; k < candidates; ++k) {
        auto it = instances_.find(seed_of(k));
        if (it != instances_.end() && it->second.fresh()) return true;
      }
      return false;
    }
    for (const auto& [seed, in] : instances_) {
      if (in.fresh() && is_candidate(seed)) return true;
    }
    return false;
  }
  // The block sizes the instances use (a fleet normally has one), ascending. BlockSizes(out)
  // fills `out` (a decision's reused buffer: no allocation once warm).
  std::vector<uint32_t> BlockSizes() const;
  void BlockSizes(std::vector<uint32_t>& out) const;

  // The chain seed of a request for `served_name` (an adapter's when some engine reported
  // blocks under that name, else the base model's).
  uint64_t ChainSeedFor(std::string_view served_name) const;
  bool fresh(uint64_t seed) const;
  bool partial(uint64_t seed) const;         // joined mid-stream (see the file comment)
  uint32_t block_size(uint64_t seed) const;  // 0 = not known yet
  size_t entries() const;                    // held blocks and tombstones, all instances
  size_t entries(uint64_t seed) const;
  size_t held_blocks(uint64_t seed) const;  // blocks the instance holds (tombstones not counted)
  // The memory the index's containers hold, all instances: vector capacities x element size,
  // hash-map nodes (with the allocator's rounding) and bucket arrays, each instance's record.
  // Stays at most max_bytes once any block is held (instances' records alone may exceed a tiny
  // bound).
  size_t bytes() const;
  uint64_t orphaned_blocks() const;  // BlockStored blocks skipped for an unknown parent

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint64_t engine;  // the engine's hash
    uint64_t router;  // ours
    uint64_t seq;     // of the last event that stored it
    uint32_t newer;   // towards the most recently stored end
    uint32_t older;
  };
  struct Held {
    uint32_t count : 31 = 0;  // engine blocks with these tokens
    uint32_t first : 1 = 0;   // a chain's first block (listed in first_)
    uint32_t node = kNone;    // one of them (kNone: the one recorded was removed)
  };
  struct Instance {
    uint64_t seed = 0;
    // Open addressing (no allocation per entry): an event batch inserts and erases a map entry
    // per block in both.
    boost::unordered_flat_map<uint64_t, uint32_t> by_engine;  // engine hash -> node
    boost::unordered_flat_map<uint64_t, Held> held;           // router hash -> nodes with it
    std::vector<Node> nodes;
    std::vector<uint32_t> free;
    uint32_t newest = kNone;
    uint32_t oldest = kNone;
    uint32_t block_size = 0;
    // Sequence state.
    bool seen = false;       // a batch has been applied
    uint64_t next = 0;       // the seq expected next
    bool lost = false;       // StreamLost since the last batch
    bool untracked = false;  // gaps or tombstones overflowed: stale until a clear or restart
    std::vector<std::pair<uint64_t, uint64_t>> missing;  // [from, to) not received, sorted
    std::unordered_map<uint64_t, uint64_t> tombstones;   // engine hash -> seq of its removal
    bool partial = false;                                // joined mid-stream, no restart or clear since

    size_t bytes = 0;  // BytesLocked(*this) when last counted into instance_bytes_

    bool fresh() const { return seen && !lost && !untracked && missing.empty(); }
    size_t entries() const { return by_engine.size() + tombstones.size(); }
  };

  uint64_t CapacityBlocks(const Instance& in) const;
  static size_t BytesLocked(const Instance& in);
  // Recomputed over every instance (bytes()); TrackedBytesLocked is the same figure kept up to
  // date per change (RecountLocked), so that a batch costs no pass over every instance.
  size_t TotalBytesLocked() const;
  size_t TrackedBytesLocked() const;
  void RecountLocked(Instance& in);
  // Gives back the memory of an instance holding well under its capacity (amortised: only when
  // its blocks are below half its node capacity). Renumbers its nodes.
  void MaybeShrinkLocked(Instance& in);
  void StoreLocked(Instance& in, const KvBlockStored& e, uint64_t seq, bool replayed);
  void RemoveLocked(Instance& in, const KvBlockRemoved& e, uint64_t seq, bool replayed);
  // Drops the blocks and tombstones of events before `seq` (UINT64_MAX: all of them).
  void ClearBeforeLocked(Instance& in, uint64_t seq);
  // An AllBlocksCleared of batch `seq`: ClearBefore, and the missing batches before it are moot.
  void AllClearedLocked(Instance& in, uint64_t seq);
  // `first`: router is a chain's first block (no parent), kept in first_ while held.
  void Hold(Instance& in, uint64_t router, uint32_t n, bool first);
  void Release(Instance& in, uint64_t router, uint32_t n);
  void InsertNodeLocked(Instance& in, uint64_t engine, uint64_t router, uint64_t seq, bool first);
  Instance& InstanceLocked(uint64_t seed);
  void SetBlockSizeLocked(Instance& in, uint32_t block_size);  // keeps block_sizes_
  void EraseNodeLocked(Instance& in, uint32_t n);
  void Unlink(Instance& in, uint32_t n);
  void LinkNewest(Instance& in, uint32_t n);
  void AddMissingLocked(Instance& in, uint64_t from, uint64_t to);
  bool TakeMissingLocked(Instance& in, uint64_t seq);
  void DropTombstonesLocked(Instance& in);
  void EnforceBoundsLocked(Instance& touched);

  const Options options_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Instance> instances_;  // by placement seed
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Names seen in BlockStored events.
  std::unordered_set<std::string, NameHash, std::equal_to<>> adapters_;
  size_t entries_ = 0;
  uint64_t orphaned_ = 0;
  std::vector<uint64_t> scratch_;  // router hashes of the BlockStored being applied
  size_t instance_bytes_ = 0;      // the sum of every instance's `bytes`
  size_t adapter_bytes_ = 0;       // adapters_' entries
  HolderLists first_;  // a chain's first block (router hash) -> the instances holding it
  std::vector<std::pair<uint32_t, uint32_t>> block_sizes_;  // block size -> instances using it, ascending
};

}  // namespace prefix_router
