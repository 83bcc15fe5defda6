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
// Heap only: build/release/src/index_bench --benchmark_filter=Fill
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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
// its default bound at either fleet size.
uint32_t DocumentsPerInstance(uint32_t instances) { return 630 / instances; }

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
BENCHMARK(BM_PrefixAwarePick)->Arg(7)->Arg(64);

void BM_CacheAwarePick(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  auto fleet = Fleet(n);
  auto policy = MakePolicy(Options(Strategy::kCacheAware));
  const uint64_t seed = BlockChainSeed("", "");
  // The fleet was sent 630 documents (about 32,000 characters each: 125 blocks of 256 bytes).
  std::vector<uint64_t> chain;
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t d = 0; d < DocumentsPerInstance(n); ++d) {
      chain.clear();
      for (uint32_t b = 0; b < 125; ++b) chain.push_back(Mix64(Mix64(i * 1000 + d) + b));
      RouteRequest sent;
      sent.blocks = chain;
      policy->OnDispatched(sent, Decision{i}, *fleet);
    }
  }
  chain.clear();
  for (uint32_t b = 0; b < 125; ++b) chain.push_back(Mix64(Mix64(3 * 1000 + 5) + b));  // held by instance 3
  RouteRequest r;
  r.blocks = chain;
  r.key = PrefixKey{seed, 0};
  r.work_tokens = kDocumentTokens;
  Rng rng(1);
  for (auto _ : state) benchmark::DoNotOptimize(policy->Pick(r, *fleet, rng));
}
BENCHMARK(BM_CacheAwarePick)->Arg(7)->Arg(64);

void BM_KvAwarePick(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  auto fleet = Fleet(n);
  auto policy = MakePolicy(Options(Strategy::kKvAware));
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t seq = 0;
    for (uint32_t d = 0; d < DocumentsPerInstance(n); ++d) {
      KvEventBatch batch;
      batch.seq = seq++;
      batch.events.push_back(Stored(i, i * 1000 + d));
      policy->OnKvEvents(fleet->placement_seed(i), batch);
    }
  }
  std::vector<uint32_t> prompt = DocumentTokens(3 * 1000 + 5);   // held by instance 3
  for (uint32_t j = 0; j < 50; ++j) prompt.push_back(2000 + j);  // the question
  RouteRequest r;
  r.prompt_tokens = prompt;
  r.key = PrefixKey{Mix64(7), Mix64(8)};
  r.work_tokens = static_cast<uint32_t>(prompt.size());
  Rng rng(1);
  auto first = policy->Pick(r, *fleet, rng);
  state.counters["picks_holder"] = first.ok() && first->instance == 3 ? 1 : 0;
  for (auto _ : state) benchmark::DoNotOptimize(policy->Pick(r, *fleet, rng));
  state.counters["prompt_tokens"] = static_cast<double>(prompt.size());
}
BENCHMARK(BM_KvAwarePick)->Arg(7)->Arg(64);

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
