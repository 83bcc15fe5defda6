// The gateway relay's usage scanner (api/response_usage.h) on what it reads: an SSE stream of
// chat chunks ending with the include_usage chunk, and a whole chat completion body, fed in the
// relay's 16 KiB pieces. The figure to watch is bytes/s against the relay's own copy; the
// scanner allocates nothing, so its cost is one pass over the bytes.
// Run: build/release/src/usage_scanner_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>

#include "api/response_usage.h"

namespace prefix_router::bench {
namespace {

constexpr size_t kPiece = 16 * 1024;  // the relay's buffer (gateway.cc kRelayBufferBytes)

std::string Stream(int chunks) {
  std::string s;
  for (int i = 0; i < chunks; ++i) {
    s += "data: {\"id\":\"chatcmpl-42\",\"object\":\"chat.completion.chunk\",\"created\":1733212800,"
         "\"model\":\"llama\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token" +
         std::to_string(i) + "\"},\"finish_reason\":null}]}\n\n";
  }
  s += "data: {\"id\":\"chatcmpl-42\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":"
       "{\"prompt_tokens\":8123,\"completion_tokens\":512,\"total_tokens\":8635,"
       "\"prompt_tokens_details\":{\"cached_tokens\":8000}}}\n\ndata: [DONE]\n\n";
  return s;
}

std::string Body(size_t content_bytes) {
  return "{\"id\":\"chatcmpl-42\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
         "{\"role\":\"assistant\",\"content\":\"" +
         std::string(content_bytes, 'x') +
         "\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":8123,\"completion_tokens\":512,"
         "\"prompt_tokens_details\":{\"cached_tokens\":8000}}}";
}

void Scan(benchmark::State& state, const std::string& text, api::UsageScanner::Framing framing) {
  for (auto _ : state) {
    api::UsageScanner scanner(framing);
    for (size_t at = 0; at < text.size(); at += kPiece) {
      scanner.Feed(std::string_view(text).substr(at, std::min(kPiece, text.size() - at)));
    }
    benchmark::DoNotOptimize(scanner.usage());
    if (scanner.usage().cached_tokens != 8000) state.SkipWithError("usage not read");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

void BM_SseStream(benchmark::State& state) {
  Scan(state, Stream(static_cast<int>(state.range(0))), api::UsageScanner::Framing::kSse);
}
BENCHMARK(BM_SseStream)->Arg(16)->Arg(512);

void BM_WholeBody(benchmark::State& state) {
  Scan(state, Body(static_cast<size_t>(state.range(0))), api::UsageScanner::Framing::kJson);
}
BENCHMARK(BM_WholeBody)->Arg(1024)->Arg(64 * 1024);

}  // namespace
}  // namespace prefix_router::bench

BENCHMARK_MAIN();
