// KvIndex (core/kv_index.h): token blocks the engines report, keyed on the router's own hashes,
// with sequence tracking (fresh / stale) and bounds.
#include "core/kv_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "testing/test_lcg.h"

namespace prefix_router {
namespace {

constexpr uint32_t kBs = 4;
constexpr uint64_t kSeed = 7;

std::vector<uint32_t> Tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

KvBlockStored Stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent, std::vector<uint32_t> tokens,
                     std::string adapter = "") {
  KvBlockStored s;
  s.block_hashes = std::move(hashes);
  s.parent_hash = parent;
  s.token_ids = std::move(tokens);
  s.block_size = kBs;
  s.adapter = std::move(adapter);
  s.medium = "GPU";
  return s;
}

KvEventBatch Batch(uint64_t seq, std::vector<KvEvent> events) {
  KvEventBatch b;
  b.seq = seq;
  b.events = std::move(events);
  return b;
}

KvEventBatch Removed(uint64_t seq, std::vector<uint64_t> hashes) {
  return Batch(seq, {KvBlockRemoved{std::move(hashes), "GPU"}});
}

// Matched tokens of `tokens` on instance kSeed (0 when not fresh) and whether it is fresh.
KvIndex::InstanceMatch MatchOne(const KvIndex& index, const std::vector<uint32_t>& tokens, std::string_view served = "",
                                uint64_t seed = kSeed) {
  std::vector<uint64_t> seeds{seed};
  std::vector<KvIndex::InstanceMatch> out(1);
  index.Match(tokens, served, 1 << 20, seeds, out);
  return out[0];
}

KvIndex Index() { return KvIndex(KvIndex::Options{1 << 20, 32 << 20}); }

// A stored chain matches a request by its longest held prefix of whole blocks, whatever the
// engine's hashes are.
TEST(KvIndexTest, MatchesLongestHeldPrefix) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {Stored({901, 17, 5}, std::nullopt, Tokens(100, 12))}));
  EXPECT_TRUE(index.fresh(kSeed));
  EXPECT_EQ(MatchOne(index, Tokens(100, 14)).matched_tokens, 12u);  // 3 blocks + a partial one
  std::vector<uint32_t> diverging = Tokens(100, 12);
  diverging[9] = 1;  // third block differs
  EXPECT_EQ(MatchOne(index, diverging).matched_tokens, 8u);
  EXPECT_EQ(MatchOne(index, Tokens(101, 12)).matched_tokens, 0u);
  EXPECT_EQ(MatchOne(index, Tokens(100, 3)).matched_tokens, 0u);  // no whole block
}

// Blocks stored in two events, the second naming the first's last block as parent, key the same
// as one event: the router's hashes depend on tokens only.
TEST(KvIndexTest, ParentHashChainsAcrossEvents) {
  KvIndex index = Index();
  const std::vector<uint32_t> all = Tokens(50, 16);
  index.Apply(kSeed, Batch(0, {Stored({1, 2}, std::nullopt, {all.begin(), all.begin() + 8})}));
  index.Apply(kSeed, Batch(1, {Stored({3, 4}, 2, {all.begin() + 8, all.end()})}));
  EXPECT_EQ(MatchOne(index, all).matched_tokens, 16u);
  EXPECT_EQ(index.orphaned_blocks(), 0u);
}

// A BlockStored whose parent is unknown cannot be chained: skipped and counted, as are its
// children.
TEST(KvIndexTest, UnknownParentIsOrphaned) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {Stored({3, 4}, 999, Tokens(8, 8)), Stored({5}, 4, Tokens(16, 4))}));
  EXPECT_EQ(index.orphaned_blocks(), 3u);
  EXPECT_EQ(index.entries(kSeed), 0u);
  EXPECT_TRUE(index.fresh(kSeed));
}

// BlockRemoved evicts by engine hash; a router hash held by two engine blocks stays until both go.
TEST(KvIndexTest, RemovedBlocksNoLongerMatch) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {Stored({1, 2, 3}, std::nullopt, Tokens(0, 12))}));
  index.Apply(kSeed, Removed(1, {3}));
  EXPECT_EQ(MatchOne(index, Tokens(0, 12)).matched_tokens, 8u);
  index.Apply(kSeed, Removed(2, {1}));
  EXPECT_EQ(MatchOne(index, Tokens(0, 12)).matched_tokens, 0u);  // the first block is gone
  EXPECT_EQ(index.entries(kSeed), 1u);
  // The same tokens under two engine hashes (e.g. different extra keys): one removal keeps it.
  index.Apply(kSeed, Batch(3, {Stored({10}, std::nullopt, Tokens(0, 4)), Stored({11}, std::nullopt, Tokens(0, 4))}));
  index.Apply(kSeed, Removed(4, {10}));
  EXPECT_EQ(MatchOne(index, Tokens(0, 4)).matched_tokens, 4u);
  index.Apply(kSeed, Removed(5, {11}));
  EXPECT_EQ(MatchOne(index, Tokens(0, 4)).matched_tokens, 0u);
}

// AllBlocksCleared empties the instance (with what its own batch stored before it); it stays
// fresh.
TEST(KvIndexTest, AllBlocksClearedEmptiesTheInstance) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {Stored({1, 2}, std::nullopt, Tokens(0, 8))}));
  index.Apply(kSeed, Batch(1, {Stored({3}, std::nullopt, Tokens(40, 4)), KvAllBlocksCleared{},
                               Stored({4}, std::nullopt, Tokens(80, 4))}));
  EXPECT_EQ(index.entries(kSeed), 1u);
  EXPECT_EQ(MatchOne(index, Tokens(0, 8)).matched_tokens, 0u);
  EXPECT_EQ(MatchOne(index, Tokens(40, 4)).matched_tokens, 0u);
  EXPECT_EQ(MatchOne(index, Tokens(80, 4)).matched_tokens, 4u);
  EXPECT_TRUE(index.fresh(kSeed));
}

// A sequence gap makes the instance stale (Match reports nothing) but its later events still
// apply; a clear makes the missing batches moot and the instance fresh.
TEST(KvIndexTest, GapMakesStaleUntilCleared) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {Stored({1}, std::nullopt, Tokens(0, 4))}));
  index.Apply(kSeed, Batch(2, {Stored({2}, 1, Tokens(4, 4))}));  // seq 1 lost
  EXPECT_FALSE(index.fresh(kSeed));
  auto m = MatchOne(index, Tokens(0, 8));
  EXPECT_FALSE(m.fresh);
  EXPECT_EQ(m.matched_tokens, 0u);
  // With stale_too the (kept) view answers: both batches were applied.
  std::vector<uint64_t> seeds{kSeed};
  std::vector<KvIndex::InstanceMatch> out(1);
  std::vector<uint32_t> tokens = Tokens(0, 8);
  index.Match(tokens, "", 1 << 20, seeds, out, /*stale_too=*/true);
  EXPECT_EQ(out[0].matched_tokens, 8u);
  // More batches in sequence do not make it fresh: seq 1 is still missing (an unfilled gap is
  // not given up on: see the file comment's measurement); nor does the stream being lost.
  for (uint64_t s = 3; s < 20; ++s) index.Apply(kSeed, Batch(s, {}));
  index.StreamLost(kSeed);
  index.Apply(kSeed, Batch(20, {}));
  EXPECT_FALSE(index.fresh(kSeed));
  EXPECT_FALSE(index.partial(kSeed));
  index.Match(tokens, "", 1 << 20, seeds, out, /*stale_too=*/true);
  EXPECT_EQ(out[0].matched_tokens, 8u);  // the view was kept
  index.Apply(kSeed, Batch(21, {KvAllBlocksCleared{}}));
  EXPECT_TRUE(index.fresh(kSeed));
  EXPECT_EQ(index.entries(kSeed), 0u);
}

// A replay of the missing batch fills the gap: fresh again, and a replayed store never brings
// back a block that a newer batch removed, nor a replayed removal undoes a newer store.
TEST(KvIndexTest, ReplayFillsGapWithoutUndoingNewerEvents) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {Stored({1}, std::nullopt, Tokens(0, 4))}));
  index.Apply(kSeed, Removed(3, {2}));  // 1 and 2 lost
  index.Apply(kSeed, Batch(4, {Stored({5}, std::nullopt, Tokens(40, 4))}));
  EXPECT_FALSE(index.fresh(kSeed));
  // Replayed: seq 1 stored block 2 (removed by seq 3) and block 5 (re-stored by seq 4 after).
  index.Apply(kSeed, Batch(1, {Stored({2}, std::nullopt, Tokens(20, 4))}));
  EXPECT_FALSE(index.fresh(kSeed));
  index.Apply(kSeed, Removed(2, {5}));
  EXPECT_TRUE(index.fresh(kSeed));
  EXPECT_EQ(MatchOne(index, Tokens(20, 4)).matched_tokens, 0u);  // removed at seq 3
  EXPECT_EQ(MatchOne(index, Tokens(40, 4)).matched_tokens, 4u);  // stored at seq 4
  EXPECT_EQ(MatchOne(index, Tokens(0, 4)).matched_tokens, 4u);
  EXPECT_EQ(index.entries(kSeed), 2u);  // no tombstone left once the gap is filled
  // A duplicate is ignored.
  index.Apply(kSeed, Removed(4, {1}));
  EXPECT_EQ(MatchOne(index, Tokens(0, 4)).matched_tokens, 4u);
}

// Sequence 0 after a higher one: the publisher restarted, its engine's cache is new: the view is
// cleared and the instance is fresh (even if it was stale).
TEST(KvIndexTest, RestartClearsAndAccepts) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {Stored({1, 2}, std::nullopt, Tokens(0, 8))}));
  index.Apply(kSeed, Batch(5, {}));
  EXPECT_FALSE(index.fresh(kSeed));
  index.Apply(kSeed, Batch(0, {Stored({7}, std::nullopt, Tokens(30, 4))}));
  EXPECT_TRUE(index.fresh(kSeed));
  EXPECT_EQ(MatchOne(index, Tokens(0, 8)).matched_tokens, 0u);
  EXPECT_EQ(MatchOne(index, Tokens(30, 4)).matched_tokens, 4u);
  index.Apply(kSeed, Batch(1, {}));
  EXPECT_TRUE(index.fresh(kSeed));
}

// Joining a stream mid-way (a gateway started while its engine ran: first batch at seq 100) is
// fresh and partial: the instance is routed on the blocks it reports from then on; batches from
// before the join are ignored. An instance never heard from is not fresh.
TEST(KvIndexTest, JoiningMidStreamIsFreshAndPartial) {
  KvIndex index = Index();
  EXPECT_FALSE(index.fresh(kSeed));
  EXPECT_FALSE(MatchOne(index, Tokens(0, 4)).fresh);
  index.Apply(kSeed, Batch(100, {Stored({1}, std::nullopt, Tokens(0, 4))}));
  EXPECT_TRUE(index.fresh(kSeed));
  EXPECT_TRUE(index.partial(kSeed));
  auto m = MatchOne(index, Tokens(0, 8));
  EXPECT_TRUE(m.fresh);
  EXPECT_TRUE(m.partial);
  EXPECT_EQ(m.matched_tokens, 4u);
  // A batch from before the join (a late or replayed one) is ignored, not taken for a replay.
  index.Apply(kSeed, Removed(50, {1}));
  EXPECT_EQ(MatchOne(index, Tokens(0, 4)).matched_tokens, 4u);
  // The view never claims more than the engine holds: removing a block stored before the join
  // (unknown) is a no-op, removing one stored since takes it away.
  index.Apply(kSeed, Removed(101, {99}));
  index.Apply(kSeed, Batch(102, {Stored({2}, 1, Tokens(4, 4))}));
  EXPECT_EQ(MatchOne(index, Tokens(0, 8)).matched_tokens, 8u);
  index.Apply(kSeed, Removed(103, {1}));
  EXPECT_EQ(MatchOne(index, Tokens(0, 8)).matched_tokens, 0u);
  EXPECT_TRUE(index.fresh(kSeed));
  // After the join the usual rules hold: a gap is stale.
  index.Apply(kSeed, Batch(105, {}));
  EXPECT_FALSE(index.fresh(kSeed));
  EXPECT_FALSE(MatchOne(index, Tokens(0, 4)).partial);  // partial is reported for fresh views only
}

// A mid-stream join stays partial until the view is known complete: a live AllBlocksCleared
// (nothing held before it matters) or a publisher restart; a stream starting at 0 never is.
TEST(KvIndexTest, PartialEndsAtClearOrRestart) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {}));
  EXPECT_FALSE(index.partial(kSeed));
  index.Apply(kSeed + 1, Batch(9, {}));
  index.Apply(kSeed + 2, Batch(9, {}));
  EXPECT_TRUE(index.partial(kSeed + 1));
  for (uint64_t s = 10; s < 40; ++s) index.Apply(kSeed + 1, Batch(s, {}));
  EXPECT_TRUE(index.partial(kSeed + 1));  // however many batches follow
  index.Apply(kSeed + 1, Batch(40, {KvAllBlocksCleared{}}));
  EXPECT_FALSE(index.partial(kSeed + 1));
  EXPECT_TRUE(index.fresh(kSeed + 1));
  index.Apply(kSeed + 2, Batch(0, {}));
  EXPECT_FALSE(index.partial(kSeed + 2));
  EXPECT_TRUE(index.fresh(kSeed + 2));
}

// A lost stream is stale until the next batch; in sequence it shows nothing was missed.
TEST(KvIndexTest, StreamLostUntilNextBatchInSequence) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {}));
  index.StreamLost(kSeed);
  EXPECT_FALSE(index.fresh(kSeed));
  index.Apply(kSeed, Batch(1, {}));
  EXPECT_TRUE(index.fresh(kSeed));
  index.StreamLost(kSeed);
  index.Apply(kSeed, Batch(3, {}));  // something was missed
  EXPECT_FALSE(index.fresh(kSeed));
}

// An adapter's blocks chain from its name: they match requests for that adapter only, and the
// base model's blocks do not match the adapter's requests.
TEST(KvIndexTest, AdapterBlocksMatchOnlyTheAdapter) {
  KvIndex index = Index();
  index.Apply(kSeed, Batch(0, {Stored({1, 2}, std::nullopt, Tokens(0, 8), "sql-lora"),
                               Stored({3}, std::nullopt, Tokens(100, 4))}));
  EXPECT_EQ(MatchOne(index, Tokens(0, 8), "sql-lora").matched_tokens, 8u);
  EXPECT_EQ(MatchOne(index, Tokens(0, 8), "llama").matched_tokens, 0u);
  EXPECT_EQ(MatchOne(index, Tokens(0, 8), "").matched_tokens, 0u);
  EXPECT_EQ(MatchOne(index, Tokens(100, 4), "llama").matched_tokens, 4u);  // a base model name
  EXPECT_EQ(MatchOne(index, Tokens(100, 4), "sql-lora").matched_tokens, 0u);
}

// Malformed events (token count not blocks x block size, block size 0) are skipped.
TEST(KvIndexTest, MalformedEventsAreSkipped) {
  KvIndex index = Index();
  KvBlockStored bad = Stored({1, 2}, std::nullopt, Tokens(0, 7));
  KvBlockStored zero = Stored({3}, std::nullopt, Tokens(0, 4));
  zero.block_size = 0;
  index.Apply(kSeed, Batch(0, {bad, zero, KvBlockRemoved{{12345}, ""}}));
  EXPECT_EQ(index.entries(kSeed), 0u);
  EXPECT_TRUE(index.fresh(kSeed));
}

// Per instance, at most tokens_per_instance tokens of blocks, the least recently stored dropped
// first (a chain loses its tail first).
TEST(KvIndexTest, PerInstanceBoundDropsLeastRecentlyStored) {
  KvIndex index(KvIndex::Options{8 * kBs, 32 << 20});  // 8 blocks
  index.Apply(kSeed, Batch(0, {Stored({1, 2, 3, 4, 5, 6}, std::nullopt, Tokens(0, 24))}));
  index.Apply(kSeed, Batch(1, {Stored({11, 12, 13, 14}, std::nullopt, Tokens(1000, 16))}));
  EXPECT_EQ(index.entries(kSeed), 8u);
  EXPECT_EQ(MatchOne(index, Tokens(1000, 16)).matched_tokens, 16u);
  EXPECT_EQ(MatchOne(index, Tokens(0, 24)).matched_tokens, 16u);  // blocks 5 and 6 dropped
}

// Over all instances the bookkeeping stays under max_bytes however many blocks are reported.
TEST(KvIndexTest, GlobalBoundHoldsMemoryUnderMaxBytes) {
  const uint64_t max_bytes = 1 << 20;
  KvIndex index(KvIndex::Options{1 << 30, max_bytes});
  for (uint64_t inst = 0; inst < 8; ++inst) {
    for (uint64_t s = 0; s < 40; ++s) {
      std::vector<uint64_t> hashes(64);
      std::iota(hashes.begin(), hashes.end(), (inst << 32) + s * 64);
      index.Apply(inst, Batch(s, {Stored(hashes, std::nullopt, Tokens(static_cast<uint32_t>(s * 1000), 64 * kBs))}));
      ASSERT_LE(index.bytes(), max_bytes);
    }
  }
  EXPECT_GT(index.bytes(), max_bytes * 9 / 10);  // it is used, not emptied
  size_t sum = 0;
  for (uint64_t inst = 0; inst < 8; ++inst) sum += index.entries(inst);
  EXPECT_EQ(sum, index.entries());
}

// The bound is enforced on a byte count kept per change (no pass over every instance per batch):
// under random streams of stores, removals, restarts, clears, gaps, adapters, touches and
// forgotten instances it stays under max_bytes, and (in debug builds, where bytes() checks it)
// equal to the count recomputed over every instance.
TEST(KvIndexTest, TrackedBytesFollowRandomStreams) {
  const uint64_t max_bytes = 256 << 10;
  KvIndex index(KvIndex::Options{4096, max_bytes});
  testing::TestLcg next(99);
  std::vector<uint64_t> seq(12, 0);
  for (int step = 0; step < 4000; ++step) {
    const uint64_t inst = next(12);
    const uint64_t what = next(100);
    if (what < 2) {
      index.ForgetInstance(inst);
      seq[inst] = 0;
    } else if (what < 4) {
      index.Touch(inst, Tokens(static_cast<uint32_t>(next(50) * 100), 32), "", 1 << 20);
    } else {
      std::vector<KvEvent> events;
      const uint64_t base = (inst << 40) + next(200) * 16;
      std::vector<uint64_t> hashes(1 + next(16));
      std::iota(hashes.begin(), hashes.end(), base);
      if (what < 60) {
        events.push_back(Stored(hashes, std::nullopt, Tokens(static_cast<uint32_t>(base % 100000), hashes.size() * kBs),
                                next(4) == 0 ? "adapter-" + std::to_string(next(5)) : ""));
      } else if (what < 95) {
        events.push_back(KvBlockRemoved{hashes, "GPU"});
      } else {
        events.push_back(KvAllBlocksCleared{});
      }
      // Mostly in sequence; sometimes a gap, a replay of an earlier seq, or a restart.
      const uint64_t r = next(50);
      const uint64_t s = r == 0 ? 0 : r == 1 ? seq[inst] + 3 : r == 2 && seq[inst] > 2 ? seq[inst] - 2 : seq[inst];
      index.Apply(inst, Batch(s, std::move(events)));
      seq[inst] = std::max(seq[inst], s + 1);
      if (s == 0) seq[inst] = 1;
    }
    ASSERT_LE(index.bytes(), max_bytes) << "step " << step;
  }
  EXPECT_GT(index.entries(), 0u);
}

// Holders names exactly the instances Match (stale ones included) gives matched tokens, through
// stores from the root and off a parent, removals, clears, restarts, block sizes changing, the
// bounds' evictions and departures, for instances sharing documents; bytes() (checked against a
// recount in debug builds) counts the holder lists.
TEST(KvIndexTest, HoldersAreTheInstancesThatMatch) {
  const uint64_t max_bytes = 192 << 10;
  KvIndex index(KvIndex::Options{2048, max_bytes});
  testing::TestLcg next(3);
  constexpr uint64_t kInstances = 16;
  std::vector<uint64_t> seq(kInstances, 0);
  std::vector<uint32_t> bs(kInstances, kBs);
  auto doc = [](uint64_t d) { return Tokens(static_cast<uint32_t>(d * 1000), 64); };
  auto engine_hash = [](uint64_t inst, uint64_t d, uint64_t b, uint32_t size) {
    return (inst << 40) + (uint64_t{size} << 32) + (d << 16) + b;
  };
  size_t holders_seen = 0;
  for (int step = 0; step < 3000; ++step) {
    const uint64_t inst = next(kInstances);
    const uint64_t what = next(100);
    if (what < 1) {
      index.ForgetInstance(inst);
      seq[inst] = 0;
    } else {
      std::vector<KvEvent> events;
      const uint64_t d = next(12);
      const std::vector<uint32_t> tokens = doc(d);
      const uint32_t size = bs[inst];
      const uint64_t blocks = tokens.size() / size;
      if (what < 55) {  // a prefix of the document from the root, or a continuation off a parent
        const uint64_t from = next(3) == 0 ? 1 + next(blocks - 1) : 0;
        const uint64_t to = std::min(blocks, from + 1 + next(6));
        std::vector<uint64_t> hashes;
        for (uint64_t b = from; b < to; ++b) hashes.push_back(engine_hash(inst, d, b, size));
        KvBlockStored st = Stored(hashes, from == 0 ? std::nullopt : std::optional(engine_hash(inst, d, from - 1, size)),
                                  {tokens.begin() + from * size, tokens.begin() + to * size});
        st.block_size = size;
        events.push_back(std::move(st));
      } else if (what < 90) {
        std::vector<uint64_t> hashes;
        for (uint64_t b = next(blocks); b < blocks; b += 1 + next(3)) hashes.push_back(engine_hash(inst, d, b, size));
        events.push_back(KvBlockRemoved{hashes, "GPU"});
      } else if (what < 95) {
        events.push_back(KvAllBlocksCleared{});
      } else {  // a restart, at times with another block size
        bs[inst] = next(2) == 0 ? kBs : 2 * kBs;
        seq[inst] = 0;
      }
      const uint64_t s = next(40) == 0 ? seq[inst] + 2 : seq[inst];  // at times a gap
      index.Apply(inst, Batch(s, std::move(events)));
      seq[inst] = s + 1;
    }
    if (step % 40 != 0) continue;
    ASSERT_LE(index.bytes(), max_bytes) << "step " << step;
    std::vector<uint64_t> seeds(kInstances);
    std::iota(seeds.begin(), seeds.end(), 0);
    for (uint64_t d = 0; d < 12; ++d) {
      const std::vector<uint32_t> tokens = doc(d);
      std::vector<KvIndex::InstanceMatch> all(kInstances);
      index.Match(tokens, "", 1 << 20, seeds, all, /*stale_too=*/true);
      std::vector<uint64_t> expected;
      for (uint64_t i = 0; i < kInstances; ++i) {
        if (all[i].matched_tokens > 0) expected.push_back(i);
      }
      std::vector<uint64_t> holders;
      index.Holders(tokens, "", 1 << 20, holders);
      std::sort(holders.begin(), holders.end());
      ASSERT_EQ(holders, expected) << "step " << step << ", document " << d;
      holders_seen += holders.size();
    }
  }
  EXPECT_GT(holders_seen, 100u);  // the comparison saw holders, not only empty answers
  EXPECT_EQ(index.BlockSizes().size(), 2u);
  std::vector<uint32_t> sizes{7, 7, 7};  // a reused buffer: replaced, not appended to
  index.BlockSizes(sizes);
  EXPECT_EQ(sizes, index.BlockSizes());
  for (uint64_t i = 0; i < kInstances; ++i) index.ForgetInstance(i);
  std::vector<uint64_t> none{1};
  index.Holders(doc(0), "", 1 << 20, none);
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(index.BlockSizes().empty());
  index.BlockSizes(sizes);
  EXPECT_TRUE(sizes.empty());
  EXPECT_EQ(index.entries(), 0u);
}

// Instances filled one after another each peak before the global bound moves their blocks to
// the next: what their containers then hold (capacity, not entries) still stays under max_bytes,
// and the compacted instances keep matching their most recent blocks.
TEST(KvIndexTest, GlobalBoundCountsCapacityAfterInstancesShrink) {
  const uint64_t max_bytes = 1 << 20;
  KvIndex index(KvIndex::Options{1 << 30, max_bytes});
  constexpr uint64_t kInstances = 7, kBatches = 60;
  for (uint64_t inst = 0; inst < kInstances; ++inst) {
    for (uint64_t s = 0; s < kBatches; ++s) {
      std::vector<uint64_t> hashes(64);
      std::iota(hashes.begin(), hashes.end(), (inst << 32) + s * 64);
      index.Apply(
          inst,
          Batch(s, {Stored(hashes, std::nullopt, Tokens(static_cast<uint32_t>(inst * 1000000 + s * 1000), 64 * kBs))}));
      ASSERT_LE(index.bytes(), max_bytes) << inst << " " << s;
    }
  }
  EXPECT_GT(index.entries(), max_bytes / KvIndex::kBytesPerEntry * 3 / 4);  // used, not emptied
  for (uint64_t inst = 0; inst < kInstances; ++inst) {
    const auto last = Tokens(static_cast<uint32_t>(inst * 1000000 + (kBatches - 1) * 1000), 64 * kBs);
    EXPECT_EQ(MatchOne(index, last, "", inst).matched_tokens, last.size()) << inst;
    // Removal by engine hash still finds the renumbered blocks.
    std::vector<uint64_t> hashes(64);
    std::iota(hashes.begin(), hashes.end(), (inst << 32) + (kBatches - 1) * 64);
    index.Apply(inst, Removed(kBatches, hashes));
    EXPECT_EQ(MatchOne(index, last, "", inst).matched_tokens, 0u) << inst;
  }
}

// A prefix that keeps being sent to its instance (hits produce no events) stays in the index
// under the bound: Touch makes it recently used; without it, it ages out as other blocks arrive.
TEST(KvIndexTest, TouchKeepsHotPrefixUnderTheBound) {
  const std::vector<uint32_t> hot = Tokens(5, 100 * kBs);
  for (bool touch : {true, false}) {
    KvIndex index(KvIndex::Options{1 << 30, 1 << 20});  // 13,000 to 26,000 entries
    std::vector<uint64_t> hashes(100);
    std::iota(hashes.begin(), hashes.end(), 1);
    index.Apply(kSeed, Batch(0, {Stored(hashes, std::nullopt, hot)}));
    for (uint64_t s = 1; s < 800; ++s) {  // 51,000 blocks: several times what fits
      std::vector<uint64_t> other(64);
      std::iota(other.begin(), other.end(), s << 20);
      index.Apply(kSeed, Batch(s, {Stored(other, std::nullopt, Tokens(static_cast<uint32_t>(s * 100000), 64 * kBs))}));
      if (touch) index.Touch(kSeed, hot, "", 1 << 20);
    }
    EXPECT_EQ(MatchOne(index, hot).matched_tokens, touch ? hot.size() : 0u) << touch;
  }
}

// A forgotten instance holds nothing and is no longer listed.
TEST(KvIndexTest, ForgetInstance) {
  KvIndex index = Index();
  index.Apply(1, Batch(0, {Stored({1}, std::nullopt, Tokens(0, 4))}));
  index.Apply(2, Batch(0, {Stored({1}, std::nullopt, Tokens(0, 4))}));
  index.ForgetInstance(1);
  EXPECT_EQ(index.entries(), 1u);
  EXPECT_EQ(index.Instances(), std::vector<uint64_t>{2});
  EXPECT_FALSE(index.fresh(1));
}

// The chain the router computes for a prompt is the one it keys stored blocks on.
TEST(KvIndexTest, ChainIsDeterministicAndPrefixStable) {
  std::vector<uint64_t> a, b;
  const std::vector<uint32_t> t = Tokens(3, 40);
  KvBlockChain(t, 16, 100, KvChainSeed(""), a);
  KvBlockChain(std::span(t).first(33), 16, 100, KvChainSeed(""), b);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a, b);
  b.clear();
  KvBlockChain(t, 16, 1, KvChainSeed(""), b);
  EXPECT_EQ(b, std::vector<uint64_t>{a[0]});
  b.clear();
  KvBlockChain(t, 16, 100, KvChainSeed("x"), b);
  EXPECT_NE(a[0], b[0]);
}

}  // namespace
}  // namespace prefix_router
