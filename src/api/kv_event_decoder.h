// vLLM KV cache events on the wire: msgpack bytes <-> KvEventBatch values (core/kv_events.h).
//
// vLLM publishes each batch as a 3-frame ZMQ message: topic, sequence number (8 bytes big-endian
// unsigned, from 0, +1 per batch) and the msgpack of one KVEventBatch (docs/research/peers.md
// section 5). Two encodings are in the field, and the decoder accepts both at both levels:
//   - positional (vLLM <= 0.23, msgspec array_like): the batch is [ts, [event...], dp_rank] and
//     an event is ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//     lora_id, medium, lora_name, ...], tagged by its first element;
//   - map (vLLM PR #42892, 0.26.0): an event is a map tagged by its "type" key; the batch stays
//     an array in released versions, but a map {ts, events, data_parallel_rank} is accepted too
//     (2026 main declares it so).
// Unknown keys and extra trailing elements are ignored (every schema addition broke strict
// consumers); unknown event types are skipped and counted, so a newer engine degrades the view
// rather than killing the stream. Fields added after the first release (medium, lora_name) may
// be absent or null. Block hashes are uint64 ints (the default, values >= 2^63 occur), negative
// ints (old vLLM's Python hash(); kept as their two's complement) or bytes (the raw digest,
// folded to its last 8 bytes read big-endian, as vLLM itself folds it for int hashes).
//
// A BlockStored must carry block_hashes.size() x block_size token ids: the consumer cuts them
// into blocks, so a stored event that does not is malformed rather than guessed at.
//
// Malformed input (bad msgpack, wrong types, sizes over the limits below) yields an
// InvalidArgument or ResourceExhausted Status; nothing throws out of these functions. Memory is
// bounded by the payload limit: the payload is read into nlohmann's DOM first, which takes at
// most about 40 bytes per input byte (an empty nested array or a one-byte map entry is one or
// two bytes of msgpack and 16 to 80 bytes of DOM), so about 80 MiB at the 2 MiB limit, and a
// few times the payload for real batches (integers and token lists).
//
// Pure functions, no I/O; safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/kv_events.h"
#include "core/status.h"

namespace prefix_router::api {

// Limits on one decoded message. A vLLM step stores at most max_num_batched_tokens tokens (a few
// thousand to 64k: at most about 5 msgpack bytes each, 320 KiB, plus 9 to 34 bytes per block
// hash), so these leave room for large steps while keeping a hostile publisher from making the
// gateway allocate without bound.
inline constexpr size_t kMaxKvPayloadBytes = 2u << 20;  // msgpack bytes per batch
inline constexpr size_t kMaxKvEventsPerBatch = 65536;
inline constexpr size_t kMaxKvBlocksPerEvent = 65536;     // hashes in one event
inline constexpr size_t kMaxKvTokensPerEvent = 1u << 20;  // token ids in one BlockStored
inline constexpr uint32_t kMaxKvBlockSize = 4096;         // tokens per block

enum class KvEventEncoding {
  kMap,    // events as maps tagged by "type", the batch as an array (vLLM 0.26.0)
  kArray,  // everything positional (vLLM <= 0.23)
};
std::string_view KvEventEncodingName(KvEventEncoding e);  // "map" | "array"
Result<KvEventEncoding> ParseKvEventEncoding(std::string_view name);

struct KvDecodeStats {
  size_t unknown_events = 0;  // events of a type this decoder does not know, skipped
};

// The sequence frame: exactly 8 bytes, big-endian.
Result<uint64_t> DecodeKvSeq(std::span<const uint8_t> frame);
std::string EncodeKvSeq(uint64_t seq);

// One batch's msgpack payload; `seq` is copied into the result. `stats` may be null.
Result<KvEventBatch> DecodeKvEventBatch(uint64_t seq, std::span<const uint8_t> payload, KvDecodeStats* stats = nullptr);
// The seq frame and payload frame of one message together.
Result<KvEventBatch> DecodeKvEventMessage(std::span<const uint8_t> seq_frame, std::span<const uint8_t> payload,
                                          KvDecodeStats* stats = nullptr);

// The msgpack payload of `batch` as vLLM would send it in `encoding` (the seq is not part of the
// payload). Empty medium/adapter are sent as null; lora_id as null.
std::string EncodeKvEventBatch(const KvEventBatch& batch, KvEventEncoding encoding);

}  // namespace prefix_router::api
