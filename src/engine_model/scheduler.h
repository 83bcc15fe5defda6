// StepScheduler: one inference engine's continuous-batching loop (vLLM v1-like), driven by a
// caller-supplied clock.
//
// Requests are submitted into a FCFS waiting queue. The caller repeatedly calls Step(now); each
// step schedules a batch, returns its modelled duration and what happened to each request at
// the step's end, and the caller advances its clock by that duration (the emulator sleeps, the
// simulator schedules an event) before the next Step. Times are seconds on the caller's clock.
//
// Before it can be scheduled a request is tokenized: the API server's single tokenizer takes
// requests one at a time, cost.TokenizeSeconds(prompt tokens) each, so a request is ready at
//   ready = max(arrival, previous request's ready) + tokenize time.
//
// Scheduling a step, as vLLM v1's scheduler does, with a budget of max_num_batched_tokens:
//   1. running requests, in admission order while budget remains: a decoding one gets 1 token
//      (its last sampled token enters the cache), a prefilling one its next chunk (its
//      uncomputed tokens, capped by the budget). The KV blocks for exactly those tokens are
//      taken now (per-chunk allocation, no reservation for the rest). If no block is free, the
//      most recently admitted running request is preempted (blocks freed, back to the front of
//      the waiting queue, recomputed later: vLLM's recompute preemption), repeatedly, until the
//      allocation succeeds or the request preempted itself;
//   2. admission, only in a step that preempted nothing: while fewer than max_num_seqs run and
//      budget remains, the head of the waiting queue, once tokenized, is admitted if the cache
//      can pin its cached prefix and hold its first chunk; otherwise admission stops
//      (head-of-line blocking, as vLLM's FCFS policy).
// Progress: the oldest running request is never preempted for a newer one and alone always
// fits (Submit refuses a request larger than the cache), so every step moves it forward; under
// KV pressure the newest requests give way until the oldest finish.
// The step's duration is the StepCostModel's over the batch times a seeded lognormal factor
// exp(step_jitter x z - step_jitter^2 / 2), z standard normal clipped to [-3, 3] (mean about 1:
// the model's times are expectations). With nothing schedulable because the head of the queue
// is still being tokenized, the step is idle: it schedules nothing and lasts until the head is
// ready. At the end of the step, every request whose scheduled tokens complete its context
// samples a token: the first one (time to first token = step end - arrival, tokenization
// included; queue wait = admission step start - arrival) or the next one; a request reaching
// max_tokens finishes and frees its blocks, which stay cached. A resumed preempted request
// recomputes prompt and generated tokens, then continues decoding.
//
// Generated token ids are GeneratedTokenId(output_seed, i) (tokenizer.h), so the text streamed
// for a request is AppendGeneratedPiece(output_seed, i) and a follow-up turn that resends it
// hits the blocks registered while decoding.
//
// Cost: Step is O(running requests + KV blocks touched); no allocation in steady state (the
// returned StepResult is reused). Submit is O(1) amortised.
//
// Thread-safety: a StepScheduler belongs to one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "engine_model/cost_model.h"
#include "engine_model/kv_cache.h"

namespace prefix_router::engine_model {

struct SchedulerConfig {
  uint32_t block_size = 16;
  uint32_t capacity_blocks = 0;            // KV cache size
  uint32_t max_num_seqs = 256;             // running sequences
  uint32_t max_num_batched_tokens = 8192;  // token budget per step
  uint32_t max_model_len = 131072;         // prompt + output tokens per request
  StepCostModel cost;
  uint64_t seed = 0;  // of the step-time jitter: same seed, same steps

  // InvalidArgument naming the field when a value is out of range (block_size 1..256,
  // capacity_blocks >= 1, 1 <= max_num_seqs <= max_num_batched_tokens, max_model_len >= 2,
  // positive mfu, mbu, peaks and model sizes, non-negative overheads and costs, step_jitter in
  // [0, 0.5]).
  Status Validate() const;
};

struct EngineRequest {
  uint64_t id = 0;               // unique among live requests
  std::vector<uint32_t> prompt;  // token ids (RenderChat / RenderCompletion)
  std::string adapter;           // LoRA adapter name, "" = base model
  uint32_t max_tokens = 1;       // output tokens to generate (>= 1)
  uint64_t output_seed = 0;      // selects the generated tokens
};

enum class EventKind : uint8_t {
  kFirstToken,  // first output token (index 0); cached_tokens, queue_wait and ttft known
  kToken,       // a later output token
  kFinished,    // max_tokens reached; follows the request's last token event
  kPreempted,   // blocks freed, back to waiting; will recompute
};

struct RequestEvent {
  EventKind kind = EventKind::kToken;
  uint64_t request_id = 0;
  uint32_t token_index = 0;  // kFirstToken/kToken: index of the token; else tokens so far
  uint32_t token_id = 0;     // kFirstToken/kToken: GeneratedTokenId(seed, token_index)
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens served from the cache at first admission
  // Set once known (from the first admission / first token on), 0 before:
  double queue_wait = 0;  // seconds from arrival to first admission
  double ttft = 0;        // seconds from arrival to first token, engine part only
};

struct StepResult {
  // Seconds; > 0 while HasWork() (the oldest running request always fits; an empty engine
  // admits anything tokenized, and waits for the tokenizer otherwise: an idle step, with no
  // sequence scheduled).
  double duration = 0;
  uint32_t num_prefill_tokens = 0;
  uint32_t num_decode_tokens = 0;
  uint32_t num_scheduled_seqs = 0;
  std::vector<RequestEvent> events;  // in running order; a request's events in time order
};

class StepScheduler {
 public:
  // REQUIRES: config.Validate().ok(). `listener` (KV events) may be null; it must outlive us.
  explicit StepScheduler(SchedulerConfig config, KvEventListener* listener = nullptr);
  ~StepScheduler();
  StepScheduler(const StepScheduler&) = delete;
  StepScheduler& operator=(const StepScheduler&) = delete;

  // Queues a request that arrived at `now` (which may be earlier than the next Step's `now`: a
  // request arriving during a step waits for the next one). InvalidArgument if its id is live,
  // the prompt is empty, max_tokens is 0, or prompt + max_tokens exceeds max_model_len or the
  // KV capacity (it could never run; vLLM rejects it too).
  Status Submit(EngineRequest request, double now);

  // Drops a live request wherever it is (client went away); its blocks are freed. False if the
  // id is not live. O(running + waiting).
  bool Abort(uint64_t request_id);

  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }

  // Runs one step starting at `now`. The result is valid until the next Step call.
  const StepResult& Step(double now);

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  double kv_usage() const { return kv_.usage(); }
  uint64_t num_preemptions() const { return preemptions_; }
  uint64_t num_steps() const { return steps_; }
  const KvCache& kv_cache() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Request;

  // Frees `r`'s blocks and puts it at the front of the waiting queue.
  void Preempt(Request* r);
  // Admits the head of the waiting queue with a first chunk of at most `budget` tokens if the
  // cache can hold it; returns the chunk (0 = not admitted).
  size_t TryAdmit(double now, size_t budget);
  // The multiplicative step-time factor (see above).
  double JitterFactor();

  SchedulerConfig config_;
  KvCache kv_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;  // live requests
  std::vector<Request*> running_;                                    // admission order: most recently admitted last
  std::deque<Request*> waiting_;                                     // FCFS; preempted requests re-enter at the front
  std::vector<uint32_t> scratch_tokens_;
  Rng jitter_rng_;
  double tokenizer_free_at_ = 0;  // when the API server's tokenizer is next idle
  StepResult result_;
  uint64_t preemptions_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace prefix_router::engine_model
