#include "engine_model/kv_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"

namespace prefix_router::engine_model {
namespace {

// n distinct-looking token ids, a deterministic function of (seed, position).
std::vector<uint32_t> Tokens(uint64_t seed, size_t n) {
  Rng rng(seed);
  std::vector<uint32_t> out(n);
  for (uint32_t& t : out) t = 1000 + rng.Uniform(127000);
  return out;
}

std::vector<uint32_t> Concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Allocates, computes everything and frees: what a finished request leaves in the cache.
size_t RunToCompletion(KvCache& kv, uint64_t id, const std::vector<uint32_t>& tokens, std::string_view adapter = "") {
  Result<size_t> cached = kv.Allocate(id, tokens, adapter);
  EXPECT_TRUE(cached.ok()) << cached.status().ToString();
  if (!cached.ok()) return 0;
  kv.MarkComputed(id, tokens.size());
  kv.Free(id);
  return *cached;
}

// Records KV events.
struct RecordingListener : KvEventListener {
  struct Stored {
    uint64_t hash, parent;
    std::vector<uint32_t> tokens;
    std::string adapter;
  };
  std::vector<Stored> stored;
  std::vector<uint64_t> removed;
  int cleared = 0;

  void OnBlockStored(uint64_t hash, uint64_t parent, std::span<const uint32_t> token_ids,
                     std::string_view adapter) override {
    stored.push_back({hash, parent, {token_ids.begin(), token_ids.end()}, std::string(adapter)});
  }
  void OnBlockRemoved(uint64_t hash) override { removed.push_back(hash); }
  void OnAllCleared() override { ++cleared; }
};

KvCacheConfig Config(uint32_t block_size, uint32_t capacity) { return KvCacheConfig{block_size, capacity}; }

// A block matches only after the same whole prefix: equal blocks behind different prefixes miss.
TEST(KvCacheTest, BlockHashesChainOverThePrefix) {
  KvCache kv(Config(4, 64));
  const std::vector<uint32_t> shared = Tokens(3, 8);
  RunToCompletion(kv, 1, Concat(Tokens(1, 8), shared));
  EXPECT_EQ(kv.LongestCachedPrefix(Concat(Tokens(1, 8), shared), ""), 4u);
  EXPECT_EQ(kv.LongestCachedPrefix(Concat(Tokens(2, 8), shared), ""), 0u);
  EXPECT_EQ(kv.LongestCachedPrefix(Concat(Tokens(1, 4), shared), ""), 1u);
}

// A fully cached prompt recomputes its last block (vLLM's max_cache_hit_length = len - 1).
TEST(KvCacheTest, CachedTokensLeaveAtLeastOneTokenToCompute) {
  KvCache kv(Config(16, 1200));
  const std::vector<uint32_t> prompt = Tokens(5, 8000);
  EXPECT_EQ(RunToCompletion(kv, 1, prompt), 0u);
  EXPECT_EQ(kv.LongestCachedPrefix(prompt, ""), 500u);
  EXPECT_EQ(RunToCompletion(kv, 2, prompt), 7984u);
  EXPECT_EQ(RunToCompletion(kv, 3, Concat(prompt, Tokens(6, 5))), 8000u);
  EXPECT_EQ(RunToCompletion(kv, 4, std::vector<uint32_t>(prompt.begin(), prompt.end() - 1)), 7984u);
  EXPECT_EQ(RunToCompletion(kv, 5, std::vector<uint32_t>(prompt.begin(), prompt.begin() + 1)), 0u);
}

// Only full blocks are shared: a prompt's partial tail is never a hit.
TEST(KvCacheTest, PartialBlocksAreNeverShared) {
  KvCache kv(Config(16, 64));
  const std::vector<uint32_t> prompt = Tokens(8, 20);
  RunToCompletion(kv, 1, prompt);
  EXPECT_EQ(kv.stats().cached_blocks, 1u);
  EXPECT_EQ(RunToCompletion(kv, 2, Concat(prompt, Tokens(9, 12))), 16u);
}

// Under capacity pressure, free cached blocks go least recently used first; a touch refreshes.
TEST(KvCacheTest, EvictsLeastRecentlyUsedFirst) {
  KvCache kv(Config(4, 7));
  const auto a = Tokens(1, 8), b = Tokens(2, 8), c = Tokens(3, 8);
  RunToCompletion(kv, 1, a);
  RunToCompletion(kv, 2, b);
  RunToCompletion(kv, 3, c);
  // Touch A: a request extending it reuses both of its blocks.
  EXPECT_EQ(RunToCompletion(kv, 4, Concat(a, Tokens(4, 1))), 8u);
  // Two more 2-block requests need 4 blocks; 1 was never used, so 3 cached ones go: B's two
  // (least recently used), then C's tail block (a request's tail goes before its prefix).
  RunToCompletion(kv, 5, Tokens(5, 8));
  RunToCompletion(kv, 6, Tokens(6, 8));
  EXPECT_EQ(kv.LongestCachedPrefix(a, ""), 2u);
  EXPECT_EQ(kv.LongestCachedPrefix(b, ""), 0u);
  EXPECT_EQ(kv.LongestCachedPrefix(c, ""), 1u);
  EXPECT_EQ(kv.LongestCachedPrefix(Tokens(5, 8), ""), 2u);
  EXPECT_EQ(kv.LongestCachedPrefix(Tokens(6, 8), ""), 2u);
  EXPECT_EQ(kv.stats().evicted_blocks, 3u);
  EXPECT_TRUE(kv.CheckInvariants().ok()) << kv.CheckInvariants().ToString();
}

// Blocks pinned by a running request survive any pressure; allocation fails cleanly instead.
TEST(KvCacheTest, PinnedBlocksSurvivePressure) {
  KvCache kv(Config(4, 6));
  const auto running = Tokens(1, 8);
  ASSERT_TRUE(kv.Allocate(1, running, "").ok());
  kv.MarkComputed(1, running.size());
  for (uint64_t id = 2; id < 10; ++id) RunToCompletion(kv, id, Tokens(id, 8));
  EXPECT_EQ(kv.LongestCachedPrefix(running, ""), 2u);
  EXPECT_EQ(kv.LongestCachedPrefix(Tokens(9, 8), ""), 2u);
  EXPECT_EQ(kv.LongestCachedPrefix(Tokens(2, 8), ""), 0u);

  // 5 blocks needed, 4 not pinned: refused, and nothing changed.
  const KvCacheStats before = kv.stats();
  Result<size_t> r = kv.Allocate(20, Tokens(20, 20), "");
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(kv.IsLive(20));
  EXPECT_EQ(kv.num_free_blocks(), 4u);
  EXPECT_EQ(kv.stats().evicted_blocks, before.evicted_blocks);
  EXPECT_EQ(kv.stats().query_tokens, before.query_tokens);
  EXPECT_EQ(kv.LongestCachedPrefix(Tokens(9, 8), ""), 2u);
  EXPECT_TRUE(kv.CheckInvariants().ok());

  kv.Free(1);
  EXPECT_TRUE(kv.Allocate(20, Tokens(20, 20), "").ok());
}

// Cached hits sitting on the free queue are not counted twice as free space.
TEST(KvCacheTest, HitsOnTheFreeQueueAreNotFreeSpace) {
  KvCache kv(Config(4, 4));
  const auto x = Tokens(1, 8);
  RunToCompletion(kv, 1, x);
  EXPECT_EQ(kv.Allocate(2, Concat(x, Tokens(2, 12)), "").status().code(), StatusCode::kResourceExhausted);
  Result<size_t> ok = kv.Allocate(3, Concat(x, Tokens(3, 8)), "");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 8u);
  EXPECT_EQ(kv.num_free_blocks(), 0u);
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

// The same tokens under another adapter (or the base model) never hit.
TEST(KvCacheTest, AdaptersAreIsolated) {
  KvCache kv(Config(16, 64));
  const auto prompt = Tokens(4, 100);
  RunToCompletion(kv, 1, prompt, "sql-lora");
  EXPECT_EQ(kv.LongestCachedPrefix(prompt, "sql-lora"), 6u);
  EXPECT_EQ(kv.LongestCachedPrefix(prompt, ""), 0u);
  EXPECT_EQ(kv.LongestCachedPrefix(prompt, "chat-lora"), 0u);
  EXPECT_EQ(RunToCompletion(kv, 2, prompt, "chat-lora"), 0u);
  EXPECT_EQ(RunToCompletion(kv, 3, prompt, "sql-lora"), 96u);
}

// Generated tokens fill blocks that are registered once computed, with chained store events.
TEST(KvCacheTest, DecodeBlocksAreRegisteredWithChainedEvents) {
  RecordingListener events;
  KvCache kv(Config(4, 64), &events);
  std::vector<uint32_t> all = Tokens(1, 10);
  ASSERT_TRUE(kv.Allocate(1, all, "lora-a").ok());
  kv.MarkComputed(1, 10);
  EXPECT_EQ(events.stored.size(), 2u);
  const auto generated = Tokens(2, 10);
  for (uint32_t t : generated) {
    ASSERT_TRUE(kv.AppendTokens(1, std::span<const uint32_t>(&t, 1)).ok());
    all.push_back(t);
    kv.MarkComputed(1, all.size() - 1);  // a sampled token is computed in the next step
  }
  EXPECT_EQ(kv.NumTokens(1), 20u);
  EXPECT_EQ(kv.LongestCachedPrefix(all, "lora-a"), 4u);
  kv.MarkComputed(1, all.size());
  EXPECT_EQ(kv.LongestCachedPrefix(all, "lora-a"), 5u);

  ASSERT_EQ(events.stored.size(), 5u);
  uint64_t parent = kRootParentHash;
  for (size_t b = 0; b < 5; ++b) {
    const auto& s = events.stored[b];
    EXPECT_EQ(s.parent, parent);
    EXPECT_EQ(s.tokens, std::vector<uint32_t>(all.begin() + 4 * b, all.begin() + 4 * b + 4));
    EXPECT_EQ(s.adapter, "lora-a");
    EXPECT_EQ(s.hash, BlockHash(parent, s.tokens, AdapterHash("lora-a")));
    parent = s.hash;
  }
  kv.Free(1);
  EXPECT_TRUE(events.removed.empty());
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

// Evictions and resets are reported; a reset is refused while blocks are in use.
TEST(KvCacheTest, ReportsRemovalsAndClears) {
  RecordingListener events;
  KvCache kv(Config(4, 2), &events);
  RunToCompletion(kv, 1, Tokens(1, 8));
  ASSERT_EQ(events.stored.size(), 2u);
  RunToCompletion(kv, 2, Tokens(2, 4));
  ASSERT_EQ(events.removed.size(), 1u);
  EXPECT_EQ(events.removed[0], events.stored[1].hash);  // the tail block went first

  ASSERT_TRUE(kv.Allocate(3, Tokens(3, 3), "").ok());
  EXPECT_EQ(kv.ResetPrefixCache().code(), StatusCode::kUnavailable);
  EXPECT_EQ(events.cleared, 0);
  kv.Free(3);
  EXPECT_TRUE(kv.ResetPrefixCache().ok());
  EXPECT_EQ(events.cleared, 1);
  EXPECT_EQ(kv.stats().cached_blocks, 0u);
  EXPECT_EQ(kv.LongestCachedPrefix(Tokens(2, 4), ""), 0u);
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

// Growing a request fails without side effects when no block is free.
TEST(KvCacheTest, AppendFailsCleanlyWhenFull) {
  KvCache kv(Config(4, 3));
  ASSERT_TRUE(kv.Allocate(1, Tokens(1, 11), "").ok());
  const uint32_t t = 1234;
  EXPECT_TRUE(kv.AppendTokens(1, std::span<const uint32_t>(&t, 1)).ok());
  EXPECT_EQ(kv.AppendTokens(1, std::span<const uint32_t>(&t, 1)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.NumTokens(1), 12u);
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

// Allocate with a first chunk holds the cached prefix and that chunk only; Grow takes blocks for
// later chunks and fails cleanly when the cache is full.
TEST(KvCacheTest, AllocatesPerChunkAndGrows) {
  KvCache kv(Config(16, 20));
  const std::vector<uint32_t> a = Tokens(1, 300);  // 19 blocks if held whole
  Result<size_t> cached = kv.Allocate(1, a, "", 100);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, 0u);
  EXPECT_EQ(kv.NumHeld(1), 100u);
  EXPECT_EQ(kv.NumTokens(1), 300u);
  EXPECT_EQ(kv.num_free_blocks(), 13u);  // 7 blocks hold 100 tokens
  kv.MarkComputed(1, 100);
  ASSERT_TRUE(kv.Grow(1, 250).ok());
  EXPECT_EQ(kv.num_free_blocks(), 4u);  // 16 blocks
  EXPECT_TRUE(kv.CheckInvariants().ok());
  // Another request takes what is left; the first cannot grow to its end.
  ASSERT_TRUE(kv.Allocate(2, Tokens(2, 64), "").ok());
  EXPECT_EQ(kv.Grow(1, 300).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.NumHeld(1), 250u);
  EXPECT_TRUE(kv.CheckInvariants().ok());
  kv.Free(2);
  EXPECT_TRUE(kv.Grow(1, 300).ok());
  EXPECT_EQ(kv.LongestCachedPrefix(a, ""), 6u);  // the full blocks computed so far
  kv.MarkComputed(1, 300);
  kv.Free(1);
  EXPECT_EQ(kv.LongestCachedPrefix(a, ""), 18u);  // every full block
  EXPECT_FALSE(kv.Allocate(3, a, "", 0).ok());
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

// Two requests computing the same prefix at once keep one registered copy.
TEST(KvCacheTest, ConcurrentDuplicatesKeepOneCopy) {
  KvCache kv(Config(4, 10));
  const auto prompt = Tokens(1, 8);
  ASSERT_EQ(*kv.Allocate(1, prompt, ""), 0u);
  ASSERT_EQ(*kv.Allocate(2, prompt, ""), 0u);
  kv.MarkComputed(1, 8);
  kv.MarkComputed(2, 8);
  EXPECT_EQ(kv.stats().cached_blocks, 2u);
  kv.Free(1);
  kv.Free(2);
  EXPECT_TRUE(kv.CheckInvariants().ok());
  EXPECT_EQ(RunToCompletion(kv, 3, Concat(prompt, Tokens(3, 1))), 8u);
}

// Usage, queries and hits are counted like vLLM's gauges and counters.
TEST(KvCacheTest, CountsUsageQueriesAndHits) {
  KvCache kv(Config(16, 100));
  const auto prompt = Tokens(1, 160);
  RunToCompletion(kv, 1, prompt);
  ASSERT_TRUE(kv.Allocate(2, Concat(prompt, Tokens(2, 40)), "").ok());
  const KvCacheStats s = kv.stats();
  EXPECT_EQ(s.query_tokens, 160u + 200u);
  EXPECT_EQ(s.hit_tokens, 160u);
  EXPECT_EQ(s.used_blocks, 13u);
  EXPECT_DOUBLE_EQ(s.usage(), 0.13);
  EXPECT_EQ(s.cached_blocks, 10u);
  kv.Free(2);
  EXPECT_EQ(kv.usage(), 0.0);
}

// Invalid configurations and requests are refused with a named field.
TEST(KvCacheTest, ValidatesConfigAndRequests) {
  EXPECT_FALSE((KvCacheConfig{0, 10}).Validate().ok());
  EXPECT_FALSE((KvCacheConfig{512, 10}).Validate().ok());
  EXPECT_FALSE((KvCacheConfig{16, 0}).Validate().ok());
  EXPECT_NE((KvCacheConfig{0, 10}).Validate().message().find("block_size"), std::string::npos);
  KvCache kv(Config(16, 10));
  EXPECT_EQ(kv.Allocate(1, {}, "").status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(kv.Allocate(1, Tokens(1, 5), "").ok());
  EXPECT_EQ(kv.Allocate(1, Tokens(1, 5), "").status().code(), StatusCode::kInvalidArgument);
  kv.Free(7);  // not live: no-op
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

// A long random mix of operations keeps every invariant (seeded).
TEST(KvCacheTest, RandomOperationsKeepInvariants) {
  RecordingListener events;
  KvCache kv(Config(4, 40), &events);
  Rng rng(2024);
  std::vector<std::vector<uint32_t>> prefixes;
  for (uint64_t i = 0; i < 6; ++i) prefixes.push_back(Tokens(100 + i, 4 + 4 * i));
  std::vector<uint64_t> live;
  uint64_t next_id = 1;
  for (int op = 0; op < 4000; ++op) {
    const uint32_t choice = rng.Uniform(10);
    if (choice < 4 || live.empty()) {
      auto prompt = Concat(prefixes[rng.Uniform(6)], Tokens(next_id, 1 + rng.Uniform(12)));
      if (kv.Allocate(next_id, prompt, rng.Uniform(4) == 0 ? "x" : "").ok()) {
        live.push_back(next_id);
      }
      ++next_id;
    } else if (choice < 7) {
      const uint64_t id = live[rng.Uniform(static_cast<uint32_t>(live.size()))];
      const uint32_t t = 1000 + rng.Uniform(1000);
      (void)kv.AppendTokens(id, std::span<const uint32_t>(&t, 1));
      kv.MarkComputed(id, kv.NumTokens(id) - rng.Uniform(2));
    } else {
      const size_t i = rng.Uniform(static_cast<uint32_t>(live.size()));
      kv.Free(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_TRUE(kv.CheckInvariants().ok()) << "op " << op << ": " << kv.CheckInvariants().ToString();
  }
  EXPECT_GT(kv.stats().hit_tokens, 0u);
  EXPECT_GT(events.removed.size(), 0u);
  // Registered = stored - removed.
  EXPECT_EQ(kv.stats().cached_blocks, events.stored.size() - events.removed.size());
}

}  // namespace
}  // namespace prefix_router::engine_model
