// The HTTP load generator behind `prefix-router bench` and `demo`: sends a workload's requests
// to an OpenAI-compatible or native endpoint (the gateway, an engine emulator, a real vLLM) and
// records, per request, what a client sees.
//
// Drive: closed loop (`concurrency` users running sessions back to back, as LLM benchmark tools
// do) or open loop (sessions start at Poisson times of rate `rate_rps` / workload mean turns, or
// at a trace's recorded times scaled by `trace_speed`). The run stops sending when `requests`
// have been sent or `duration_s` has passed (whichever comes first; at least one is set), then
// waits for the requests in flight (each bounded by `timeout_s`).
//
// Measured per request (report::RequestRecord): TTFT at the first chunk carrying content (the
// first SSE event with non-empty `delta.content` / `text`; for non-streaming requests the
// whole response), mean inter-token latency between content chunks, end to end to the last
// byte, prompt/cached/output tokens from `usage` (with `usage.prompt_tokens_details.
// cached_tokens`), the engine's modelled times from `x-engine-timing` (emulator), and the
// gateway's decision from `x-prefix-router-instance` / `x-prefix-router-decision` (instance
// index by name, overflow when the decision is "overflow" or "saturated"). A request fails
// (error = true, never dropped from the records) on a connection error, a timeout, a non-2xx
// status, an SSE error event or a stream without [DONE].
//
// `time_scale` converts measured times into model time when the engines run time-scaled
// (measured seconds / time_scale); 1 for real engines.
//
// Thread-safety: RunLoad blocks the calling thread and runs its own I/O threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "report/results.h"
#include "workload/workload.h"

namespace prefix_router::loadgen {

enum class Mode { kClosed, kOpen };

struct LoadOptions {
  std::string url = "http://127.0.0.1:8080";  // base URL, http only; path comes from the API
  std::string default_model = "default";      // for requests without a model
  bool stream = true;
  Mode mode = Mode::kClosed;
  uint32_t concurrency = 16;  // closed loop: users
  double rate_rps = 0;        // open loop: requests per second (model time)
  double trace_speed = 1;     // open loop over a trace: 2 = twice as fast
  uint64_t requests = 0;      // stop sending after this many (0 = no limit)
  double duration_s = 0;      // stop sending after this long, model time (0 = no limit)
  uint64_t warmup_requests = 0;  // the first N sent are recorded with counted = false
  double timeout_s = 300;     // per request, wall time
  double time_scale = 1;      // wall seconds per model second
  uint32_t threads = 1;       // I/O threads
  // Instance names in index order (records' `instance` indexes this list); names first seen in
  // x-prefix-router-instance headers and not listed are appended. Empty = learn them all.
  std::vector<std::string> instance_names;
  // Called about once a second from an I/O thread: requests done, failed, in flight.
  std::function<void(uint64_t done, uint64_t failed, uint64_t in_flight)> progress;
};

struct LoadRun {
  std::vector<report::RequestRecord> records;  // in the order requests were sent
  std::vector<std::string> instance_names;     // final list (see LoadOptions)
  double wall_s = 0;                           // wall time of the whole run
};

// InvalidArgument for bad options (bad URL, no stop condition, ...). Request failures are
// recorded, never returned as an error.
Result<LoadRun> RunLoad(const LoadOptions& options, workload::Workload& workload);

}  // namespace prefix_router::loadgen
