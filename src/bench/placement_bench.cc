// Placement speed and quality: time per first choice and per full preference order, with the
// quality figures beside them (Envoy style): the largest deviation of any instance's share from
// its ideal over 100,000 keys, and the fraction of keys moved when one instance joins, relative
// to the theoretical minimum 1/(N+1).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "bench/decision_cases.h"
#include "core/placement.h"
#include "core/rendezvous_scan.h"

namespace prefix_router::bench {
namespace {

constexpr int kKeys = 100'000;

uint64_t KeyHash(int i) {
  uint64_t z = 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void BM_MostPreferred(benchmark::State& state) {
  const auto n = static_cast<uint32_t>(state.range(0));
  auto fleet = MakeFleet(n);
  std::vector<uint32_t> all(n);
  std::iota(all.begin(), all.end(), 0u);

  // Quality, outside the timed loop: balance over 100k keys.
  std::vector<int> count(n, 0);
  for (int k = 0; k < kKeys; ++k) ++count[MostPreferred(KeyHash(k), *fleet, all)];
  double worst = 0;
  for (int c : count) worst = std::max(worst, std::abs(c / double(kKeys) - 1.0 / n));
  state.counters["share_max_dev_pct"] = 100 * worst;

  // Stability: add one instance; moved fraction relative to the minimum 1/(N+1).
  auto bigger = MakeFleet(n + 1);
  std::vector<uint32_t> all_bigger(n + 1);
  std::iota(all_bigger.begin(), all_bigger.end(), 0u);
  int moved = 0;
  for (int k = 0; k < kKeys; ++k) {
    moved += MostPreferred(KeyHash(k), *fleet, all) != MostPreferred(KeyHash(k), *bigger, all_bigger);
  }
  state.counters["moved_vs_minimum"] = (moved / double(kKeys)) * (n + 1);

  int k = 0;
  for (auto _ : state) benchmark::DoNotOptimize(MostPreferred(KeyHash(k++), *fleet, all));
}
BENCHMARK(BM_MostPreferred)->Arg(7)->Arg(64)->Arg(1024);

void BM_SortByPreference(benchmark::State& state) {
  const auto n = static_cast<uint32_t>(state.range(0));
  auto fleet = MakeFleet(n);
  std::vector<uint32_t> order(n);
  int k = 0;
  for (auto _ : state) {
    std::iota(order.begin(), order.end(), 0u);
    SortByPreference(KeyHash(k++), *fleet, order);
    benchmark::DoNotOptimize(order.data());
  }
}
BENCHMARK(BM_SortByPreference)->Arg(7)->Arg(64)->Arg(1024)->Arg(10000);

// The first choice over every candidate by each rendezvous kernel this CPU runs (scalar, and
// AVX-512 where the CPU has it: core/rendezvous_scan.h), the scalar one the baseline; the label
// names the kernel.
void BM_RendezvousBest(benchmark::State& state) {
  const auto kernels = rendezvous_scan::Available();
  const auto which = static_cast<size_t>(state.range(0));
  if (which >= kernels.size()) {
    state.SkipWithError("kernel not available on this CPU");
    return;
  }
  const auto n = static_cast<uint32_t>(state.range(1));
  // Every instance of the fleet, or every other one of a fleet twice the size (a pool that
  // shares the fleet with another: the candidates' seeds are not contiguous).
  const bool every_other = state.range(2) != 0;
  auto fleet = MakeFleet(every_other ? 2 * n : n);
  std::vector<uint32_t> all(n);
  for (uint32_t i = 0; i < n; ++i) all[i] = every_other ? 2 * i : i;
  state.SetLabel(std::string(kernels[which].name) + (every_other ? ", every other instance" : ""));
  int k = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(kernels[which].best(KeyHash(k++), fleet->placement_seeds(), all.data(), n));
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
}
BENCHMARK(BM_RendezvousBest)->ArgsProduct({{0, 1}, {64, 1024, 10000}, {0, 1}});

}  // namespace
}  // namespace prefix_router::bench

BENCHMARK_MAIN();
