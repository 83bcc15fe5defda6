#include "api/kv_event_decoder.h"

#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <variant>

namespace prefix_router::api {
namespace {

using json = nlohmann::json;

Status Bad(std::string_view where, std::string_view what) {
  return Status::InvalidArgument(std::string("kv event batch: ") + std::string(where) + ": " + std::string(what));
}

// An engine hash: uint64 as is, a negative int as its two's complement, bytes folded to the
// last 8 bytes big-endian.
Result<uint64_t> ReadHash(const json& v, std::string_view where) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_binary()) {
    const auto& bytes = v.get_binary();
    if (bytes.empty()) return Bad(where, "empty bytes hash");
    uint64_t h = 0;
    size_t from = bytes.size() > 8 ? bytes.size() - 8 : 0;
    for (size_t i = from; i < bytes.size(); ++i) h = (h << 8) | bytes[i];
    return h;
  }
  return Bad(where, "a block hash must be an integer or bytes");
}

Result<std::vector<uint64_t>> ReadHashes(const json& v, std::string_view where) {
  if (!v.is_array()) return Bad(where, "block_hashes must be an array");
  if (v.size() > kMaxKvBlocksPerEvent) {
    return Status::ResourceExhausted("kv event batch: " + std::string(where) + ": more than " +
                                     std::to_string(kMaxKvBlocksPerEvent) + " block hashes");
  }
  std::vector<uint64_t> out;
  out.reserve(v.size());
  for (const json& h : v) {
    Result<uint64_t> r = ReadHash(h, where);
    if (!r.ok()) return r.status();
    out.push_back(*r);
  }
  return out;
}

// null or a string; `out` is "" for null.
Status ReadOptionalString(const json* v, std::string_view field, std::string& out) {
  out.clear();
  if (v == nullptr || v->is_null()) return Status::Ok();
  if (!v->is_string()) return Bad(field, "must be a string or null");
  out = v->get<std::string>();
  return Status::Ok();
}

// A non-negative integer, however the encoder typed it (msgpack has signed encodings of
// positive values too).
bool ReadUnsigned(const json& v, uint64_t max, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
  } else if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
  } else {
    return false;
  }
  return out <= max;
}

const json* At(const json& a, size_t i) { return i < a.size() ? &a[i] : nullptr; }
const json* Key(const json& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &*it;
}

// The fields of one event, wherever they came from (array position or map key); null pointers
// for absent fields.
struct StoredFields {
  const json* hashes = nullptr;
  const json* parent = nullptr;
  const json* tokens = nullptr;
  const json* block_size = nullptr;
  const json* medium = nullptr;
  const json* lora_name = nullptr;
};

Result<KvEvent> MakeStored(const StoredFields& f) {
  if (!f.hashes || !f.parent || !f.tokens || !f.block_size) {
    return Bad("BlockStored", "needs block_hashes, parent_block_hash, token_ids and block_size");
  }
  KvBlockStored s;
  Result<std::vector<uint64_t>> hashes = ReadHashes(*f.hashes, "BlockStored.block_hashes");
  if (!hashes.ok()) return hashes.status();
  s.block_hashes = std::move(*hashes);
  if (!f.parent->is_null()) {
    Result<uint64_t> p = ReadHash(*f.parent, "BlockStored.parent_block_hash");
    if (!p.ok()) return p.status();
    s.parent_hash = *p;
  }
  uint64_t block_size = 0;
  if (!ReadUnsigned(*f.block_size, kMaxKvBlockSize, block_size) || block_size < 1) {
    return Bad("BlockStored.block_size", "must be an integer in [1, " + std::to_string(kMaxKvBlockSize) + "]");
  }
  s.block_size = static_cast<uint32_t>(block_size);
  if (!f.tokens->is_array()) return Bad("BlockStored.token_ids", "must be an array");
  if (f.tokens->size() > kMaxKvTokensPerEvent) {
    return Status::ResourceExhausted("kv event batch: BlockStored.token_ids: more than " +
                                     std::to_string(kMaxKvTokensPerEvent) + " tokens");
  }
  if (f.tokens->size() != s.block_hashes.size() * s.block_size) {
    return Bad("BlockStored.token_ids", std::to_string(f.tokens->size()) + " tokens for " +
                                            std::to_string(s.block_hashes.size()) + " blocks of " +
                                            std::to_string(s.block_size));
  }
  s.token_ids.reserve(f.tokens->size());
  for (const json& t : *f.tokens) {
    uint64_t id = 0;
    if (!ReadUnsigned(t, std::numeric_limits<uint32_t>::max(), id)) {
      return Bad("BlockStored.token_ids", "a token id must be an integer in [0, 2^32)");
    }
    s.token_ids.push_back(static_cast<uint32_t>(id));
  }
  if (Status st = ReadOptionalString(f.medium, "BlockStored.medium", s.medium); !st.ok()) return st;
  if (Status st = ReadOptionalString(f.lora_name, "BlockStored.lora_name", s.adapter); !st.ok()) {
    return st;
  }
  return KvEvent(std::move(s));
}

Result<KvEvent> MakeRemoved(const json* hashes, const json* medium) {
  if (!hashes) return Bad("BlockRemoved", "needs block_hashes");
  KvBlockRemoved r;
  Result<std::vector<uint64_t>> h = ReadHashes(*hashes, "BlockRemoved.block_hashes");
  if (!h.ok()) return h.status();
  r.block_hashes = std::move(*h);
  if (Status st = ReadOptionalString(medium, "BlockRemoved.medium", r.medium); !st.ok()) return st;
  return KvEvent(std::move(r));
}

// An event, or std::monostate for an unknown type (skipped).
using MaybeEvent = std::variant<std::monostate, KvEvent>;

Result<MaybeEvent> DecodeEvent(const json& e) {
  std::string_view type;
  bool positional = e.is_array();
  if (positional) {
    if (e.empty() || !e[0].is_string()) return Bad("event", "an array event starts with its type");
    type = e[0].get_ref<const std::string&>();
  } else if (e.is_object()) {
    const json* t = Key(e, "type");
    if (!t || !t->is_string()) return Bad("event", "a map event needs a string \"type\"");
    type = t->get_ref<const std::string&>();
  } else {
    return Bad("event", "must be an array or a map");
  }
  Result<KvEvent> r = Status::Internal("unset");
  if (type == "BlockStored") {
    StoredFields f;
    if (positional) {
      // [tag, block_hashes, parent, token_ids, block_size, lora_id, medium, lora_name, ...]
      f = {At(e, 1), At(e, 2), At(e, 3), At(e, 4), At(e, 6), At(e, 7)};
    } else {
      f = {Key(e, "block_hashes"), Key(e, "parent_block_hash"), Key(e, "token_ids"), Key(e, "block_size"),
           Key(e, "medium"),       Key(e, "lora_name")};
    }
    r = MakeStored(f);
  } else if (type == "BlockRemoved") {
    r = positional ? MakeRemoved(At(e, 1), At(e, 2)) : MakeRemoved(Key(e, "block_hashes"), Key(e, "medium"));
  } else if (type == "AllBlocksCleared") {
    r = KvEvent(KvAllBlocksCleared{});
  } else {
    return MaybeEvent(std::monostate{});
  }
  if (!r.ok()) return r.status();
  return MaybeEvent(std::move(*r));
}

Result<KvEventBatch> DecodeDom(uint64_t seq, const json& root, KvDecodeStats* stats) {
  const json* ts = nullptr;
  const json* events = nullptr;
  const json* rank = nullptr;
  if (root.is_array()) {
    ts = At(root, 0);
    events = At(root, 1);
    rank = At(root, 2);
  } else if (root.is_object()) {
    ts = Key(root, "ts");
    events = Key(root, "events");
    rank = Key(root, "data_parallel_rank");
  } else {
    return Bad("batch", "must be an array [ts, events, dp_rank] or a map");
  }
  if (!ts || !ts->is_number()) return Bad("batch.ts", "must be a number");
  if (!events || !events->is_array()) return Bad("batch.events", "must be an array");
  if (events->size() > kMaxKvEventsPerBatch) {
    return Status::ResourceExhausted("kv event batch: more than " + std::to_string(kMaxKvEventsPerBatch) + " events");
  }
  KvEventBatch batch;
  batch.seq = seq;
  batch.ts = ts->get<double>();
  if (rank && !rank->is_null()) {
    if (rank->is_number_unsigned()) {
      if (rank->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Bad("batch.data_parallel_rank", "out of range");
      }
      batch.data_parallel_rank = static_cast<int64_t>(rank->get<uint64_t>());
    } else if (rank->is_number_integer()) {
      batch.data_parallel_rank = rank->get<int64_t>();
    } else {
      return Bad("batch.data_parallel_rank", "must be an integer or null");
    }
  }
  batch.events.reserve(events->size());
  for (const json& e : *events) {
    Result<MaybeEvent> ev = DecodeEvent(e);
    if (!ev.ok()) return ev.status();
    if (std::holds_alternative<KvEvent>(*ev)) {
      batch.events.push_back(std::move(std::get<KvEvent>(*ev)));
    } else if (stats) {
      ++stats->unknown_events;
    }
  }
  return batch;
}

json Nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json EncodeEvent(const KvEvent& ev, KvEventEncoding encoding) {
  const bool map = encoding == KvEventEncoding::kMap;
  if (const auto* s = std::get_if<KvBlockStored>(&ev)) {
    json hashes = json::array();
    for (uint64_t h : s->block_hashes) hashes.push_back(h);
    json parent = s->parent_hash ? json(*s->parent_hash) : json(nullptr);
    json tokens = json::array();
    for (uint32_t t : s->token_ids) tokens.push_back(static_cast<uint64_t>(t));
    if (map) {
      json e = json::object();
      e["type"] = "BlockStored";
      e["block_hashes"] = std::move(hashes);
      e["parent_block_hash"] = std::move(parent);
      e["token_ids"] = std::move(tokens);
      e["block_size"] = s->block_size;
      e["lora_id"] = nullptr;
      e["medium"] = Nullable(s->medium);
      e["lora_name"] = Nullable(s->adapter);
      return e;
    }
    return json::array({"BlockStored", std::move(hashes), std::move(parent), std::move(tokens), s->block_size, nullptr,
                        Nullable(s->medium), Nullable(s->adapter)});
  }
  if (const auto* r = std::get_if<KvBlockRemoved>(&ev)) {
    json hashes = json::array();
    for (uint64_t h : r->block_hashes) hashes.push_back(h);
    if (map) {
      json e = json::object();
      e["type"] = "BlockRemoved";
      e["block_hashes"] = std::move(hashes);
      e["medium"] = Nullable(r->medium);
      return e;
    }
    return json::array({"BlockRemoved", std::move(hashes), Nullable(r->medium)});
  }
  if (map) return json::object({{"type", "AllBlocksCleared"}});
  return json::array({"AllBlocksCleared"});
}

}  // namespace

std::string_view KvEventEncodingName(KvEventEncoding e) { return e == KvEventEncoding::kMap ? "map" : "array"; }

Result<KvEventEncoding> ParseKvEventEncoding(std::string_view name) {
  if (name == "map") return KvEventEncoding::kMap;
  if (name == "array") return KvEventEncoding::kArray;
  return Status::InvalidArgument("kv events encoding must be map or array, not \"" + std::string(name) + "\"");
}

Result<uint64_t> DecodeKvSeq(std::span<const uint8_t> frame) {
  if (frame.size() != 8) {
    return Status::InvalidArgument("kv event sequence frame must be 8 bytes, not " + std::to_string(frame.size()));
  }
  uint64_t seq = 0;
  for (uint8_t b : frame) seq = (seq << 8) | b;
  return seq;
}

std::string EncodeKvSeq(uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(seq & 0xFF);
    seq >>= 8;
  }
  return out;
}

Result<KvEventBatch> DecodeKvEventBatch(uint64_t seq, std::span<const uint8_t> payload, KvDecodeStats* stats) {
  if (payload.size() > kMaxKvPayloadBytes) {
    return Status::ResourceExhausted("kv event batch: payload of " + std::to_string(payload.size()) + " bytes, over " +
                                     std::to_string(kMaxKvPayloadBytes));
  }
  // nlohmann reports errors by exception; none may leave this function. allow_exceptions=false
  // covers the parse; the try covers allocation failure and anything the accessors might throw.
  try {
    json root = json::from_msgpack(payload.begin(), payload.end(), /*strict=*/true,
                                   /*allow_exceptions=*/false);
    if (root.is_discarded()) return Bad("payload", "not valid msgpack");
    return DecodeDom(seq, root, stats);
  } catch (const std::exception& e) {
    return Bad("payload", e.what());
  }
}

Result<KvEventBatch> DecodeKvEventMessage(std::span<const uint8_t> seq_frame, std::span<const uint8_t> payload,
                                          KvDecodeStats* stats) {
  Result<uint64_t> seq = DecodeKvSeq(seq_frame);
  if (!seq.ok()) return seq.status();
  return DecodeKvEventBatch(*seq, payload, stats);
}

std::string EncodeKvEventBatch(const KvEventBatch& batch, KvEventEncoding encoding) {
  json events = json::array();
  for (const KvEvent& e : batch.events) events.push_back(EncodeEvent(e, encoding));
  json rank = batch.data_parallel_rank ? json(*batch.data_parallel_rank) : json(nullptr);
  json root = json::array({batch.ts, std::move(events), std::move(rank)});
  std::vector<uint8_t> bytes = json::to_msgpack(root);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace prefix_router::api
