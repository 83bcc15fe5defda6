#include "engine_model/scheduler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <span>
#include <string>

#include "engine_model/tokenizer.h"

namespace prefix_router::engine_model {

struct StepScheduler::Request {
  EngineRequest spec;
  double arrival = 0;
  double ready = 0;  // tokenized: schedulable from then on
  bool admitted_once = false;
  bool decoding = false;  // scheduled this step for one decode token
  bool finished = false;
  uint32_t cached_tokens = 0;
  uint32_t generated = 0;      // output tokens sampled so far
  uint32_t last_token_id = 0;  // the latest sampled token, entering the cache next step
  double queue_wait = 0;
  double ttft = 0;
  size_t kv_tokens = 0;  // tokens of its KV sequence: prompt (+ generated) (0 while waiting)
  size_t computed = 0;   // of which computed
  size_t scheduled = 0;  // tokens processed in the current step
};

namespace {

Status Positive(double v, const char* field) {
  if (v > 0) return Status::Ok();
  return Status::InvalidArgument(std::string(field) + " must be > 0, got " + std::to_string(v));
}

}  // namespace

Status SchedulerConfig::Validate() const {
  if (Status s = KvCacheConfig{block_size, capacity_blocks}.Validate(); !s.ok()) return s;
  if (max_num_seqs < 1 || max_num_seqs > max_num_batched_tokens) {
    return Status::InvalidArgument("max_num_seqs must be in [1, max_num_batched_tokens = " +
                                   std::to_string(max_num_batched_tokens) + "], got " + std::to_string(max_num_seqs));
  }
  if (max_model_len < 2) {
    return Status::InvalidArgument("max_model_len must be >= 2, got " + std::to_string(max_model_len));
  }
  const std::pair<double, const char*> positives[] = {
      {cost.model.n_params, "cost.model.n_params"},
      {static_cast<double>(cost.model.n_layers), "cost.model.n_layers"},
      {static_cast<double>(cost.model.hidden_size), "cost.model.hidden_size"},
      {static_cast<double>(cost.model.n_kv_heads), "cost.model.n_kv_heads"},
      {static_cast<double>(cost.model.head_dim), "cost.model.head_dim"},
      {static_cast<double>(cost.model.dtype_bytes), "cost.model.dtype_bytes"},
      {cost.gpu.peak_flops, "cost.gpu.peak_flops"},
      {cost.gpu.hbm_bandwidth, "cost.gpu.hbm_bandwidth"},
      {static_cast<double>(cost.num_gpus), "cost.num_gpus"},
      {cost.mfu, "cost.mfu"},
      {cost.mbu, "cost.mbu"},
  };
  for (const auto& [v, field] : positives) {
    if (Status s = Positive(v, field); !s.ok()) return s;
  }
  if (cost.mfu > 1 || cost.mbu > 1) {
    return Status::InvalidArgument("cost.mfu and cost.mbu must be <= 1");
  }
  const std::pair<double, const char*> non_negatives[] = {
      {cost.fixed_step_overhead, "cost.fixed_step_overhead"}, {cost.per_sequence_cpu, "cost.per_sequence_cpu"},
      {cost.all_reduce_latency, "cost.all_reduce_latency"},   {cost.all_reduce_bandwidth, "cost.all_reduce_bandwidth"},
      {cost.request_overhead, "cost.request_overhead"},       {cost.tokenize_per_token, "cost.tokenize_per_token"},
  };
  for (const auto& [v, field] : non_negatives) {
    if (!(v >= 0)) {
      return Status::InvalidArgument(std::string(field) + " must be >= 0, got " + std::to_string(v));
    }
  }
  if (!(cost.step_jitter >= 0 && cost.step_jitter <= 0.5)) {
    return Status::InvalidArgument("cost.step_jitter must be in [0, 0.5], got " + std::to_string(cost.step_jitter));
  }
  return Status::Ok();
}

StepScheduler::StepScheduler(SchedulerConfig config, KvEventListener* listener)
    : config_(config),
      kv_(KvCacheConfig{config.block_size, config.capacity_blocks}, listener),
      jitter_rng_(Mix64(config.seed ^ 0x6a69747465723031ULL)) {  // "jitter01"
  assert(config_.Validate().ok());
  running_.reserve(config_.max_num_seqs);
}

StepScheduler::~StepScheduler() = default;

Status StepScheduler::Submit(EngineRequest request, double now) {
  const uint64_t id = request.id;
  if (requests_.contains(id)) {
    return Status::InvalidArgument("request id " + std::to_string(id) + " is already live");
  }
  if (request.prompt.empty()) return Status::InvalidArgument("prompt must not be empty");
  if (request.max_tokens < 1) return Status::InvalidArgument("max_tokens must be >= 1, got 0");
  const size_t total = request.prompt.size() + request.max_tokens;
  if (total > config_.max_model_len) {
    return Status::InvalidArgument("prompt (" + std::to_string(request.prompt.size()) + " tokens) + max_tokens (" +
                                   std::to_string(request.max_tokens) + ") exceeds max_model_len " +
                                   std::to_string(config_.max_model_len));
  }
  const size_t capacity_tokens = static_cast<size_t>(config_.capacity_blocks) * config_.block_size;
  if (total > capacity_tokens) {
    return Status::InvalidArgument("prompt + max_tokens (" + std::to_string(total) +
                                   " tokens) exceeds the KV cache capacity of " + std::to_string(capacity_tokens) +
                                   " tokens");
  }
  auto r = std::make_unique<Request>();
  r->ready =
      std::max(now, tokenizer_free_at_) + config_.cost.TokenizeSeconds(static_cast<double>(request.prompt.size()));
  tokenizer_free_at_ = r->ready;
  r->spec = std::move(request);
  r->arrival = now;
  waiting_.push_back(r.get());
  requests_.emplace(id, std::move(r));
  return Status::Ok();
}

bool StepScheduler::Abort(uint64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  Request* r = it->second.get();
  if (auto w = std::find(waiting_.begin(), waiting_.end(), r); w != waiting_.end()) {
    waiting_.erase(w);
  } else {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  }
  kv_.Free(request_id);
  requests_.erase(it);
  return true;
}

void StepScheduler::Preempt(Request* r) {
  kv_.Free(r->spec.id);
  r->kv_tokens = 0;
  r->computed = 0;
  r->scheduled = 0;
  r->decoding = false;
  waiting_.push_front(r);
  ++preemptions_;
  RequestEvent e;
  e.kind = EventKind::kPreempted;
  e.request_id = r->spec.id;
  e.token_index = r->generated;
  e.prompt_tokens = static_cast<uint32_t>(r->spec.prompt.size());
  e.cached_tokens = r->cached_tokens;
  e.queue_wait = r->queue_wait;
  e.ttft = r->ttft;
  result_.events.push_back(e);
}

size_t StepScheduler::TryAdmit(double now, size_t budget) {
  Request* r = waiting_.front();
  std::span<const uint32_t> tokens = r->spec.prompt;
  if (r->generated > 0) {
    // Resuming after preemption: recompute the prompt and everything generated so far.
    scratch_tokens_.assign(r->spec.prompt.begin(), r->spec.prompt.end());
    for (uint32_t i = 0; i < r->generated; ++i) {
      scratch_tokens_.push_back(GeneratedTokenId(r->spec.output_seed, i));
    }
    tokens = scratch_tokens_;
  }
  Result<size_t> cached = kv_.Allocate(r->spec.id, tokens, r->spec.adapter, budget);
  if (!cached.ok()) return 0;
  waiting_.pop_front();
  r->kv_tokens = tokens.size();
  r->computed = *cached;
  if (!r->admitted_once) {
    r->admitted_once = true;
    r->cached_tokens = static_cast<uint32_t>(*cached);
    r->queue_wait = now - r->arrival;
  }
  running_.push_back(r);
  return std::min(r->kv_tokens - r->computed, budget);
}

double StepScheduler::JitterFactor() {
  const double sigma = config_.cost.step_jitter;
  if (sigma <= 0) return 1;
  // Box-Muller: one standard normal from two uniforms in (0, 1].
  const double u1 = 1.0 - jitter_rng_.NextDouble();
  const double u2 = jitter_rng_.NextDouble();
  const double z = std::clamp(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2), -3.0, 3.0);
  return std::exp(sigma * z - sigma * sigma / 2);
}

const StepResult& StepScheduler::Step(double now) {
  result_.duration = 0;
  result_.num_prefill_tokens = 0;
  result_.num_decode_tokens = 0;
  result_.num_scheduled_seqs = 0;
  result_.events.clear();
  ++steps_;
  for (Request* r : running_) {
    r->scheduled = 0;
    r->decoding = false;
  }
  size_t budget = config_.max_num_batched_tokens;

  // 1. Running requests in admission order: a decode token or the next prefill chunk, with the
  //    blocks for it taken now; with none free, preempt from the most recent admission.
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request* r = running_[i];
    const bool decode = r->computed >= r->kv_tokens;
    assert(!decode || r->generated > 0);  // a computed context means a token was sampled
    const size_t chunk = decode ? 1 : std::min(r->kv_tokens - r->computed, budget);
    const uint32_t token = r->last_token_id;
    bool self_preempted = false;
    while (!(decode ? kv_.AppendTokens(r->spec.id, std::span<const uint32_t>(&token, 1))
                    : kv_.Grow(r->spec.id, r->computed + chunk))
                .ok()) {
      Request* victim = running_.back();
      running_.pop_back();
      Preempt(victim);
      preempted = true;
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // r was the last running request
    if (decode) ++r->kv_tokens;
    r->scheduled = chunk;
    r->decoding = decode;
    budget -= chunk;
  }

  // 2. Admission, FCFS with head-of-line blocking, of tokenized requests. As vLLM v1, none in a
  //    step that preempted.
  while (!preempted && budget > 0 && running_.size() < config_.max_num_seqs && !waiting_.empty() &&
         waiting_.front()->ready <= now) {
    const size_t chunk = TryAdmit(now, budget);
    if (chunk == 0) break;
    running_.back()->scheduled = chunk;
    budget -= chunk;
  }

  StepShape shape;
  for (const Request* r : running_) {
    if (r->scheduled == 0) continue;
    shape.Add(static_cast<double>(r->computed), static_cast<double>(r->scheduled));
    ++result_.num_scheduled_seqs;
    (r->decoding ? result_.num_decode_tokens : result_.num_prefill_tokens) += static_cast<uint32_t>(r->scheduled);
  }
  if (shape.tokens <= 0) {
    // Idle: nothing runs and the head of the queue is still being tokenized.
    if (!waiting_.empty()) result_.duration = std::max(waiting_.front()->ready - now, 0.0);
    return result_;
  }
  result_.duration = config_.cost.StepSeconds(shape) * JitterFactor();
  const double end = now + result_.duration;

  // 3. End of step: write the KV, sample where the context is complete, retire finished ones.
  bool any_finished = false;
  for (Request* r : running_) {
    if (r->scheduled == 0) continue;
    r->computed += r->scheduled;
    kv_.MarkComputed(r->spec.id, r->computed);
    if (r->computed < r->kv_tokens) continue;
    RequestEvent e;
    e.kind = r->generated == 0 ? EventKind::kFirstToken : EventKind::kToken;
    e.request_id = r->spec.id;
    e.token_index = r->generated;
    e.token_id = GeneratedTokenId(r->spec.output_seed, r->generated);
    r->last_token_id = e.token_id;
    e.prompt_tokens = static_cast<uint32_t>(r->spec.prompt.size());
    e.cached_tokens = r->cached_tokens;
    e.queue_wait = r->queue_wait;
    if (r->generated == 0) r->ttft = end - r->arrival;
    e.ttft = r->ttft;
    result_.events.push_back(e);
    if (++r->generated < r->spec.max_tokens) continue;
    e.kind = EventKind::kFinished;
    e.token_index = r->generated;
    e.token_id = 0;
    result_.events.push_back(e);
    kv_.Free(r->spec.id);
    r->finished = true;
    any_finished = true;
  }
  if (any_finished) {
    size_t kept = 0;
    for (Request* r : running_) {
      if (r->finished) {
        const uint64_t id = r->spec.id;
        requests_.erase(id);  // destroys *r
      } else {
        running_[kept++] = r;
      }
    }
    running_.resize(kept);
  }
  return result_;
}

}  // namespace prefix_router::engine_model
