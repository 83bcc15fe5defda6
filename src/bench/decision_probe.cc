// Runs one decision case N times so that `valgrind --tool=callgrind` can count its
// instructions (stable on a noisy machine, unlike time). scripts/bench-decision.sh runs it as:
//   valgrind --tool=callgrind --toggle-collect='*RunCase*' decision_probe CASE INSTANCES N
// and divides the collected instruction count by N.
// CASE: chat | native-1k | native-8k | native-64k | random
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/decision_cases.h"

namespace prefix_router::bench {

// Kept out of line so callgrind can collect exactly this function and its callees.
[[gnu::noinline]] uint64_t RunCase(const std::string& name, DecisionSetup& setup, const PaddedBody& body,
                                   long iterations) {
  uint64_t sum = 0;
  for (long i = 0; i < iterations; ++i) {
    if (name == "chat") {
      sum += ChatDecision(setup, body);
    } else if (name == "random") {
      sum += RandomDecision(setup);
    } else {
      sum += NativeDecision(setup, body);
    }
  }
  return sum;
}

}  // namespace prefix_router::bench

int main(int argc, char** argv) {
  using namespace prefix_router::bench;
  if (argc != 4) {
    std::fprintf(stderr, "usage: decision_probe chat|native-1k|native-8k|native-64k|random INSTANCES N\n");
    return 2;
  }
  const std::string name = argv[1];
  const auto instances = static_cast<uint32_t>(std::atoi(argv[2]));
  const long iterations = std::atol(argv[3]);
  std::string text;
  uint32_t prefix_length = 65536;
  if (name == "chat") {
    text = ChatRequest8kTokens();
    prefix_length = 32768;
  } else if (name == "native-1k") {
    text = NativeBody(1024);
  } else if (name == "native-8k") {
    text = NativeBody(8192);
  } else if (name == "native-64k") {
    text = NativeBody(65536);
  } else if (name != "random") {
    std::fprintf(stderr, "decision_probe: unknown case '%s'\n", name.c_str());
    return 2;
  }
  DecisionSetup setup(instances, prefix_length);
  PaddedBody body(text);
  // One warm-up call outside the counted function grows buffers, as a long-lived gateway has.
  uint64_t sum = RunCase(name, setup, body, 1);
  sum += RunCase(name, setup, body, iterations);
  std::printf("%s instances=%u iterations=%ld checksum=%llu\n", name.c_str(), instances, iterations,
              static_cast<unsigned long long>(sum));
  return 0;
}
