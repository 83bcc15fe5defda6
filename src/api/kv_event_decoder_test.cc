#include "api/kv_event_decoder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace prefix_router::api {
namespace {

using json = nlohmann::json;

// msgpack bytes written out by hand (so the tests do not only check nlohmann against itself).
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& U8(std::initializer_list<int> v) {
    for (int x : v) b.push_back(static_cast<uint8_t>(x));
    return *this;
  }
  Bytes& Str(std::string_view s) {  // fixstr, < 32 bytes
    b.push_back(static_cast<uint8_t>(0xa0 | s.size()));
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& F64(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    b.push_back(0xcb);
    for (int i = 7; i >= 0; --i) b.push_back(static_cast<uint8_t>(bits >> (8 * i)));
    return *this;
  }
  Bytes& U64(uint64_t v) {
    b.push_back(0xcf);
    for (int i = 7; i >= 0; --i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
};

std::span<const uint8_t> Span(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

Result<KvEventBatch> DecodeJson(const json& j, uint64_t seq = 0, KvDecodeStats* stats = nullptr) {
  std::vector<uint8_t> bytes = json::to_msgpack(j);
  return DecodeKvEventBatch(seq, bytes, stats);
}

KvEventBatch WorkedExampleBatch() {
  KvEventBatch b;
  b.ts = 1.5;
  b.data_parallel_rank = 0;
  KvBlockStored s;
  s.block_hashes = {123};
  s.token_ids = {1, 2};
  s.block_size = 2;
  s.medium = "GPU";
  b.events.push_back(s);
  return b;
}

// peers.md section 5's worked example in the legacy positional encoding, bytes written by hand.
TEST(KvEventDecoder, WorkedExampleArrayEncoding) {
  Bytes m;
  m.U8({0x93}).F64(1.5).U8({0x91, 0x98}).Str("BlockStored");
  m.U8({0x91, 0x7b, 0xc0, 0x92, 0x01, 0x02, 0x02, 0xc0}).Str("GPU").U8({0xc0, 0x00});
  Result<KvEventBatch> r = DecodeKvEventMessage(Span(EncodeKvSeq(0)), m.b);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, WorkedExampleBatch());
}

// The same example in the map encoding (vLLM 0.26.0: events as maps, the batch an array).
TEST(KvEventDecoder, WorkedExampleMapEncoding) {
  Bytes m;
  m.U8({0x93}).F64(1.5).U8({0x91, 0x88});
  m.Str("type").Str("BlockStored").Str("block_hashes").U8({0x91, 0x7b});
  m.Str("parent_block_hash").U8({0xc0}).Str("token_ids").U8({0x92, 0x01, 0x02});
  m.Str("block_size").U8({0x02}).Str("lora_id").U8({0xc0}).Str("medium").Str("GPU");
  m.Str("lora_name").U8({0xc0}).U8({0x00});
  Result<KvEventBatch> r = DecodeKvEventMessage(Span(EncodeKvSeq(1)), m.b);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  KvEventBatch want = WorkedExampleBatch();
  want.seq = 1;
  EXPECT_EQ(*r, want);
}

// The encoder writes the worked example byte for byte as vLLM's legacy encoding would (ts aside:
// nlohmann writes 1.5 as a float32, which msgpack readers accept as the same number).
TEST(KvEventDecoder, EncoderArrayMatchesHandWrittenBytes) {
  std::string enc = EncodeKvEventBatch(WorkedExampleBatch(), KvEventEncoding::kArray);
  json got = json::from_msgpack(enc);
  json want = json::parse(R"([1.5, [["BlockStored", [123], null, [1, 2], 2, null, "GPU", null]], 0])");
  EXPECT_EQ(got, want);
}

// The map encoding names vLLM's fields and tags the event with "type".
TEST(KvEventDecoder, EncoderMapUsesVllmKeys) {
  std::string enc = EncodeKvEventBatch(WorkedExampleBatch(), KvEventEncoding::kMap);
  json got = json::from_msgpack(enc);
  ASSERT_TRUE(got.is_array());
  const json& e = got[1][0];
  EXPECT_EQ(e["type"], "BlockStored");
  EXPECT_EQ(e["block_hashes"], json::array({123}));
  EXPECT_TRUE(e["parent_block_hash"].is_null());
  EXPECT_EQ(e["token_ids"], json::array({1, 2}));
  EXPECT_EQ(e["block_size"], 2);
  EXPECT_EQ(e["medium"], "GPU");
  EXPECT_TRUE(e["lora_name"].is_null());
}

// The seq frame is 8 bytes big-endian: 0 and 1 as in the worked example, and the full range.
TEST(KvEventDecoder, SeqFrame) {
  EXPECT_EQ(EncodeKvSeq(0), std::string(8, '\0'));
  EXPECT_EQ(EncodeKvSeq(1), std::string(7, '\0') + '\x01');
  EXPECT_EQ(EncodeKvSeq(0x0102030405060708ull), "\x01\x02\x03\x04\x05\x06\x07\x08");
  EXPECT_EQ(*DecodeKvSeq(Span(EncodeKvSeq(0xFEDCBA9876543210ull))), 0xFEDCBA9876543210ull);
  EXPECT_FALSE(DecodeKvSeq(Span(std::string(7, '\0'))).ok());
  EXPECT_FALSE(DecodeKvSeq(Span(std::string(9, '\0'))).ok());
}

KvEventBatch RichBatch() {
  KvEventBatch b;
  b.seq = 42;
  b.ts = 1789095808.84;
  b.data_parallel_rank = 3;
  KvBlockStored s1;
  s1.block_hashes = {15760518052499183552ull, 7, (1ull << 63)};
  s1.parent_hash = 0xFFFFFFFFFFFFFFFFull;
  for (uint32_t i = 0; i < 3 * 4; ++i) s1.token_ids.push_back(i * 40503u);
  s1.block_size = 4;
  s1.adapter = "sql-lora";
  s1.medium = "CPU";
  b.events.push_back(s1);
  b.events.push_back(KvBlockRemoved{{1, 2, 18446744073709551615ull}, "GPU"});
  b.events.push_back(KvAllBlocksCleared{});
  KvBlockStored s2;
  s2.block_hashes = {99};
  s2.token_ids = {4294967295u, 0, 1};
  s2.block_size = 3;
  b.events.push_back(s2);
  return b;
}

// Encode then decode gives the batch back, in both encodings, with every field and big hashes.
TEST(KvEventDecoder, RoundTripBothEncodings) {
  for (KvEventEncoding enc : {KvEventEncoding::kMap, KvEventEncoding::kArray}) {
    KvEventBatch b = RichBatch();
    std::string bytes = EncodeKvEventBatch(b, enc);
    Result<KvEventBatch> r = DecodeKvEventBatch(42, Span(bytes));
    ASSERT_TRUE(r.ok()) << KvEventEncodingName(enc) << ": " << r.status().ToString();
    EXPECT_EQ(*r, b) << KvEventEncodingName(enc);
  }
  KvEventBatch no_rank;
  no_rank.ts = 3;
  Result<KvEventBatch> r = DecodeKvEventBatch(0, Span(EncodeKvEventBatch(no_rank, KvEventEncoding::kArray)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, no_rank);
}

// The real vLLM 0.26.0 payload (kthena #1535): map events with fields this decoder does not use
// (extra_keys, group_idx, kv_cache_spec_kind) and a hash above 2^63.
TEST(KvEventDecoder, Vllm0260Payload) {
  json tokens = json::array();
  for (int i = 0; i < 16; ++i) tokens.push_back(100 + i);
  json ev = {{"type", "BlockStored"},
             {"block_hashes", json::array({15760518052499183552ull})},
             {"parent_block_hash", nullptr},
             {"token_ids", tokens},
             {"block_size", 16},
             {"lora_id", nullptr},
             {"medium", "GPU"},
             {"lora_name", nullptr},
             {"extra_keys", json::array({nullptr})},
             {"group_idx", 0},
             {"kv_cache_spec_kind", "full_attention"}};
  Result<KvEventBatch> r = DecodeJson(json::array({1789095808.84, json::array({ev}), 0}), 9);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->seq, 9u);
  EXPECT_DOUBLE_EQ(r->ts, 1789095808.84);
  EXPECT_EQ(r->data_parallel_rank, 0);
  ASSERT_EQ(r->events.size(), 1u);
  const auto& s = std::get<KvBlockStored>(r->events[0]);
  EXPECT_EQ(s.block_hashes, std::vector<uint64_t>{15760518052499183552ull});
  EXPECT_FALSE(s.parent_hash.has_value());
  EXPECT_EQ(s.token_ids.size(), 16u);
  EXPECT_EQ(s.token_ids[15], 115u);
  EXPECT_EQ(s.block_size, 16u);
  EXPECT_EQ(s.medium, "GPU");
  EXPECT_EQ(s.adapter, "");
}

// The batch as a map (2026 main declares EventBatch without array_like), unknown keys ignored.
TEST(KvEventDecoder, MapBatch) {
  json j = {
      {"ts", 2},
      {"events", json::array({json::array({"AllBlocksCleared"}), {{"type", "BlockRemoved"}, {"block_hashes", {5}}}})},
      {"data_parallel_rank", nullptr},
      {"future_field", "x"}};
  Result<KvEventBatch> r = DecodeJson(j);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ts, 2);
  EXPECT_FALSE(r->data_parallel_rank.has_value());
  ASSERT_EQ(r->events.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(r->events[0]));
  EXPECT_EQ(std::get<KvBlockRemoved>(r->events[1]), (KvBlockRemoved{{5}, ""}));
}

// Positional events may be short (the first release had no medium or lora_name) or longer
// (extra_keys, group_idx, ... appended); a batch may have extra trailing elements.
TEST(KvEventDecoder, PositionalShortAndLongEvents) {
  json first_release = json::array({"BlockStored", {1}, 9, {7}, 1, nullptr});
  json newest = json::array(
      {"BlockStored", {2}, 1, {8}, 1, nullptr, "GPU", "lora-a", json::array({nullptr}), 0, "full_attention", nullptr});
  json removed_old = json::array({"BlockRemoved", {1}});
  json removed_new = json::array({"BlockRemoved", {2}, "GPU", 0});
  Result<KvEventBatch> r =
      DecodeJson(json::array({0.5, json::array({first_release, newest, removed_old, removed_new}), 1, "x"}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->events.size(), 4u);
  EXPECT_EQ(std::get<KvBlockStored>(r->events[0]), (KvBlockStored{{1}, 9, {7}, 1, "", ""}));
  EXPECT_EQ(std::get<KvBlockStored>(r->events[1]), (KvBlockStored{{2}, 1, {8}, 1, "lora-a", "GPU"}));
  EXPECT_EQ(std::get<KvBlockRemoved>(r->events[2]), (KvBlockRemoved{{1}, ""}));
  EXPECT_EQ(std::get<KvBlockRemoved>(r->events[3]), (KvBlockRemoved{{2}, "GPU"}));
  // A batch of two elements (rank left out) decodes with no rank.
  Result<KvEventBatch> two = DecodeJson(json::array({0.5, json::array()}));
  ASSERT_TRUE(two.ok());
  EXPECT_FALSE(two->data_parallel_rank.has_value());
}

// Hashes as bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) fold to their last 8 bytes big-endian;
// negative ints (old vLLM's Python hash()) keep their two's complement; big uint64 stay exact.
TEST(KvEventDecoder, HashTyping) {
  std::vector<uint8_t> digest(32);
  for (int i = 0; i < 32; ++i) digest[i] = static_cast<uint8_t>(i + 1);
  std::vector<uint8_t> short_digest = {0xAB, 0xCD};
  json ev = json::array(
      {"BlockRemoved", json::array({json::binary(digest), json::binary(short_digest), -1, -9223372036854775807LL - 1,
                                    18446744073709551615ull, 9223372036854775808ull})});
  Result<KvEventBatch> r = DecodeJson(json::array({0, json::array({ev}), 0}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& h = std::get<KvBlockRemoved>(r->events[0]).block_hashes;
  ASSERT_EQ(h.size(), 6u);
  EXPECT_EQ(h[0], 0x191A1B1C1D1E1F20ull);
  EXPECT_EQ(h[1], 0xABCDull);
  EXPECT_EQ(h[2], 0xFFFFFFFFFFFFFFFFull);
  EXPECT_EQ(h[3], 0x8000000000000000ull);
  EXPECT_EQ(h[4], 0xFFFFFFFFFFFFFFFFull);
  EXPECT_EQ(h[5], 0x8000000000000000ull);

  // A bytes parent hash folds too; uint64 written by hand with the 0xcf marker stays exact.
  Bytes m;
  m.U8({0x93, 0x00, 0x91, 0x96}).Str("BlockStored").U8({0x91}).U64(15760518052499183552ull);
  m.U8({0xc4, 0x09, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0x91, 0x05, 0x01, 0xc0, 0x00});
  Result<KvEventBatch> p = DecodeKvEventBatch(0, m.b);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto& s = std::get<KvBlockStored>(p->events[0]);
  EXPECT_EQ(s.block_hashes[0], 15760518052499183552ull);
  EXPECT_EQ(s.parent_hash, 0x0807060504030201ull);
}

// Unknown event types are skipped and counted; known events around them survive.
TEST(KvEventDecoder, UnknownEventTypesSkipped) {
  KvDecodeStats stats;
  json events =
      json::array({json::array({"BlockMoved", 1, 2}), {{"type", "SomethingNew"}}, json::array({"AllBlocksCleared"})});
  Result<KvEventBatch> r = DecodeJson(json::array({0, events, 0}), 0, &stats);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(stats.unknown_events, 2u);
  ASSERT_EQ(r->events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(r->events[0]));
}

// Every kind of malformed payload is a Status error (no crash, no exception).
TEST(KvEventDecoder, MalformedInputs) {
  auto bad = [](const json& j) { return !DecodeJson(j).ok(); };
  auto ev = [](json e) { return json::array({0, json::array({std::move(e)}), 0}); };
  EXPECT_TRUE(bad(json("a string")));
  EXPECT_TRUE(bad(json::array()));                                                     // no ts
  EXPECT_TRUE(bad(json::array({"ts", json::array()})));                                // ts not a number
  EXPECT_TRUE(bad(json::array({0, 5})));                                               // events not an array
  EXPECT_TRUE(bad(json::array({0, json::array(), "rank"})));                           // rank not an int
  EXPECT_TRUE(bad(json::object({{"events", json::array()}})));                         // map batch without ts
  EXPECT_TRUE(bad(ev(5)));                                                             // event not array/map
  EXPECT_TRUE(bad(ev(json::array())));                                                 // empty event
  EXPECT_TRUE(bad(ev(json::array({7}))));                                              // tag not a string
  EXPECT_TRUE(bad(ev(json::object({{"block_hashes", {1}}}))));                         // map event without type
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1}, nullptr, {1}}))));               // too short
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", 1, nullptr, {1}, 1}))));              // hashes not array
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {"h"}, nullptr, {1}, 1}))));          // string hash
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1.5}, nullptr, {1}, 1}))));          // float hash
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1}, "p", {1}, 1}))));                // string parent
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1}, nullptr, {1, 2}, 1}))));         // 2 tokens, 1 block
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1}, nullptr, json::array(), 0}))));  // block_size 0
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1}, nullptr, {1}, -1}))));
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1}, nullptr, {-1}, 1}))));  // negative token
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1}, nullptr, {4294967296ull}, 1}))));
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1}, nullptr, {1}, 1, nullptr, 5}))));  // medium
  EXPECT_TRUE(bad(ev(json::array({"BlockStored", {1}, nullptr, {1}, 1, nullptr, "GPU", 5}))));
  EXPECT_TRUE(bad(ev(json::array({"BlockRemoved"}))));
  EXPECT_TRUE(bad(ev(json::array({"BlockRemoved", {json::binary({})}}))));  // empty bytes hash
  EXPECT_TRUE(bad(ev(json::object({{"type", "BlockStored"}, {"block_hashes", {1}}}))));
  // Not msgpack at all, truncated, trailing bytes, empty.
  std::vector<uint8_t> good = json::to_msgpack(ev(json::array({"AllBlocksCleared"})));
  ASSERT_TRUE(DecodeKvEventBatch(0, good).ok());
  std::vector<uint8_t> truncated(good.begin(), good.end() - 1);
  std::vector<uint8_t> trailing = good;
  trailing.push_back(0x00);
  EXPECT_FALSE(DecodeKvEventBatch(0, truncated).ok());
  EXPECT_FALSE(DecodeKvEventBatch(0, trailing).ok());
  EXPECT_FALSE(DecodeKvEventBatch(0, {}).ok());
  std::vector<uint8_t> garbage = {0xc1, 0xff, 0x00};
  EXPECT_FALSE(DecodeKvEventBatch(0, garbage).ok());
}

// A msgpack header that announces 2^32 - 1 elements in a few bytes is refused without
// allocating for them; the size limits answer ResourceExhausted.
TEST(KvEventDecoder, SizeLimits) {
  std::vector<uint8_t> huge_array = {0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff};
  EXPECT_FALSE(DecodeKvEventBatch(0, huge_array).ok());
  std::vector<uint8_t> too_big(kMaxKvPayloadBytes + 1, 0xc0);
  EXPECT_EQ(DecodeKvEventBatch(0, too_big).status().code(), StatusCode::kResourceExhausted);
  json many = json::array();
  for (size_t i = 0; i <= kMaxKvEventsPerBatch; ++i) many.push_back(json::array({"AllBlocksCleared"}));
  EXPECT_EQ(DecodeJson(json::array({0, many, 0})).status().code(), StatusCode::kResourceExhausted);
  json hashes = json::array();
  for (size_t i = 0; i <= kMaxKvBlocksPerEvent; ++i) hashes.push_back(i);
  EXPECT_EQ(DecodeJson(json::array({0, json::array({json::array({"BlockRemoved", hashes})}), 0})).status().code(),
            StatusCode::kResourceExhausted);
}

// Random byte flips of valid payloads never crash and never throw (a cheap in-test fuzz; the
// libFuzzer target in fuzz/ goes further).
TEST(KvEventDecoder, MutatedPayloadsNeverCrash) {
  std::mt19937_64 rng(7);
  for (KvEventEncoding enc : {KvEventEncoding::kMap, KvEventEncoding::kArray}) {
    std::string base = EncodeKvEventBatch(RichBatch(), enc);
    int ok = 0;
    for (int i = 0; i < 5000; ++i) {
      std::string m = base;
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) m[rng() % m.size()] = static_cast<char>(rng());
      if (rng() % 4 == 0) m.resize(rng() % m.size());
      ok += DecodeKvEventBatch(0, Span(m)).ok();
    }
    EXPECT_LT(ok, 5000);  // most mutations are rejected, some survive: both paths ran
  }
}

TEST(KvEventDecoder, EncodingNames) {
  EXPECT_EQ(*ParseKvEventEncoding("map"), KvEventEncoding::kMap);
  EXPECT_EQ(*ParseKvEventEncoding("array"), KvEventEncoding::kArray);
  EXPECT_FALSE(ParseKvEventEncoding("json").ok());
  EXPECT_EQ(KvEventEncodingName(KvEventEncoding::kArray), "array");
}

}  // namespace
}  // namespace prefix_router::api
