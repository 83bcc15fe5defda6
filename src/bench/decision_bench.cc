// Whole routing decisions (parse, extract, hash, place), as the gateway makes them per request.
// Run: build/release/src/decision_bench  (scripts/bench-decision.sh prints the table in docs/benchmarks.md)
#include <benchmark/benchmark.h>

#include <string>

#include "bench/decision_cases.h"

namespace prefix_router::bench {
namespace {

// The 8,000-token chat request at prefix_length 32,768 (its whole text is keyed).
void BM_ChatDecision(benchmark::State& state) {
  DecisionSetup setup(static_cast<uint32_t>(state.range(0)), 32768);
  PaddedBody body(ChatRequest8kTokens());
  for (auto _ : state) benchmark::DoNotOptimize(ChatDecision(setup, body));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size));
  state.counters["body_bytes"] = static_cast<double>(body.size);
}
BENCHMARK(BM_ChatDecision)->Arg(7)->Arg(64)->Arg(1024)->Arg(10000);

// Native bodies of 1, 8 and 64 KiB at prefix_length 65,536 (every byte is keyed).
void BM_NativeDecision(benchmark::State& state) {
  DecisionSetup setup(static_cast<uint32_t>(state.range(1)), 65536);
  PaddedBody body(NativeBody(static_cast<size_t>(state.range(0))));
  for (auto _ : state) benchmark::DoNotOptimize(NativeDecision(setup, body));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size));
}
BENCHMARK(BM_NativeDecision)->ArgsProduct({{1024, 8192, 65536}, {7, 64, 1024}});

// Baseline in the same run: a content-blind random pick.
void BM_RandomDecision(benchmark::State& state) {
  DecisionSetup setup(static_cast<uint32_t>(state.range(0)), 2048);
  for (auto _ : state) benchmark::DoNotOptimize(RandomDecision(setup));
}
BENCHMARK(BM_RandomDecision)->Arg(7)->Arg(64)->Arg(1024)->Arg(10000);

// The chat request under each strategy of the registry (parsing, keying and block chain as the
// gateway makes them for it), registered in main: BM_Strategy/NAME[/full|/full-nb]/INSTANCES.
void BM_Strategy(benchmark::State& state, Strategy strategy, FleetLoad load, double balance_factor) {
  DecisionSetup setup(static_cast<uint32_t>(state.range(0)), 32768, strategy, load, balance_factor);
  PaddedBody body(ChatRequest8kTokens());
  for (auto _ : state) benchmark::DoNotOptimize(ChatDecisionFor(setup, body));
}

void RegisterStrategies() {
  for (const StrategyInfo& s : StrategyRegistry()) {
    const std::string name = "BM_Strategy/" + std::string(s.name);
    benchmark::RegisterBenchmark(name.c_str(), BM_Strategy, s.strategy, FleetLoad::kIdle, kDefaultBalanceFactor)
        ->Arg(1024)
        ->Arg(10000);
    if (s.strategy == Strategy::kPrefixAware || UsesBlockChain(s.strategy)) {
      benchmark::RegisterBenchmark((name + "/full").c_str(), BM_Strategy, s.strategy, FleetLoad::kFirstChoiceFull,
                                   kDefaultBalanceFactor)
          ->Arg(1024)
          ->Arg(10000);
    }
    if (s.strategy == Strategy::kPrefixAware) {
      benchmark::RegisterBenchmark((name + "/full-nb").c_str(), BM_Strategy, s.strategy, FleetLoad::kFirstChoiceFull, 0.0)
          ->Arg(1024)
          ->Arg(10000);
    }
  }
}

}  // namespace
}  // namespace prefix_router::bench

int main(int argc, char** argv) {
  prefix_router::bench::RegisterStrategies();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
