// Engine metrics: the load an inference engine reports about itself, read from its Prometheus
// /metrics text, so that routing can use the engine's own view of its queue (issue 7).
//
// Why: the gateway's in-flight count sees only the requests this gateway sent. With several
// gateway replicas in front of one fleet, each sees a fraction of the load; the engines see all
// of it. Scraping the engines gives every replica the same load view, so replicas given the same
// view decide alike (routing.load_measure: engine, core/policy.h).
//
// What is read (vLLM V1 names, docs/research/peers.md section 5; SGLang and the engine emulator
// export the same vLLM names when asked for compatibility):
//   vllm:num_requests_running    requests in the running batch           summed over series
//   vllm:num_requests_waiting    requests queued for admission          summed over series
//   vllm:kv_cache_usage_perc     fraction 0..1 of KV blocks in use       mean over series
//   vllm:gpu_cache_usage_perc    the same, its name up to vLLM 0.11     used when the above is absent
//   vllm:prefix_cache_queries_total  prompt tokens looked up in the      summed over series
//                                    prefix cache (counter)
//   vllm:prefix_cache_hits_total     of which found there (counter)      summed over series
// The prefix-cache counters are the engines' own hit rate, shown on the status page beside the
// one the gateway measures from the usage of the responses it relays (gateway/status.h).
// A series per engine (data-parallel ranks have an `engine` label, models a `model_name` label)
// is summed: the instance's load is all of its engines'. Other metrics, comments, HELP and TYPE
// lines are skipped; label values may hold any escaped text. Values are Prometheus floats
// (NaN and +Inf are read, then refused for counts).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

#include "core/status.h"

namespace prefix_router::gateway {

// A /metrics answer larger than this is a failed scrape.
inline constexpr size_t kMaxEngineMetricsBytes = 8u << 20;

struct EngineLoad {
  int32_t running = -1;  // -1 = not reported
  int32_t waiting = -1;
  double kv_usage = std::numeric_limits<double>::quiet_NaN();  // 0..1; NaN = not reported
  // Cumulative prefix-cache counters, in tokens; NaN = not reported.
  double prefix_cache_queries = std::numeric_limits<double>::quiet_NaN();
  double prefix_cache_hits = std::numeric_limits<double>::quiet_NaN();
};

// The load in `text` (the Prometheus text exposition format, version 0.0.4). NotFound when the
// text reports neither running nor waiting requests (not a vLLM-compatible engine);
// InvalidArgument naming the line when one of the read metrics has a malformed or impossible
// value (negative, not finite, beyond 2^31 requests, hits beyond queries).
Result<EngineLoad> ParseEngineMetrics(std::string_view text);

}  // namespace prefix_router::gateway
