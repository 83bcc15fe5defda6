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
// cached_tokens`, which vLLM sends only with --enable-prompt-tokens-details: without it the
// record's cached count is not known, RequestRecord::cached_tokens_known), the engine's
// modelled times from `x-engine-timing` (emulator), and the
// gateway's decision from `x-prefix-router-instance` / `x-prefix-router-decision` (instance
// index by name, overflow when the decision is "overflow" or "saturated"). A request fails
// (error = true, never dropped from the records) on a connection error, a timeout, a non-2xx
// status, an SSE error event or a stream without [DONE].
//
// `time_scale` converts measured times into model time when the engines run time-scaled
// (measured seconds / time_scale, record start times included); 1 for real engines. The run's
// limits are model time too: it sends for duration_s * time_scale wall seconds, at
// rate_rps / time_scale wall requests per second, and users think think_s * time_scale.
//
// APIs (LoadOptions::api): by default each request goes to the API the workload built it for
// (OpenAI chat for the generated workloads; trace rows and noisy-native as recorded); kNative
// sends every request to the native POST /invocations instead, with workload::RenderBody's
// native body (the same JSON as the chat body, less a trailing prompt_cache_key, so that the
// engines cache the same prompts) and the routing group in X-Amzn-SageMaker-Prefix-Aware-Id.
// Inference components (LoadOptions::inference_components): each session is assigned one of
// them, by seed and session index (ComponentFor), and its requests carry
// X-Amzn-SageMaker-Inference-Component on either API.
//
// Tenant classes (LoadOptions::tenants, docs/flow-control.md): each session is assigned one
// class, by share, from the seed and the session index (TenantFor); its requests carry
// x-prefix-router-priority (the class's priority), x-gateway-inference-fairness-id (its
// name) and, when it has one, x-slo-ttft-ms (its TTFT objective), and their records the class (RequestRecord::tenant; a 429 answer is also `refused`).
// An open loop over a generated workload then sends rate_rps x the sum of the shares, as
// `simulate` does.
//
// Mixed traffic (soak tests): `stream_fraction` sends that share of requests with stream:true
// and the rest without; `abort_fraction` makes the client abandon that share of requests by
// closing the connection at a random point (AbortPoint). Which requests stream and which are
// abandoned, where, is a pure function of the seed and the request's send index (PlanRequest),
// so a run's traffic mix is the same whatever the timing. An abandoned request is not an error:
// it is left out of `records` and counted in LoadRun::aborted.
//
// Connections: HTTP/1.1 keep-alive; in a closed loop each user keeps its own connection, in an
// open loop each I/O thread keeps a pool of idle ones (a session takes one per request, or
// opens one). A kept connection that the server closed while idle is retried once on a new
// connection when it fails before any response byte (as browsers and the gateway do).
//
// Bounded: every connect, write and read has the request's deadline (its start + timeout_s);
// think times and arrival waits end at once (within 100 ms) when sending stops; after sending
// stops, requests in flight get their own deadline plus a grace period and are then recorded
// as failed ("unfinished") if a bug kept them alive.
//
// Thread-safety: RunLoad blocks the calling thread and runs its own I/O threads. The workload
// and its sessions are only ever used under one lock, from one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "report/results.h"
#include "workload/tenants.h"
#include "workload/workload.h"

namespace prefix_router::loadgen {

enum class Mode { kClosed, kOpen };

// Where the client abandons a request (closes its connection without a word).
enum class AbortPoint {
  kNone,
  kSending,    // after the request head and a share (abort_at) of the body
  kWaiting,    // after the whole request, while waiting for the response head: after a wait of
               // abort_at x 100 ms model time, or right after the head if it comes first
  kReceiving,  // after the response head and floor(abort_at x 4) body reads: mid-stream
};

// What one request does: stream or not, and whether and where it is abandoned.
struct RequestPlan {
  bool stream = true;
  AbortPoint abort = AbortPoint::kNone;
  double abort_at = 0;  // in [0, 1): how far into its stage the request is abandoned
};

// Which API the requests are sent over (see the header comment).
enum class ApiChoice {
  kWorkload,  // each request's own (workload::Request::api)
  kNative,    // every request to POST /invocations
};

struct LoadOptions {
  std::string url = "http://127.0.0.1:8080";  // base URL, http only; path comes from the API
  // For requests without a model. Empty with inference_components: the request's component.
  std::string default_model = "default";
  ApiChoice api = ApiChoice::kWorkload;
  // Inference components (names as api::ValidateInferenceComponentName, no repeats): when not
  // empty, every request carries X-Amzn-SageMaker-Inference-Component with its session's
  // component (ComponentFor).
  std::vector<std::string> inference_components;
  // Tenant classes (see the header comment); empty = none, no flow-control headers sent.
  std::vector<workload::TenantClass> tenants;
  bool stream = true;
  // Share of requests sent with stream:true, in [0, 1], the rest non-streaming; < 0 (the
  // default) = every request follows `stream`.
  double stream_fraction = -1;
  // Share of requests the client abandons, in [0, 1] (each AbortPoint equally likely).
  double abort_fraction = 0;
  Mode mode = Mode::kClosed;
  uint32_t concurrency = 16;     // closed loop: users
  double rate_rps = 0;           // open loop: requests per second (model time)
  double trace_speed = 1;        // open loop over a trace: 2 = twice as fast
  uint64_t requests = 0;         // stop sending after this many (0 = no limit)
  double duration_s = 0;         // stop sending after this long, model time (0 = no limit)
  uint64_t warmup_requests = 0;  // the first N sent are recorded with counted = false
  double timeout_s = 300;        // per request, wall time
  double time_scale = 1;         // wall seconds per model second
  uint32_t threads = 1;          // I/O threads
  // Instance names in index order (records' `instance` indexes this list); names first seen in
  // x-prefix-router-instance headers and not listed are appended. Empty = learn them all.
  std::vector<std::string> instance_names;
  uint64_t seed = 1;  // open loop: the Poisson arrival times; the mixed-traffic plans
  // Called about once a second from the thread that called RunLoad (never concurrently with
  // itself): requests done (failed included), failed, in flight.
  std::function<void(uint64_t done, uint64_t failed, uint64_t in_flight)> progress;
};

struct LoadRun {
  std::vector<report::RequestRecord> records;  // in the order requests were sent
  std::vector<std::string> instance_names;     // final list (see LoadOptions)
  double wall_s = 0;                           // wall time of the whole run
  // Failed requests by kind: "connect" (no connection), "timeout" (deadline), "write" or
  // "read" (the connection broke), "status_<code>" (non-2xx), "sse_error" (an error event),
  // "error_body" (a 2xx body holding an error object),
  // "no_done" (a stream without [DONE]), "bad_response" (unparseable body), "unfinished".
  std::map<std::string, uint64_t> errors_by_kind;
  std::string first_error;  // the first failure's message, for a CLI to show
  // Requests the client abandoned on purpose (abort_fraction), not in `records`: counted ones,
  // in all and by where ("sending", "waiting", "receiving": where the connection was actually
  // closed), and those sent during the warm-up. A request planned to be abandoned whose
  // response ended first is an ordinary record.
  uint64_t aborted = 0;
  std::map<std::string, uint64_t> aborted_by_point;
  uint64_t aborted_warmup = 0;
  // Per inference component, in LoadOptions::inference_components' order (empty without): the
  // counted requests sent with it (errors included, abandoned requests not) and how many of
  // them failed.
  std::vector<uint64_t> component_requests, component_errors;
};

// The plan of the request sent `index`-th (from 0): a pure function of options.seed, stream,
// stream_fraction, abort_fraction and the index. Each request draws the same random numbers
// whatever the fractions, so changing one fraction leaves the other choices as they were.
RequestPlan PlanRequest(const LoadOptions& options, uint64_t index);

// The inference component (an index into options.inference_components; -1 when there are
// none) of the session taken `session`-th from the workload (from 0): a pure function of
// options.seed and the index, uniform over the components. Per session, not per request: the
// turns of a conversation stay with one model, as a client's would (single-turn workloads:
// one per request). Sessions are numbered in the order the workload hands them out, so the
// assignment does not depend on timing.
int32_t ComponentFor(const LoadOptions& options, uint64_t session);
// The tenant class (an index into options.tenants; -1 when there are none) of the `session`-th
// session, by share: a pure function of options.seed and the index, like ComponentFor and
// independent of it.
int32_t TenantFor(const LoadOptions& options, uint64_t session);

// InvalidArgument for bad options (bad URL, no stop condition, ...). Request failures are
// recorded, never returned as an error.
Result<LoadRun> RunLoad(const LoadOptions& options, workload::Workload& workload);

// The model names the endpoint lists at GET {url}/v1/models, in its order (for a default model).
// Unavailable when it cannot be reached or answers otherwise; InvalidArgument for a bad URL.
Result<std::vector<std::string>> ListModels(const std::string& url, double timeout_s);

}  // namespace prefix_router::loadgen
