// Runs one decision case N times, for two measurements scripts/bench-decision.sh makes:
//   valgrind --tool=callgrind --toggle-collect='*RunCase*' decision_probe CASE INSTANCES N
// counts its instructions (stable on a noisy machine, unlike time): divide the collected count by
// N + 1 (one warm-up call);
//   decision_probe --latency CASE INSTANCES N
// times each of N decisions on its own (Google Benchmark reports means; tails need the
// distribution) and prints one tab-separated line: p50 and p99 in nanoseconds, then the heap per
// instance of the fleet snapshot, of the policy with the state the case fed it, and what the
// decisions themselves added (per-thread scratch buffers, parser buffers, learnt state), as
// this binary's counting operator new and delete measure them.
// CASE: chat | native-1k | native-8k | native-64k | random (prefix-aware, as before), or
// chat:STRATEGY[:full|:full-nb] for any name of the strategy registry: the chat request parsed
// and routed by that strategy; `full`: its first choice is at the concurrency threshold (the
// spill path); `full-nb`: the same with balance factor 0 (prefix-aware: no moved homes, so every
// decision walks the preference order).
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "bench/decision_cases.h"

namespace {

std::atomic<int64_t> live_bytes{0};

void* Allocate(size_t n, size_t align) {
  void* p = align <= alignof(std::max_align_t) ? std::malloc(n ? n : 1) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  live_bytes.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}

void Free(void* p) {
  if (!p) return;
  live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}

size_t LiveBytes() { return static_cast<size_t>(live_bytes.load(std::memory_order_relaxed)); }

}  // namespace

// The counting allocator (libstdc++'s nothrow and array forms call these).
void* operator new(size_t n) { return Allocate(n, 0); }
void* operator new(size_t n, std::align_val_t a) { return Allocate(n, static_cast<size_t>(a)); }
void operator delete(void* p) noexcept { Free(p); }
void operator delete(void* p, size_t) noexcept { Free(p); }
void operator delete(void* p, std::align_val_t) noexcept { Free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { Free(p); }

namespace prefix_router::bench {

struct Case {
  std::string name;  // as given
  enum Kind { kChat, kNative, kRandom, kChatFor } kind = kChat;
  Strategy strategy = Strategy::kPrefixAware;
  FleetLoad load = FleetLoad::kIdle;
  double balance_factor = kDefaultBalanceFactor;
  std::string text;
  uint32_t prefix_length = 65536;
};

std::optional<Case> ParseCase(const std::string& name) {
  Case c;
  c.name = name;
  if (name == "chat") {
    c.text = ChatRequest8kTokens();
    c.prefix_length = 32768;
  } else if (name == "native-1k") {
    c.kind = Case::kNative;
    c.text = NativeBody(1024);
  } else if (name == "native-8k") {
    c.kind = Case::kNative;
    c.text = NativeBody(8192);
  } else if (name == "native-64k") {
    c.kind = Case::kNative;
    c.text = NativeBody(65536);
  } else if (name == "random") {
    c.kind = Case::kRandom;
  } else if (name.starts_with("chat:")) {
    c.kind = Case::kChatFor;
    c.text = ChatRequest8kTokens();
    c.prefix_length = 32768;
    std::string rest = name.substr(5);
    std::string suffix;
    if (auto colon = rest.find(':'); colon != std::string::npos) {
      suffix = rest.substr(colon + 1);
      rest.resize(colon);
    }
    auto s = ParseStrategy(rest);
    if (!s.ok()) return std::nullopt;
    c.strategy = *s;
    if (suffix == "full") {
      c.load = FleetLoad::kFirstChoiceFull;
    } else if (suffix == "full-nb") {
      c.load = FleetLoad::kFirstChoiceFull;
      c.balance_factor = 0;
    } else if (!suffix.empty()) {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  return c;
}

// Kept out of line so callgrind can collect exactly this function and its callees.
[[gnu::noinline]] uint64_t RunCase(const Case& c, DecisionSetup& setup, const PaddedBody& body, long iterations) {
  uint64_t sum = 0;
  for (long i = 0; i < iterations; ++i) {
    switch (c.kind) {
      case Case::kChat: sum += ChatDecision(setup, body); break;
      case Case::kNative: sum += NativeDecision(setup, body); break;
      case Case::kRandom: sum += RandomDecision(setup); break;
      case Case::kChatFor: sum += ChatDecisionFor(setup, body); break;
    }
  }
  return sum;
}

}  // namespace prefix_router::bench

int main(int argc, char** argv) {
  using namespace prefix_router::bench;
  const bool latency = argc == 5 && std::string(argv[1]) == "--latency";
  if (argc != 4 && !latency) {
    std::fprintf(stderr,
                 "usage: decision_probe [--latency] chat|native-1k|native-8k|native-64k|random|"
                 "chat:STRATEGY[:full|:full-nb] INSTANCES N\n");
    return 2;
  }
  char** args = argv + (latency ? 2 : 1);
  const auto c = ParseCase(args[0]);
  if (!c) {
    std::fprintf(stderr, "decision_probe: unknown case '%s'\n", args[0]);
    return 2;
  }
  const auto instances = static_cast<uint32_t>(std::atoi(args[1]));
  const long iterations = std::atol(args[2]);
  SetHeapMeter(&LiveBytes);
  PaddedBody body(c->text);
  DecisionSetup setup(instances, c->prefix_length, c->strategy, c->load, c->balance_factor);
  const size_t before_decisions = LiveBytes();
  // One warm-up call outside the counted function grows buffers, as a long-lived gateway has.
  uint64_t sum = RunCase(*c, setup, body, 1);
  if (!latency) {
    sum += RunCase(*c, setup, body, iterations);
    std::printf("%s instances=%u iterations=%ld checksum=%llu\n", c->name.c_str(), instances, iterations,
                static_cast<unsigned long long>(sum));
    return 0;
  }
  std::vector<int64_t> ns(static_cast<size_t>(iterations));
  for (auto& t : ns) {
    const auto start = std::chrono::steady_clock::now();
    sum += RunCase(*c, setup, body, 1);
    t = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }
  const double scratch = static_cast<double>(LiveBytes()) - static_cast<double>(before_decisions);
  std::sort(ns.begin(), ns.end());
  const auto at = [&](double q) { return ns[std::min(ns.size() - 1, static_cast<size_t>(q * static_cast<double>(ns.size())))]; };
  const double n = instances;
  std::printf("%lld\t%lld\t%.1f\t%.1f\t%.1f\t%llu\n", static_cast<long long>(at(0.5)), static_cast<long long>(at(0.99)),
              static_cast<double>(setup.fleet_bytes) / n, static_cast<double>(setup.policy_bytes) / n, scratch / n,
              static_cast<unsigned long long>(sum));
  return 0;
}
