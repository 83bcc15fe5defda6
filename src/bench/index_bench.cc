// Cache-state routing: decision time with the index lookup, and the indexes' memory against their
// bounds (issue 7). Pure core: the request's block chain / prompt tokens are given, as the gateway
// passes them after parsing (parsing is in decision_bench).
// Run: build/release/src/index_bench
//   BM_PrefixAwarePick      baseline in the same run: rendezvous placement of a precomputed key
//   BM_CacheAwarePick       an 8,000-token document's 125-block chain against the sent-block index
//   BM_KvAwarePick          its 8,050 prompt tokens (hashed into 503 blocks in the pick) against
//                           the engines' reported blocks (630 such documents over 7 or 64 instances)
//   BM_KvIndexFill          events for far more blocks than the bound allows: counters show the
//                           estimated bytes and the heap the index really holds, against the bound
//   BM_BlockIndexFill       the same for cache-aware's sent-block index: dispatches of far more
//                           blocks than the bound allows, first to one instance after another (the
//                           bound moves entries between instances), then to all of them unevenly
//   BM_KvIndexIngest        one core applying a stream of decoded batches (BlockStored of new
//                           documents, BlockRemoved of old ones) to the index in steady state:
//                           block events (blocks stored plus blocks removed) per second; with
//                           msgpack decoding (vLLM's map encoding) included at range(1) = 1
//   BM_KvAwarePickWhileIngesting  kv-aware decisions while another thread streams events into
//                           the same policy as fast as it can (the index's lock is shared)
// Heap only: build/release/src/index_bench --benchmark_filter=Fill
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <optional>
#include <string>
#include <vector>

#include "api/kv_event_decoder.h"
#include "core/block_chain.h"
#include "core/block_index.h"
#include "core/fleet.h"
#include "core/kv_events.h"
#include "core/kv_index.h"
#include "core/policy.h"
#include "core/rng.h"

namespace prefix_router::bench {
namespace {

constexpr uint32_t kBlockSize = 16;
constexpr uint32_t kDocumentTokens = 8000;  // the published benchmark's shared prefix
// 630 documents over the fleet (90 per instance on 7): the kv-aware index holds them all within
// its default bound at any fleet size. On fleets of more than 630 instances the first 630 hold
// one each (the request's document is instance 3's).
uint32_t DocumentsPerInstance(uint32_t instances) { return std::max<uint32_t>(1, 630 / instances); }
uint32_t HoldingInstances(uint32_t instances) { return std::min<uint32_t>(instances, 630); }
// The document the measured request asks for: one instance 3 holds.
uint64_t RequestDocument(uint32_t instances) { return 3 * 1000 + std::min<uint32_t>(5, DocumentsPerInstance(instances) - 1); }

std::shared_ptr<const FleetSnapshot> Fleet(uint32_t n) {
  std::vector<InstanceSpec> specs;
  for (uint32_t i = 0; i < n; ++i) specs.push_back(InstanceSpec{"instance-" + std::to_string(i)});
  return std::move(FleetSnapshot::Create(std::move(specs))).value();
}

std::vector<uint32_t> DocumentTokens(uint64_t doc, uint32_t n = kDocumentTokens) {
  std::vector<uint32_t> t(n);
  for (uint32_t j = 0; j < n; ++j) t[j] = 1000 + static_cast<uint32_t>(Mix64(doc * 1'000'003 + j) % 127000);
  return t;
}

// One BlockStored of a whole document, with engine hashes unique to (instance, document).
KvBlockStored Stored(uint64_t instance, uint64_t doc) {
  KvBlockStored s;
  s.token_ids = DocumentTokens(doc);
  s.block_size = kBlockSize;
  s.medium = "GPU";
  for (uint32_t b = 0; b < kDocumentTokens / kBlockSize; ++b) {
    s.block_hashes.push_back(Mix64((instance << 40) ^ (doc << 12) ^ b));
  }
  return s;
}

// In use: the heap's chunks and the large ones malloc maps on their own.
size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// A fill's counters: the bound, the entries held, the index's estimate of its bytes and the
// heap it really took, against the bound.
void ReportFill(benchmark::State& state, uint64_t bound, size_t entries, size_t estimated, size_t heap) {
  state.counters["bound_bytes"] = static_cast<double>(bound);
  state.counters["entries"] = static_cast<double>(entries);
  state.counters["estimated_bytes"] = static_cast<double>(estimated);
  state.counters["heap_bytes"] = static_cast<double>(heap);
  state.counters["heap_over_bound"] = static_cast<double>(heap) / static_cast<double>(bound);
}

RoutingOptions Options(Strategy s) {
  RoutingOptions o;
  o.strategy = s;
  o.prefix_length = 32768;
  return o;
}

void BM_PrefixAwarePick(benchmark::State& state) {
  auto fleet = Fleet(static_cast<uint32_t>(state.range(0)));
  auto policy = MakePolicy(Options(Strategy::kPrefixAware));
  Rng rng(1);
  RouteRequest r;
  r.key = PrefixKey{Mix64(1), Mix64(2)};
  for (auto _ : state) benchmark::DoNotOptimize(policy->Pick(r, *fleet, rng));
}
BENCHMARK(BM_PrefixAwarePick)->Arg(7)->Arg(64)->Arg(1024)->Arg(10000);

void BM_CacheAwarePick(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  auto fleet = Fleet(n);
  auto policy = MakePolicy(Options(Strategy::kCacheAware));
  const uint64_t seed = BlockChainSeed("", "");
  // The fleet was sent 630 documents (about 32,000 characters each: 125 blocks of 256 bytes).
  std::vector<uint64_t> chain;
  for (uint32_t i = 0; i < HoldingInstances(n); ++i) {
    for (uint32_t d = 0; d < DocumentsPerInstance(n); ++d) {
      chain.clear();
      for (uint32_t b = 0; b < 125; ++b) chain.push_back(Mix64(Mix64(i * 1000 + d) + b));
      RouteRequest sent;
      sent.blocks = chain;
      policy->OnDispatched(sent, Decision{i}, *fleet);
    }
  }
  chain.clear();
  for (uint32_t b = 0; b < 125; ++b) chain.push_back(Mix64(Mix64(RequestDocument(n)) + b));  // held by instance 3
  RouteRequest r;
  r.blocks = chain;
  r.key = PrefixKey{seed, 0};
  r.work_tokens = kDocumentTokens;
  Rng rng(1);
  for (auto _ : state) benchmark::DoNotOptimize(policy->Pick(r, *fleet, rng));
}
BENCHMARK(BM_CacheAwarePick)->Arg(7)->Arg(64)->Arg(1024)->Arg(10000);

// kv-aware on a fleet whose first instances reported 630 documents; the request asks for one of
// instance 3's, with a 50-token question after it.
struct KvAwareCase {
  explicit KvAwareCase(uint32_t n);
  std::shared_ptr<const FleetSnapshot> fleet;
  std::unique_ptr<Policy> policy;
  std::vector<uint32_t> prompt;
  RouteRequest request;
};

KvAwareCase::KvAwareCase(uint32_t n) : fleet(Fleet(n)), policy(MakePolicy(Options(Strategy::kKvAware))) {
  for (uint32_t i = 0; i < HoldingInstances(n); ++i) {
    uint64_t seq = 0;
    for (uint32_t d = 0; d < DocumentsPerInstance(n); ++d) {
      KvEventBatch batch;
      batch.seq = seq++;
      batch.events.push_back(Stored(i, i * 1000 + d));
      policy->OnKvEvents(fleet->placement_seed(i), batch);
    }
  }
  prompt = DocumentTokens(RequestDocument(n));
  for (uint32_t j = 0; j < 50; ++j) prompt.push_back(2000 + j);  // the question
  request.prompt_tokens = prompt;
  request.key = PrefixKey{Mix64(7), Mix64(8)};
  request.work_tokens = static_cast<uint32_t>(prompt.size());
}

void BM_KvAwarePick(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  KvAwareCase c(n);
  Rng rng(1);
  auto first = c.policy->Pick(c.request, *c.fleet, rng);
  state.counters["picks_holder"] = first.ok() && first->instance == 3 ? 1 : 0;
  for (auto _ : state) benchmark::DoNotOptimize(c.policy->Pick(c.request, *c.fleet, rng));
  state.counters["prompt_tokens"] = static_cast<double>(c.prompt.size());
}
BENCHMARK(BM_KvAwarePick)->Arg(7)->Arg(64)->Arg(1024)->Arg(10000);

// A steady stream of one engine's KV events, pre-generated: documents of kStreamDocBlocks blocks
// stored in events of kStreamEventBlocks blocks (each chained to the one before by its parent
// hash, as vLLM reports a prefill in chunks), and each batch also removes the document stored
// kStreamResident batches before (the engine's LRU eviction), so the index stays at
// kStreamResident documents per instance (about 1M tokens: an engine's KV cache) once warm.
// The cycle repeats; sequence numbers are assigned as batches are applied.
constexpr uint32_t kStreamDocBlocks = 64;
constexpr uint32_t kStreamEventBlocks = 16;
constexpr uint32_t kStreamResident = 1024;
constexpr uint32_t kStreamCycle = kStreamResident + 512;

std::vector<KvEventBatch> EventStream(uint64_t instance) {
  auto engine_hash = [&](uint64_t doc, uint32_t b) { return Mix64((instance << 48) ^ (doc << 16) ^ b); };
  std::vector<KvEventBatch> batches(kStreamCycle);
  for (uint64_t doc = 0; doc < kStreamCycle; ++doc) {
    KvEventBatch& batch = batches[doc];
    const std::vector<uint32_t> tokens = DocumentTokens(instance * 1'000'000 + doc, kStreamDocBlocks * kBlockSize);
    for (uint32_t first = 0; first < kStreamDocBlocks; first += kStreamEventBlocks) {
      KvBlockStored s;
      s.block_size = kBlockSize;
      s.medium = "GPU";
      if (first > 0) s.parent_hash = engine_hash(doc, first - 1);
      for (uint32_t b = first; b < first + kStreamEventBlocks; ++b) s.block_hashes.push_back(engine_hash(doc, b));
      s.token_ids.assign(tokens.begin() + first * kBlockSize, tokens.begin() + (first + kStreamEventBlocks) * kBlockSize);
      batch.events.push_back(std::move(s));
    }
    KvBlockRemoved removed;
    removed.medium = "GPU";
    const uint64_t old = (doc + kStreamCycle - kStreamResident) % kStreamCycle;
    for (uint32_t b = 0; b < kStreamDocBlocks; ++b) removed.block_hashes.push_back(engine_hash(old, b));
    batch.events.push_back(std::move(removed));
  }
  return batches;
}

// Block events (stored plus removed) in one batch of EventStream.
constexpr double kBlockEventsPerBatch = 2 * kStreamDocBlocks;

// range(0) instances stream into one index bounded by kv-aware's default (256 MiB), in turns of
// one batch each; range(1) = 1 decodes each batch from vLLM's msgpack first (as the gateway's
// event listener does), 0 applies the decoded values; range(2) more instances have each
// reported one small document before (the index knows a large fleet; only some stream now).
void BM_KvIndexIngest(benchmark::State& state) {
  const auto instances = static_cast<uint32_t>(state.range(0));
  const bool decode = state.range(1) != 0;
  const auto known = static_cast<uint32_t>(state.range(2));
  const RoutingOptions o = Options(Strategy::kKvAware);
  KvIndex index(KvIndex::Options{o.cache_aware.capacity_blocks * (o.cache_aware.block_bytes / 4),
                                 o.cache_aware.max_index_bytes / 9 * 8});
  for (uint32_t k = 0; k < known; ++k) {
    KvEventBatch batch;
    KvBlockStored stored = Stored(100000 + k, k);
    stored.block_hashes.resize(4);
    stored.token_ids.resize(4 * kBlockSize);
    batch.events.push_back(std::move(stored));
    index.Apply(100000 + k, batch);
  }
  std::vector<std::vector<KvEventBatch>> streams;
  std::vector<std::vector<std::string>> encoded(instances);
  for (uint32_t i = 0; i < instances; ++i) {
    streams.push_back(EventStream(i));
    if (decode) {
      for (const KvEventBatch& b : streams.back()) encoded[i].push_back(api::EncodeKvEventBatch(b, api::KvEventEncoding::kMap));
    }
  }
  uint64_t seq = 0;
  size_t pos = 0;
  auto apply_round = [&](bool decode) {
    for (uint32_t i = 0; i < instances; ++i) {
      if (decode) {
        const std::string& bytes = encoded[i][pos];
        auto batch = api::DecodeKvEventBatch(seq, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
        if (!batch.ok()) state.SkipWithError("decode failed");
        index.Apply(i + 1, *batch);
      } else {
        KvEventBatch& batch = streams[i][pos];
        batch.seq = seq;
        index.Apply(i + 1, batch);
      }
    }
    ++seq;
    pos = (pos + 1) % kStreamCycle;
  };
  // Warm (from the decoded values: the same state): every instance holds kStreamResident
  // documents and has started evicting.
  for (uint32_t k = 0; k < kStreamCycle; ++k) apply_round(false);
  uint64_t rounds = 0;
  for (auto _ : state) {
    apply_round(decode);
    ++rounds;
  }
  state.counters["block_events_per_second"] =
      benchmark::Counter(static_cast<double>(rounds) * instances * kBlockEventsPerBatch, benchmark::Counter::kIsRate);
  state.counters["held_blocks"] = static_cast<double>(index.entries());
  state.counters["index_bytes"] = static_cast<double>(index.bytes());
}
BENCHMARK(BM_KvIndexIngest)->Args({8, 0, 0})->Args({8, 1, 0})->Args({8, 0, 10000})->Unit(benchmark::kMicrosecond);

// Decision time while events stream in: a second thread applies EventStream batches of
// range(1) instances to the policy as fast as it can while the timed loop picks.
void BM_KvAwarePickWhileIngesting(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  const uint32_t streaming = static_cast<uint32_t>(state.range(1));
  KvAwareCase c(n);
  std::vector<std::vector<KvEventBatch>> streams;
  for (uint32_t i = 0; i < streaming; ++i) streams.push_back(EventStream(1000 + i));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> applied{0};
  std::thread feeder([&] {
    // Instances from the end of the fleet (not the request's holder), their own sequences.
    uint64_t seq = 0;
    for (size_t pos = 0; !stop.load(std::memory_order_relaxed); pos = (pos + 1) % kStreamCycle, ++seq) {
      for (uint32_t i = 0; i < streaming; ++i) {
        KvEventBatch& batch = streams[i][pos];
        batch.seq = seq;
        c.policy->OnKvEvents(c.fleet->placement_seed(n - 1 - i), batch);
      }
      applied.fetch_add(streaming, std::memory_order_relaxed);
    }
  });
  Rng rng(1);
  const uint64_t applied_before = applied.load();
  for (auto _ : state) benchmark::DoNotOptimize(c.policy->Pick(c.request, *c.fleet, rng));
  const double batches = static_cast<double>(applied.load() - applied_before);
  stop = true;
  feeder.join();
  state.counters["block_events_per_second_meanwhile"] =
      benchmark::Counter(batches * kBlockEventsPerBatch, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_KvAwarePickWhileIngesting)->Args({1024, 8})->Args({10000, 8})->UseRealTime();

// 7 instances report 400 documents each (1.4M blocks) into an index bounded at range(0) MiB.
void BM_KvIndexFill(benchmark::State& state) {
  const uint64_t bound = static_cast<uint64_t>(state.range(0)) << 20;
  size_t entries = 0, estimated = 0, heap = 0;
  for (auto _ : state) {
    const size_t heap_before = HeapInUse();
    auto index = std::make_unique<KvIndex>(KvIndex::Options{1u << 20, bound});
    for (uint64_t i = 0; i < 7; ++i) {
      uint64_t seq = 0;
      for (uint64_t d = 0; d < 400; ++d) {
        KvEventBatch batch;
        batch.seq = seq++;
        batch.events.push_back(Stored(i, i * 100000 + d));
        index->Apply(i + 1, batch);
      }
    }
    entries = index->entries();
    estimated = index->bytes();
    heap = HeapInUse() - heap_before;
    benchmark::DoNotOptimize(index.get());
  }
  ReportFill(state, bound, entries, estimated, heap);
}
BENCHMARK(BM_KvIndexFill)->Arg(8)->Arg(32)->Iterations(1)->Unit(benchmark::kMillisecond);

// 7 instances are sent 125-block chains into an index bounded at range(0) MiB (no per-instance
// bound in reach): first 2,000 chains to each instance in turn (250,000 blocks each, 1.75M in all:
// each instance grows, then gives its entries up to the ones after it), then 2,000 chains over all
// of them, instance k receiving k+1 shares of 28 (the held blocks move again).
void BM_BlockIndexFill(benchmark::State& state) {
  const uint64_t bound = static_cast<uint64_t>(state.range(0)) << 20;
  size_t entries = 0, estimated = 0, heap = 0;
  std::vector<uint64_t> chain;
  chain.reserve(125);
  auto send = [&](BlockIndex& index, uint64_t instance, uint64_t doc) {
    chain.clear();
    for (uint64_t b = 0; b < 125; ++b) chain.push_back(Mix64(Mix64((instance << 32) ^ doc) + b));
    index.Insert(chain, instance + 1);
  };
  for (auto _ : state) {
    const size_t heap_before = HeapInUse();
    auto index = std::make_unique<BlockIndex>(BlockIndex::Options{1u << 24, bound});
    uint64_t doc = 0;
    for (uint64_t i = 0; i < 7; ++i) {
      for (uint32_t d = 0; d < 2000; ++d) send(*index, i, doc++);
    }
    for (uint32_t d = 0; d < 2000; ++d) {
      const uint32_t share = d % 28;  // instance k owns shares [k(k+1)/2, (k+1)(k+2)/2)
      uint64_t k = 0;
      while ((k + 1) * (k + 2) / 2 <= share) ++k;
      send(*index, k, doc++);
    }
    entries = index->entries();
    estimated = index->bytes();
    heap = HeapInUse() - heap_before;
    benchmark::DoNotOptimize(index.get());
  }
  ReportFill(state, bound, entries, estimated, heap);
}
BENCHMARK(BM_BlockIndexFill)->Arg(8)->Arg(32)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace prefix_router::bench

BENCHMARK_MAIN();
