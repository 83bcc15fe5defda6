// Key extraction with and without key normalisation (api/key_normalisation.h) on ~8 KB bodies.
// Run: build/release/src/key_normalisation_bench
//
// Modes: 0 raw bytes (the managed service's native key), 1 canonical JSON, 2 canonical JSON
// with three excluded fields, 3 canonical JSON with excluded fields and two patterns. The
// canonical modes parse the whole body (sorting members needs every key), whatever the prefix.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "api/key_normalisation.h"
#include "api/native_request.h"
#include "api/openai_request.h"

namespace prefix_router::bench {
namespace {

std::string Prose(size_t bytes) {
  static constexpr const char* kWords[] = {"the",   "model", "routes", "every", "request", "to",  "an",    "instance",
                                           "whose", "cache", "holds",  "its",   "prefix",  "and", "saves", "prefill"};
  std::string s;
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  while (s.size() < bytes) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s += kWords[x % 16];
    s += (x >> 8) % 12 == 0 ? ".\n" : " ";
  }
  s.resize(bytes);
  return s;
}

std::string Escaped(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

// A pretty-printed native body of about 8 KB, metadata first, as a noisy client sends it.
std::string NativeBody8k() {
  return "{\n  \"id\": \"req-5f2c9a01d3e4b7a6\",\n  \"created\": 1764460801,\n"
         "  \"metadata\": {\"trace_id\": \"0af7651916cd43dd8448eb211c80319c\", \"client\": \"c-3\"},\n"
         "  \"inputs\": \"" +
         Escaped(Prose(7800)) +
         "\",\n"
         "  \"parameters\": {\"temperature\": 0.7, \"max_new_tokens\": 128}\n}";
}

std::string ChatBody8k() {
  return R"({"model":"llama","max_tokens":128,"messages":[{"role":"system","content":"Current time: 2026-11-30T04:03:37Z. )" +
         Escaped(Prose(7700)) + R"("},{"role":"user","content":"Summarise section 3."}]})";
}

std::shared_ptr<const api::KeyNormaliser> Normaliser(int mode) {
  KeyNormalisation k;
  if (mode >= 1) k.canonical_json = true;
  if (mode >= 2) k.exclude_fields = {"id", "created", "metadata.trace_id"};
  if (mode >= 3) k.exclude_patterns = {R"(\d{4}-\d\d-\d\dT[0-9:.]+Z)", "req-[0-9a-f]{16}"};
  if (mode == 0) return nullptr;
  return *api::KeyNormaliser::Create(k);
}

// args: mode, prefix_length.
void BM_NativeKey(benchmark::State& state) {
  const auto norm = Normaliser(static_cast<int>(state.range(0)));
  const auto prefix_length = static_cast<uint32_t>(state.range(1));
  const std::string body = NativeBody8k();
  std::string keyed;
  for (auto _ : state) {
    auto r = api::ParseNative(body, prefix_length, std::nullopt, std::nullopt, norm.get());
    benchmark::DoNotOptimize(r);
  }
  api::ParseNative(body, prefix_length, std::nullopt, std::nullopt, norm.get(), &keyed);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
  state.counters["body_bytes"] = static_cast<double>(body.size());
  state.counters["keyed_bytes"] = static_cast<double>(keyed.size());
}
BENCHMARK(BM_NativeKey)->ArgsProduct({{0, 1, 2, 3}, {2048, 8192}});

// OpenAI chat key (whole text keyed at 8,192 characters), without (0) and with (3) patterns.
void BM_ChatKey(benchmark::State& state) {
  const auto norm = Normaliser(static_cast<int>(state.range(0)));
  const auto prefix_length = static_cast<uint32_t>(state.range(1));
  const std::string body = ChatBody8k();
  api::OpenAiRequestParser parser;
  for (auto _ : state) {
    auto r = parser.Parse(api::ApiKind::kChatCompletions, body, prefix_length, false, nullptr, norm.get());
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ChatKey)->ArgsProduct({{0, 3}, {2048, 8192}});

}  // namespace
}  // namespace prefix_router::bench

BENCHMARK_MAIN();
