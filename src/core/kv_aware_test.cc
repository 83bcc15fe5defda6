// The kv-aware strategy (core/kv_aware_policy.h, docs/policies.md): cache-aware's cost over the
// blocks the engines report (KV events), cache-aware's own view for instances whose stream is
// stale; and dynamo-kv, our re-implementation of Dynamo's KV router cost, on the same index.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "core/block_chain.h"
#include "core/dynamo_kv_policy.h"
#include "core/fleet.h"
#include "core/kv_events.h"
#include "core/policy.h"
#include "core/rng.h"

namespace prefix_router {
namespace {

constexpr uint32_t kBs = 16;

std::shared_ptr<const FleetSnapshot> Fleet(uint32_t n, const FleetSnapshot* previous = nullptr,
                                           uint32_t skip = UINT32_MAX) {
  std::vector<InstanceSpec> specs;
  for (uint32_t i = 0; i < n; ++i) {
    if (i != skip) specs.push_back(InstanceSpec{"instance-" + std::to_string(i)});
  }
  auto r = FleetSnapshot::Create(std::move(specs), previous);
  EXPECT_TRUE(r.ok());
  return std::move(r).value();
}

RoutingOptions Options(Strategy s, uint32_t threshold = 64) {
  RoutingOptions o;
  o.strategy = s;
  o.concurrency_threshold = threshold;
  EXPECT_TRUE(o.Validate().ok());
  return o;
}

std::vector<uint32_t> Tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<uint32_t> Concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A request: its prompt tokens, and a routing text that shares a prefix exactly when the tokens
// do (4 characters per token, as the gateway's estimate), with its cache-aware chain.
struct Req {
  std::vector<uint32_t> tokens;
  std::string text;
  std::vector<uint64_t> chain;
  RouteRequest route;
  explicit Req(std::vector<uint32_t> t, std::string_view served = "") : tokens(std::move(t)) {
    char buf[8];
    for (uint32_t x : tokens) {
      std::snprintf(buf, sizeof buf, "%04x", x & 0xffff);
      text += buf;
    }
    chain = BuildBlockChain(text, 256, 4096, BlockChainSeed(served, ""));
    route.served_name = served;
    route.blocks = chain;
    route.prompt_tokens = tokens;
    route.text = text;
    route.work_tokens = static_cast<uint32_t>(text.size() / 4);
    route.key = PrefixKey{text.size(), 0};
  }
};

// One batch storing the whole blocks of `tokens` as one chain from the root, with arbitrary
// engine hashes from `first_hash` on.
KvEventBatch Stores(uint64_t seq, const std::vector<uint32_t>& tokens, uint64_t first_hash, std::string adapter = "") {
  KvBlockStored s;
  const size_t blocks = tokens.size() / kBs;
  for (size_t b = 0; b < blocks; ++b) s.block_hashes.push_back(first_hash + b);
  s.token_ids.assign(tokens.begin(), tokens.begin() + blocks * kBs);
  s.block_size = kBs;
  s.adapter = std::move(adapter);
  KvEventBatch batch;
  batch.seq = seq;
  batch.events.push_back(std::move(s));
  return batch;
}

KvEventBatch Removes(uint64_t seq, std::vector<uint64_t> hashes) {
  KvEventBatch batch;
  batch.seq = seq;
  batch.events.push_back(KvBlockRemoved{std::move(hashes), "GPU"});
  return batch;
}

Decision Pick(const Policy& p, const Req& r, const FleetSnapshot& f) {
  Rng rng(1);
  auto d = p.Pick(r.route, f, rng);
  EXPECT_TRUE(d.ok());
  return d.ok() ? *d : Decision{};
}

// Every instance's stream starts (an empty batch 0), so that all are fresh.
void StartStreams(Policy& p, const FleetSnapshot& f, uint64_t seq = 0) {
  for (uint32_t i = 0; i < f.size(); ++i) p.OnKvEvents(f.placement_seed(i), KvEventBatch{seq, 0, {}, 0});
}

// In a fleet of 2,000 instances: a request goes to the one instance that reports its prefix, and
// a document sent to an instance whose stream is lost is found through the sent view.
TEST(KvAwareTest, FindsTheHolderInALargeFleet) {
  auto f = Fleet(2000);
  auto p = MakePolicy(Options(Strategy::kKvAware));
  StartStreams(*p, *f);
  const auto doc = Tokens(5000, 40 * kBs);
  p->OnKvEvents(f->placement_seed(1234), Stores(1, doc, 1));
  const Req r(Concat(doc, Tokens(90000, 5)));
  const Decision d = Pick(*p, r, *f);
  EXPECT_EQ(d.instance, 1234u);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  EXPECT_EQ(d.uncached_tokens, 5u);

  p->OnKvStreamLost(f->placement_seed(77));
  const Req other(Concat(Tokens(70000, 40 * kBs), Tokens(91000, 5)));
  p->OnDispatched(other.route, Decision{77, DecisionKind::kLeastOutstanding, 0}, *f);
  const Req again(Concat(Tokens(70000, 40 * kBs), Tokens(92000, 5)));
  const Decision back = Pick(*p, again, *f);
  EXPECT_EQ(back.instance, 77u);
  EXPECT_EQ(back.kind, DecisionKind::kAffinity);
}

// A request goes where the engines report its prefix, though the gateway never sent it there.
TEST(KvAwareTest, FollowsReportedBlocks) {
  auto f = Fleet(4);
  auto p = MakePolicy(Options(Strategy::kKvAware));
  StartStreams(*p, *f);
  const std::vector<uint32_t> doc = Tokens(1000, 4000);
  p->OnKvEvents(f->placement_seed(2), Stores(1, doc, 500));
  const Decision d = Pick(*p, Req(Concat(doc, Tokens(7, 30))), *f);
  EXPECT_EQ(d.instance, 2u);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  // A request sharing nothing: no instance holds any of it.
  EXPECT_EQ(Pick(*p, Req(Tokens(90000, 4000)), *f).kind, DecisionKind::kLeastOutstanding);
}

// Blocks an engine reports removed no longer attract requests; the longest remaining prefix wins.
TEST(KvAwareTest, EvictionViaBlockRemoved) {
  auto f = Fleet(3);
  auto p = MakePolicy(Options(Strategy::kKvAware));
  StartStreams(*p, *f);
  const std::vector<uint32_t> doc = Tokens(1000, 3200);  // 200 blocks
  p->OnKvEvents(f->placement_seed(0), Stores(1, doc, 100));
  p->OnKvEvents(f->placement_seed(1), Stores(1, std::vector<uint32_t>(doc.begin(), doc.begin() + 1600), 9000));
  const Req r(Concat(doc, Tokens(5, 10)));
  EXPECT_EQ(Pick(*p, r, *f).instance, 0u);
  // Instance 0 evicts its chain's tail beyond block 50 (engine hashes 150..299).
  std::vector<uint64_t> tail(150);
  std::iota(tail.begin(), tail.end(), 150);
  p->OnKvEvents(f->placement_seed(0), Removes(2, tail));
  EXPECT_EQ(Pick(*p, r, *f).instance, 1u);  // 100 blocks held there, 50 on instance 0
  // And AllBlocksCleared on instance 1 leaves instance 0's 50 blocks the best.
  p->OnKvEvents(f->placement_seed(1), KvEventBatch{2, 0, {KvAllBlocksCleared{}}, 0});
  EXPECT_EQ(Pick(*p, r, *f).instance, 0u);
}

// A sequence gap makes an instance stale: what its events said no longer counts, and what the
// gateway sent it (cache-aware's view) does instead.
TEST(KvAwareTest, GapMakesStaleAndFallsBackToSentView) {
  auto f = Fleet(3);
  auto p = MakePolicy(Options(Strategy::kKvAware));
  StartStreams(*p, *f);
  const std::vector<uint32_t> reported = Tokens(1000, 4000);
  const std::vector<uint32_t> sent = Tokens(50000, 4000);
  p->OnKvEvents(f->placement_seed(1), Stores(1, reported, 100));
  const Req r_reported(Concat(reported, Tokens(1, 8)));
  EXPECT_EQ(Pick(*p, r_reported, *f).instance, 1u);
  // The gateway sends `sent` to instance 1; its engine has not reported it yet, but a recent
  // dispatch counts as being computed there.
  const Req r_sent(sent);
  p->OnDispatched(r_sent.route, Decision{1, DecisionKind::kAffinity, 0}, *f);
  EXPECT_EQ(Pick(*p, Req(Concat(sent, Tokens(3, 8))), *f).instance, 1u);
  EXPECT_EQ(Pick(*p, Req(Concat(sent, Tokens(3, 8))), *f).kind, DecisionKind::kAffinity);
  // Batch 2 is lost: batch 3 arrives. Instance 1 is now judged on what it was sent.
  p->OnKvEvents(f->placement_seed(1), KvEventBatch{3, 0, {}, 0});
  const Decision d = Pick(*p, Req(Concat(sent, Tokens(3, 8))), *f);
  EXPECT_EQ(d.instance, 1u);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  EXPECT_EQ(Pick(*p, r_reported, *f).kind, DecisionKind::kLeastOutstanding);
  // A lost stream does the same for instance 2.
  p->OnKvEvents(f->placement_seed(2), Stores(1, reported, 7000));
  EXPECT_EQ(Pick(*p, r_reported, *f).instance, 2u);
  p->OnKvStreamLost(f->placement_seed(2));
  EXPECT_EQ(Pick(*p, r_reported, *f).kind, DecisionKind::kLeastOutstanding);
}

// A request dispatched moments ago counts as held where it went before that engine's events
// report it (they come after the prefill, and late), but only for its most recent dispatches.
TEST(KvAwareTest, RecentDispatchesCountUntilReported) {
  auto f = Fleet(3);
  auto p = MakePolicy(Options(Strategy::kKvAware));
  for (uint32_t i = 0; i < 3; ++i) p->OnKvEvents(f->placement_seed(i), Stores(0, Tokens(900000 + i * 100, 16), 1));
  const std::vector<uint32_t> doc = Tokens(1000, 4000);
  const Req first(Concat(doc, Tokens(1, 8)));
  const Decision d = Pick(*p, first, *f);
  EXPECT_EQ(d.kind, DecisionKind::kLeastOutstanding);
  p->OnDispatched(first.route, d, *f);
  const Decision again = Pick(*p, Req(Concat(doc, Tokens(2, 8))), *f);
  EXPECT_EQ(again.instance, d.instance);
  EXPECT_EQ(again.kind, DecisionKind::kAffinity);
  // Eight later dispatches to the same instance push it out of the recent ones.
  for (uint32_t n = 0; n < 8; ++n) {
    const Req other(Tokens(200000 + n * 5000, 400));
    p->OnDispatched(other.route, Decision{d.instance, DecisionKind::kAffinity, 0}, *f);
  }
  EXPECT_EQ(Pick(*p, Req(Concat(doc, Tokens(3, 8))), *f).kind, DecisionKind::kLeastOutstanding);
}

// A gateway started while its engines ran joins every stream mid-stream (first batch at seq
// 100): the instances are fresh, routed on the blocks they report, and, being partial (blocks
// held before the join are never reported), on what the gateway sent them when that is more;
// a restart makes the view complete and the sent view no longer counts.
TEST(KvAwareTest, JoinedMidStreamRoutesOnReportedBlocks) {
  auto f = Fleet(3);
  auto p = MakePolicy(Options(Strategy::kKvAware));
  StartStreams(*p, *f, 100);
  const std::vector<uint32_t> doc = Tokens(1000, 4000);
  p->OnKvEvents(f->placement_seed(2), Stores(101, doc, 500));
  Decision d = Pick(*p, Req(Concat(doc, Tokens(7, 30))), *f);
  EXPECT_EQ(d.instance, 2u);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  // `sent` goes to instance 1, then eight other requests, so it is no longer a recent dispatch;
  // instance 1's engine never reports it (a hit on a block stored before the join).
  const std::vector<uint32_t> sent = Tokens(50000, 4000);
  const Req r_sent(sent);
  p->OnDispatched(r_sent.route, Decision{1, DecisionKind::kAffinity, 0}, *f);
  for (uint32_t n = 0; n < 8; ++n) {
    const Req other(Tokens(200000 + n * 5000, 400));
    p->OnDispatched(other.route, Decision{1, DecisionKind::kAffinity, 0}, *f);
  }
  d = Pick(*p, Req(Concat(sent, Tokens(3, 8))), *f);
  EXPECT_EQ(d.instance, 1u);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  p->OnKvEvents(f->placement_seed(1), KvEventBatch{0, 0, {}, 0});  // restarted: complete
  EXPECT_EQ(Pick(*p, Req(Concat(sent, Tokens(3, 8))), *f).kind, DecisionKind::kLeastOutstanding);
}

// A publisher restart (sequence back to 0) clears what that instance reported, and its new
// events count at once.
TEST(KvAwareTest, RestartClearsTheInstance) {
  auto f = Fleet(2);
  auto p = MakePolicy(Options(Strategy::kKvAware));
  StartStreams(*p, *f);
  const std::vector<uint32_t> a = Tokens(1000, 2000), b = Tokens(60000, 2000);
  p->OnKvEvents(f->placement_seed(1), Stores(1, a, 100));
  EXPECT_EQ(Pick(*p, Req(a), *f).instance, 1u);
  p->OnKvEvents(f->placement_seed(1), Stores(0, b, 100));  // restarted, same engine hashes even
  EXPECT_EQ(Pick(*p, Req(a), *f).kind, DecisionKind::kLeastOutstanding);
  const Decision d = Pick(*p, Req(b), *f);
  EXPECT_EQ(d.instance, 1u);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
}

// With no fresh stream at all (no events yet, or all lost) kv-aware decides exactly as
// cache-aware does.
TEST(KvAwareTest, WithoutFreshStreamsDecidesAsCacheAware) {
  auto f = Fleet(5);
  auto kv = MakePolicy(Options(Strategy::kKvAware));
  auto ca = MakePolicy(Options(Strategy::kCacheAware));
  Rng rng(3), ra(1), rb(2);
  for (int n = 0; n < 300; ++n) {
    const uint32_t doc = rng.Uniform(9);
    const Req r(Concat(Tokens(doc * 10000, 500 + 64 * doc), Tokens(n * 7 + 100000, 20)));
    auto da = kv->Pick(r.route, *f, ra);
    auto db = ca->Pick(r.route, *f, rb);
    ASSERT_TRUE(da.ok() && db.ok());
    ASSERT_EQ(da->instance, db->instance) << n;
    ASSERT_EQ(da->kind, db->kind) << n;
    kv->OnDispatched(r.route, *da, *f);
    ca->OnDispatched(r.route, *db, *f);
    f->state(da->instance).in_flight.fetch_add(1);
    f->state(da->instance).outstanding_tokens.fetch_add(r.route.work_tokens);
    if (n % 2 == 0) {
      f->state(da->instance).in_flight.fetch_sub(1);
      f->state(da->instance).outstanding_tokens.fetch_sub(r.route.work_tokens);
    }
  }
}

// Two replicas given the same events and the same load decide the same way, ties included
// (two instances reporting the same blocks): ties go to the key's rendezvous preference.
TEST(KvAwareTest, ReplicasWithTheSameEventsAgree) {
  auto f = Fleet(6);
  auto a = MakePolicy(Options(Strategy::kKvAware));
  auto b = MakePolicy(Options(Strategy::kKvAware));
  StartStreams(*a, *f);
  StartStreams(*b, *f);
  std::vector<uint64_t> seq(f->size(), 1);
  Rng events(9), ra(1), rb(2);
  int ties_seen = 0;
  for (int n = 0; n < 300; ++n) {
    const uint32_t doc = events.Uniform(12);
    const std::vector<uint32_t> tokens = Concat(Tokens(doc * 10000, 320 + 32 * doc), Tokens(n * 13 + 200000, 24));
    const Req r(tokens);
    auto da = a->Pick(r.route, *f, ra);
    auto db = b->Pick(r.route, *f, rb);
    ASSERT_TRUE(da.ok() && db.ok());
    ASSERT_EQ(da->instance, db->instance) << n;
    // The chosen engine reports the prompt's blocks; sometimes a second one reports the same.
    for (uint32_t i : {da->instance, (da->instance + 1) % f->size()}) {
      if (i != da->instance && n % 4 != 0) continue;
      ties_seen += i != da->instance;
      const KvEventBatch batch = Stores(seq[i]++, tokens, (uint64_t{i} << 40) + n * 1000);
      a->OnKvEvents(f->placement_seed(i), batch);
      b->OnKvEvents(f->placement_seed(i), batch);
    }
    a->OnDispatched(r.route, *da, *f);
    b->OnDispatched(r.route, *db, *f);
  }
  EXPECT_GT(ties_seen, 50);
}

// The concurrency threshold is honoured: the instance holding the prefix is passed over at it.
TEST(KvAwareTest, ThresholdIsHonoured) {
  auto f = Fleet(3);
  auto p = MakePolicy(Options(Strategy::kKvAware, /*threshold=*/2));
  StartStreams(*p, *f);
  const std::vector<uint32_t> doc = Tokens(1000, 8000);
  p->OnKvEvents(f->placement_seed(0), Stores(1, doc, 1));
  EXPECT_EQ(Pick(*p, Req(doc), *f).instance, 0u);
  f->state(0).in_flight.store(2);
  const Decision d = Pick(*p, Req(doc), *f);
  EXPECT_NE(d.instance, 0u);
  EXPECT_EQ(d.kind, DecisionKind::kOverflow);  // the full one held a longer match
  for (uint32_t i = 0; i < 3; ++i) f->state(i).in_flight.store(2);
  const Decision s = Pick(*p, Req(doc), *f);
  EXPECT_EQ(s.instance, 0u);
  EXPECT_EQ(s.kind, DecisionKind::kSaturated);
}

// An adapter's reported blocks attract requests for that adapter, not for the base model.
TEST(KvAwareTest, AdapterChainsAreApart) {
  auto f = Fleet(3);
  auto p = MakePolicy(Options(Strategy::kKvAware));
  StartStreams(*p, *f);
  const std::vector<uint32_t> doc = Tokens(1000, 4000);
  p->OnKvEvents(f->placement_seed(1), Stores(1, doc, 1, "sql-lora"));
  EXPECT_EQ(Pick(*p, Req(doc, "sql-lora"), *f).instance, 1u);
  EXPECT_EQ(Pick(*p, Req(doc, "sql-lora"), *f).kind, DecisionKind::kAffinity);
  EXPECT_EQ(Pick(*p, Req(doc, "llama"), *f).kind, DecisionKind::kLeastOutstanding);
}

// An instance that leaves the fleet is forgotten: when it comes back (same name) nothing it
// reported or was sent before counts.
TEST(KvAwareTest, DepartedInstanceIsForgotten) {
  auto f = Fleet(3);
  auto p = MakePolicy(Options(Strategy::kKvAware));
  StartStreams(*p, *f);
  const std::vector<uint32_t> doc = Tokens(1000, 4000);
  p->OnKvEvents(f->placement_seed(2), Stores(1, doc, 1));
  const Req r(doc);
  p->OnDispatched(r.route, Decision{2, DecisionKind::kAffinity, 0}, *f);
  EXPECT_EQ(Pick(*p, r, *f).instance, 2u);
  auto without = Fleet(3, f.get(), /*skip=*/2);
  p->OnDispatched(Req(Tokens(5, 100)).route, Decision{0, DecisionKind::kAffinity, 0}, *without);
  auto back = Fleet(3, without.get());
  EXPECT_EQ(Pick(*p, r, *back).kind, DecisionKind::kLeastOutstanding);
}

TEST(KvAwareTest, NamesParse) {
  EXPECT_EQ(*ParseStrategy("kv-aware"), Strategy::kKvAware);
  EXPECT_EQ(*ParseStrategy("dynamo-kv"), Strategy::kDynamoKv);
  EXPECT_EQ(StrategyName(Strategy::kKvAware), "kv-aware");
  EXPECT_EQ(StrategyName(Strategy::kDynamoKv), "dynamo-kv");
  EXPECT_EQ(MakePolicy(Options(Strategy::kKvAware))->name(), "kv-aware");
  EXPECT_EQ(MakePolicy(Options(Strategy::kDynamoKv))->name(), "dynamo-kv");
}

// Dynamo's documented three-worker example (docs/research/peers.md, Dynamo "Worked examples" 1):
// prefill 8 / 5 / 2 blocks and decode 10 / 5 / 9 blocks give logits 18 / 10 / 11 at weight 1.
TEST(DynamoKvTest, DocsExampleLogits) {
  // prefill_blocks = (active_tokens + new_tokens) / block_size: put it all in active_tokens.
  auto logit = [](double prefill, double decode) {
    DynamoWorkerLoad w;
    w.block_size = 16;
    w.active_tokens = prefill * 16;
    w.active_blocks = decode;
    return DynamoKvLogit(w, kDynamoOverlapScoreWeight);
  };
  EXPECT_DOUBLE_EQ(logit(8, 10), 18);
  EXPECT_DOUBLE_EQ(logit(5, 5), 10);
  EXPECT_DOUBLE_EQ(logit(2, 9), 11);
}

// The derived end-to-end example of the notes (peers.md, Dynamo worked example 3): block size
// 16, isl 160; A overlaps 5 blocks with nothing active (logit 15), B overlaps none with 32 active
// tokens in 3 active blocks (logit 25); at weight 0 the logits are 10 and 13.
TEST(DynamoKvTest, DerivedExampleLogits) {
  DynamoWorkerLoad a{160, 16, 5, 0, 0, 10};
  DynamoWorkerLoad b{160, 16, 0, 32, 3, 10};
  EXPECT_DOUBLE_EQ(DynamoKvLogit(a, 1.0), 15);
  EXPECT_DOUBLE_EQ(DynamoKvLogit(b, 1.0), 25);
  EXPECT_DOUBLE_EQ(DynamoKvLogit(a, 0.0), 10);
  EXPECT_DOUBLE_EQ(DynamoKvLogit(b, 0.0), 13);
  // new_tokens is clamped at 0 when the overlap covers more than the input.
  EXPECT_DOUBLE_EQ(DynamoKvLogit(DynamoWorkerLoad{16, 16, 5, 0, 0, 1}, 1.0), 1);
}

// The same example through the policy: A (5 of the request's 10 blocks reported, idle) is chosen
// over B (nothing reported, a 32-token request of 2 blocks in flight); with A loaded it is not,
// and once A's requests complete it is again.
TEST(DynamoKvTest, PolicyChoosesAsTheDerivedExample) {
  auto f = Fleet(2);
  auto p = MakePolicy(Options(Strategy::kDynamoKv));
  const std::vector<uint32_t> prompt = Tokens(1000, 160);
  for (uint32_t i = 0; i < 2; ++i) p->OnKvEvents(f->placement_seed(i), KvEventBatch{0, 0, {}, 0});
  p->OnKvEvents(f->placement_seed(0), Stores(1, std::vector<uint32_t>(prompt.begin(), prompt.begin() + 80), 1));
  p->OnDispatched(Req(Tokens(50000, 32)).route, Decision{1, DecisionKind::kLeastOutstanding, 0}, *f);
  // A: (0 + 80) / 16 + 0 + 10 = 15; B: (32 + 160) / 16 + 2 + 10 = 24.
  const Decision d = Pick(*p, Req(prompt), *f);
  EXPECT_EQ(d.instance, 0u);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  // Two unrelated 160-token requests on A: (320 + 80) / 16 + 20 + 10 = 55 against B's 24.
  for (uint32_t n = 0; n < 2; ++n) {
    p->OnDispatched(Req(Tokens(70000 + n * 1000, 160)).route, Decision{0, DecisionKind::kLeastOutstanding, 0}, *f);
  }
  EXPECT_EQ(Pick(*p, Req(prompt), *f).instance, 1u);
  EXPECT_EQ(Pick(*p, Req(prompt), *f).kind, DecisionKind::kOverflow);
  for (uint32_t n = 0; n < 2; ++n) p->OnCompleted(Decision{0, DecisionKind::kLeastOutstanding, 0}, *f);
  EXPECT_EQ(Pick(*p, Req(prompt), *f).instance, 0u);
}

// Dynamo breaks ties uniformly at random (temperature 0): equal workers share requests.
TEST(DynamoKvTest, TiesAreRandom) {
  auto f = Fleet(4);
  auto p = MakePolicy(Options(Strategy::kDynamoKv));
  Rng rng(5);
  std::vector<int> count(4);
  const Req r(Tokens(1, 64));
  for (int n = 0; n < 4000; ++n) ++count[p->Pick(r.route, *f, rng)->instance];
  for (int c : count) EXPECT_NEAR(c, 1000, 150);
}

// Dynamo's mark_prefill_completed (sequence.rs): a request's new prefill tokens count in its
// worker's load until its first token, its blocks until it completes. Worker 0 caches 15 of the
// probe's 20 blocks but runs an unrelated 160-token request; worker 1 is idle and cold.
TEST(DynamoKvTest, LoadDropsAtFirstToken) {
  auto f = Fleet(2);
  auto p = MakePolicy(Options(Strategy::kDynamoKv));
  StartStreams(*p, *f);
  const std::vector<uint32_t> probe = Tokens(1000, 320);
  p->OnKvEvents(f->placement_seed(0), Stores(1, std::vector<uint32_t>(probe.begin(), probe.begin() + 240), 1));
  const Req other(Tokens(50000, 160));
  RouteRequest route = other.route;
  route.request_id = 7;
  const Decision on0{0, DecisionKind::kLeastOutstanding, 0, 7};
  p->OnDispatched(route, on0, *f);
  // In prefill: worker 0 (160 + 80) / 16 + 10 + 20 = 45, worker 1 320 / 16 + 20 = 40.
  EXPECT_EQ(Pick(*p, Req(probe), *f).instance, 1u);
  // After its first token: worker 0 80 / 16 + 10 + 20 = 35.
  p->OnFirstToken(on0, *f);
  EXPECT_EQ(Pick(*p, Req(probe), *f).instance, 0u);
  // A second first-token event for the same request changes nothing; completion frees its blocks.
  p->OnFirstToken(on0, *f);
  EXPECT_EQ(Pick(*p, Req(probe), *f).instance, 0u);
  p->OnCompleted(on0, *f);
  EXPECT_EQ(Pick(*p, Req(probe), *f).instance, 0u);
}

// Dynamo's active blocks are an exact reference-counted set per worker: two requests sharing 8
// blocks hold 16 distinct blocks, not 24; when one completes the shared blocks stay active for
// the other. A probe of 12 unrelated blocks, with every prefill done, compares the two workers'
// active blocks alone.
TEST(DynamoKvTest, ActiveBlocksAreReferenceCounted) {
  auto f = Fleet(2);
  auto p = MakePolicy(Options(Strategy::kDynamoKv));
  StartStreams(*p, *f);
  uint64_t next_id = 1;
  auto dispatch = [&](const std::vector<uint32_t>& tokens, uint32_t instance) {
    const Req r(tokens);
    RouteRequest route = r.route;
    route.request_id = next_id++;
    const Decision d{instance, DecisionKind::kLeastOutstanding, 0, route.request_id};
    p->OnDispatched(route, d, *f);
    p->OnFirstToken(d, *f);
    return d;
  };
  const Req probe(Tokens(900000, 192));
  const std::vector<uint32_t> shared = Tokens(1000, 128);
  const Decision y1 = dispatch(Tokens(500000, 17 * 16), 1);  // 17 blocks on worker 1
  const Decision a = dispatch(Concat(shared, Tokens(2000, 64)), 0);
  const Decision b = dispatch(Concat(shared, Tokens(3000, 64)), 0);
  // Worker 0 holds 8 + 4 + 4 = 16 distinct blocks < 17 (24 if shared blocks counted twice).
  EXPECT_EQ(Pick(*p, probe, *f).instance, 0u);
  p->OnCompleted(y1, *f);
  dispatch(Tokens(600000, 10 * 16), 1);         // worker 1 now holds 10
  EXPECT_EQ(Pick(*p, probe, *f).instance, 1u);  // 16 > 10
  // a completes: b's 12 blocks stay active (8 shared + 4 own) > 10; had its shared blocks been
  // dropped, worker 0 would hold 4.
  p->OnCompleted(a, *f);
  EXPECT_EQ(Pick(*p, probe, *f).instance, 1u);
  p->OnCompleted(b, *f);
  EXPECT_EQ(Pick(*p, probe, *f).instance, 0u);  // 0 < 10
}

// Dynamo's tie-break (scheduler.rs): among workers at the minimum logit, the one whose indexed
// tree is smallest; at random only when the trees are as large.
TEST(DynamoKvTest, TiesGoToTheSmallestTree) {
  auto f = Fleet(3);
  auto p = MakePolicy(Options(Strategy::kDynamoKv));
  StartStreams(*p, *f);
  p->OnKvEvents(f->placement_seed(0), Stores(1, Tokens(70000, 5 * kBs), 100));
  p->OnKvEvents(f->placement_seed(2), Stores(1, Tokens(80000, 2 * kBs), 200));
  Rng rng(3);
  const Req r(Tokens(1, 64));  // cached nowhere: every logit is 4 + 4
  for (int n = 0; n < 200; ++n) EXPECT_EQ(p->Pick(r.route, *f, rng)->instance, 1u);
  p->OnKvEvents(f->placement_seed(1), Stores(1, Tokens(90000, 3 * kBs), 300));
  for (int n = 0; n < 200; ++n) EXPECT_EQ(p->Pick(r.route, *f, rng)->instance, 2u);
}

}  // namespace
}  // namespace prefix_router
