// EngineServer: `prefix-router engine`, an OpenAI-compatible server over the engine model.
//
// It stands in for a vLLM instance where routing is concerned: requests are tokenized through
// the chat template, admitted to a continuous-batching StepScheduler whose KV cache does
// vLLM-style automatic prefix caching, and answered token by token as the modelled steps
// complete, in real time scaled by --time-scale (wall seconds per modelled second).
//
// Modelled time runs on a virtual clock: while the engine is busy it advances by exactly the
// modelled step durations (sleeping the scaled duration in between), and it catches up with the
// wall clock when the engine goes idle. The times reported per response, in the header
//   x-engine-timing: queue=<s>; ttft=<s>; cached=<tokens>; prompt=<tokens>
// (modelled seconds, TTFT including the profile's per-request overhead), are therefore free of
// loopback and scheduling jitter, so time-scaled runs can be read in model time.
//
// Cached-token counts are reported as vLLM reports them: only with
// enable_prompt_tokens_details (vLLM's --enable-prompt-tokens-details, off by default), in
// usage.prompt_tokens_details when above 0 (engine_request.h Usage). Without it the header has
// no `cached=` either, so a client sees what it would see from a default vLLM; /metrics
// (vllm:prefix_cache_hits_total) counts hits either way, as vLLM's does.
//
// Routes: POST /v1/chat/completions, /v1/completions, /invocations; POST /tokenize (vLLM's:
// the prompt's token ids, as a router routing on tokens asks for them); GET /v1/models,
// /health, /ping, /metrics.
//
// Inference components (the managed service's endpoints that host several models): each name
// in EngineOptions::inference_components is served like a model (listed in /v1/models, selected
// by `model`, its KV blocks its own as an adapter's). A request with the
// X-Amzn-SageMaker-Inference-Component header, on any of the POST routes, is served as that
// component whatever its `model` says (the header picks the component on the service); a
// component this engine lacks is 404 in vLLM's error shape. Without the header nothing changes.
//
// Everything runs on one I/O thread: the HTTP handlers and the engine loop share it, so the
// scheduler needs no lock. That thread is the engine's whole CPU budget, as in vLLM's
// single-process front end.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_event_publisher.h"
#include "engine_model/profiles.h"
#include "engine_model/scheduler.h"
#include "http/server.h"
#include "metrics/metrics.h"

namespace prefix_router::engine {

namespace net = http::net;

struct EngineOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8001;
  std::string profile = "llama-70b-h100x8";
  double time_scale = 1.0;            // wall seconds per modelled second, > 0
  std::string model = "llama";        // the served base model name
  std::vector<std::string> adapters;  // LoRA adapters served beside it
  // Inference components served beside it (names as api::ValidateInferenceComponentName).
  std::vector<std::string> inference_components;
  // Overrides of the profile (0 = keep the profile's value).
  uint32_t capacity_blocks = 0;
  uint32_t block_size = 0;
  uint32_t max_num_seqs = 0;
  uint32_t max_num_batched_tokens = 0;
  uint64_t max_body_bytes = 32ull << 20;
  // Generated tokens per streamed chunk after the first (which is sent alone, at once): 1
  // streams every token; more cuts the events a fast, time-scaled run must carry.
  uint32_t stream_interval = 1;
  // Report cached prompt tokens per response (usage.prompt_tokens_details.cached_tokens and
  // `cached=` in x-engine-timing), as vLLM does with --enable-prompt-tokens-details. Off by
  // default, as in vLLM.
  bool enable_prompt_tokens_details = false;
  // KV cache events on ZMQ as vLLM publishes them (engine/kv_event_publisher.h); off when the
  // endpoint is empty. One batch per engine step.
  KvEventsOptions kv_events;
};

class EngineServer final : public http::Handler {
 public:
  static Result<std::unique_ptr<EngineServer>> Create(EngineOptions options);
  ~EngineServer() override;

  Status Start();
  uint16_t port() const { return server_->port(); }
  void Stop();
  void Wait() { server_->Wait(); }

  net::awaitable<void> Handle(http::Exchange& exchange) override;

  const engine_model::SchedulerConfig& scheduler_config() const { return profile_.config; }
  // nullptr unless options.kv_events.endpoint was set.
  const KvEventPublisher* kv_publisher() const { return kv_publisher_.get(); }

 private:
  struct Pending;
  EngineServer(EngineOptions options, engine_model::Profile profile, std::unique_ptr<KvEventPublisher> kv_publisher);

  net::awaitable<void> Loop();
  net::awaitable<void> HandleGenerate(http::Exchange& ex, std::string_view path);
  net::awaitable<void> HandleModels(http::Exchange& ex);
  // POST /tokenize (engine_request.h TokenizeRequest): no scheduling, answered at once.
  net::awaitable<void> HandleTokenize(http::Exchange& ex);
  // The name `req` is served as: its inference component header when present and not empty,
  // else `model` ("" = the base model). NotFound, with the message a 404 carries, when this
  // engine does not serve it.
  Result<std::string> ServedName(const http::Request& req, std::string_view model) const;
  void Wake();
  double WallModelNow() const;

  EngineOptions options_;
  engine_model::Profile profile_;
  std::unique_ptr<KvEventPublisher> kv_publisher_;  // before scheduler_: its listener
  engine_model::StepScheduler scheduler_;
  std::unique_ptr<http::Server> server_;
  std::unique_ptr<net::steady_timer> wake_;
  std::unordered_map<uint64_t, std::shared_ptr<Pending>> pending_;
  uint64_t next_id_ = 1;
  double virtual_now_ = 0;  // modelled seconds
  bool stopping_ = false;
  std::chrono::steady_clock::time_point started_;

  metrics::Registry registry_;
  metrics::Family<metrics::Gauge>& running_;
  metrics::Family<metrics::Gauge>& waiting_;
  metrics::Family<metrics::Gauge>& kv_usage_;
  metrics::Family<metrics::Counter>& cache_queries_;
  metrics::Family<metrics::Counter>& cache_hits_;
  metrics::Family<metrics::Counter>& prompt_tokens_;
  metrics::Family<metrics::Counter>& generation_tokens_;
  metrics::Family<metrics::Counter>& preemptions_;
  metrics::Family<metrics::Counter>& successes_;
  metrics::Family<metrics::Histogram>& ttft_;
  metrics::Family<metrics::Histogram>& queue_time_;
  // Children of the families above for the served model, looked up on first use (so that a
  // series appears when it first has a value, as before) and kept: the per-request path then
  // takes no family lock. Touched only on the I/O thread.
  metrics::Histogram* ttft_child_ = nullptr;
  metrics::Histogram* queue_time_child_ = nullptr;
  metrics::Counter* prompt_tokens_child_ = nullptr;
  metrics::Counter* generation_tokens_child_ = nullptr;
  metrics::Counter* successes_length_child_ = nullptr;
};

}  // namespace prefix_router::engine
