// KV cache events: what an engine reports about its prefix cache, as values.
//
// vLLM publishes these over ZMQ (docs/research/peers.md section 5): each message carries a
// sequence number (per publisher, +1 per batch, from 0 at the publisher's start) and one batch
// holding a timestamp, the events and the data-parallel rank. The events are BlockStored (full
// blocks whose KV was computed: the engine's block hashes, the parent block's hash, the blocks'
// token ids, the block size, the LoRA adapter and the storage medium), BlockRemoved (hashes
// evicted) and AllBlocksCleared (the prefix cache was reset).
//
// These types are the contract between the producers (api/kv_event_decoder.h decoding vLLM's
// msgpack, the engine emulator's engine_model::KvEventListener, the simulator's delayed event
// feed) and the consumer (the kv-aware routing policy's index, through Policy::OnKvEvents).
// The engine's own block hashes are opaque to the router: they name blocks so that a later
// BlockRemoved can be matched with its BlockStored, and a BlockStored's parent with an earlier
// block; the router keys its index on hashes it recomputes from the token ids, so it never needs
// to reproduce the engine's hash function (which differs between engines and versions).
//
// Plain values; no thread-safety concerns of their own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace prefix_router {

struct KvBlockStored {
  std::vector<uint64_t> block_hashes;   // the engine's hashes, one per stored block, in order
  std::optional<uint64_t> parent_hash;  // the engine's hash of the block before the first one
  std::vector<uint32_t> token_ids;      // block_hashes.size() x block_size tokens
  uint32_t block_size = 0;              // tokens per block
  std::string adapter;                  // LoRA adapter name; "" = the base model
  std::string medium;                   // "GPU", "CPU", ...; "" = not reported
  bool operator==(const KvBlockStored&) const = default;
};

struct KvBlockRemoved {
  std::vector<uint64_t> block_hashes;  // the engine's hashes of evicted blocks
  std::string medium;
  bool operator==(const KvBlockRemoved&) const = default;
};

struct KvAllBlocksCleared {
  bool operator==(const KvAllBlocksCleared&) const = default;
};

using KvEvent = std::variant<KvBlockStored, KvBlockRemoved, KvAllBlocksCleared>;

struct KvEventBatch {
  uint64_t seq = 0;  // the publisher's sequence number of this batch
  double ts = 0;     // the publisher's timestamp (Unix seconds); informative
  std::vector<KvEvent> events;
  std::optional<int64_t> data_parallel_rank;
  bool operator==(const KvEventBatch&) const = default;
};

}  // namespace prefix_router
