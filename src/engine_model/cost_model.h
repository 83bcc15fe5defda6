// StepCostModel: how long one continuous-batching step of a transformer engine takes, and what
// a request costs outside the engine loop, as a sum of named parts.
//
// A step runs one forward pass over every token scheduled in it (prefill chunks and one decode
// token per decoding sequence). Its duration is the sum of what runs one after the other on the
// engine's critical path:
//
//   step_time = fixed_step_overhead                        scheduling, input preparation,
//                                                          sampling launch: once per step
//             + per_sequence_cpu x scheduled sequences     per-request bookkeeping, sampling
//                                                          and detokenization on the CPU
//             + all_reduce_time                            tensor parallelism (below)
//             + linear_time                                the weight matrices (GEMMs)
//             + attention_time                             attention over each sequence's context
//
//   linear_time    = max(2 * n_params * tokens / (num_gpus * peak_flops * mfu),
//                        weight_bytes / (num_gpus * hbm_bandwidth * mbu))
//                    a multiply-add per weight per token, or streaming every weight once, which
//                    ever is longer: small batches (decode) are bound by the weights, large
//                    ones (prefill) by arithmetic.
//   attention_time = 4 * n_layers * hidden * sum(context) / (num_gpus * peak_flops * mfu)
//                  + kv_bytes_per_token * sum(sequence contexts) / (num_gpus * hbm_bandwidth * mbu)
//                    the QK^T and AV products (2 FLOPs each per context position per hidden
//                    dimension per layer, causal: `context` is each processed token's position)
//                    plus reading every scheduled sequence's KV once. The two are added, not
//                    max'd with linear_time: in a mixed step the decode sequences' KV reads run
//                    in their own attention kernels after the prefill's GEMMs, layer by layer.
//   all_reduce_time = all_reduces (2 per layer with tensor parallelism: after attention's output
//                     projection and after the MLP; 0 on one GPU)
//                   x (all_reduce_latency + tokens * hidden * dtype_bytes / all_reduce_bandwidth)
//                     a fixed latency per collective plus the activations it moves; with
//                     overlap_all_reduce (asynchronous tensor parallelism, off in vLLM by
//                     default) it overlaps with the GEMMs: max(linear_time, all_reduce_time).
//
//   kv_bytes_per_token = 2 (K and V) * n_layers * n_kv_heads * head_dim * dtype_bytes
//   weight_bytes       = n_params * dtype_bytes
//
// mfu and mbu (model FLOPs / bandwidth utilisation) are the fractions of the peaks a real
// kernel mix achieves. Step times vary in real engines (GPU clocks, memory contention, Python
// pauses in the engine loop): the scheduler multiplies each step by a seeded lognormal factor
// of mean 1 and log-standard-deviation step_jitter (scheduler.h).
//
// Outside the engine loop, per request:
//   request_overhead         the HTTP path and API server (parsing, validation, response,
//                            network): a constant the caller applies once (the emulator delays
//                            the response by it, the simulator adds it to the time to first
//                            token);
//   tokenize_per_token       tokenization (chat template and tokenizer), proportional to the
//                            prompt. The API server's tokenizer is one thread, so the scheduler
//                            queues requests through it one at a time before they can be
//                            scheduled (scheduler.h): under a burst, tokenization queues too.
//
// Thread-safety: values; the member functions are const and pure.
#pragma once

#include <algorithm>
#include <cstdint>

namespace prefix_router::engine_model {

// A transformer's shape, as far as step time and KV size depend on it.
struct ModelSpec {
  double n_params = 0;  // parameters
  uint32_t n_layers = 0;
  uint32_t hidden_size = 0;  // model (residual stream) dimension
  uint32_t n_kv_heads = 0;   // key/value heads (grouped-query attention)
  uint32_t head_dim = 0;
  uint32_t dtype_bytes = 2;  // bf16 weights and KV cache

  double KvBytesPerToken() const { return 2.0 * n_layers * n_kv_heads * head_dim * dtype_bytes; }
  double WeightBytes() const { return n_params * dtype_bytes; }
};

// One accelerator.
struct GpuSpec {
  double peak_flops = 0;     // dense FLOP/s in the model's dtype
  double hbm_bandwidth = 0;  // bytes/s
  double hbm_bytes = 0;      // memory the framework can use (what PyTorch reports as total)
};

// What a step processed, accumulated by the scheduler as it builds the batch.
struct StepShape {
  double tokens = 0;             // tokens processed (prefill chunk tokens + decode tokens)
  double attention_context = 0;  // sum over processed tokens of their position (context seen)
  double kv_read_tokens = 0;     // sum over scheduled sequences of their context after the step
  double sequences = 0;          // scheduled sequences

  // Adds a sequence that processes `chunk` tokens after `start` already-computed ones.
  void Add(double start, double chunk) {
    tokens += chunk;
    attention_context += chunk * start + chunk * (chunk + 1) / 2;
    kv_read_tokens += start + chunk;
    sequences += 1;
  }
};

struct StepCostModel {
  ModelSpec model;
  GpuSpec gpu;
  uint32_t num_gpus = 1;            // tensor-parallel group serving one instance
  double mfu = 0.5;                 // achieved fraction of peak FLOP/s
  double mbu = 0.5;                 // achieved fraction of peak HBM bandwidth
  double fixed_step_overhead = 0;   // seconds per step
  double per_sequence_cpu = 0;      // seconds per scheduled sequence per step
  double all_reduce_latency = 0;    // seconds per all-reduce (num_gpus > 1)
  double all_reduce_bandwidth = 0;  // bytes of activations per second per all-reduce; > 0 if TP
  bool overlap_all_reduce = false;  // all-reduces hidden under the GEMMs (see above)
  double step_jitter = 0;           // log-standard-deviation of the per-step factor; 0 = none
  double request_overhead = 0;      // seconds per request, outside the engine (see above)
  double tokenize_per_token = 0;    // seconds per prompt token on the API server's tokenizer

  double LinearSeconds(const StepShape& s) const {
    const double compute = 2.0 * model.n_params * s.tokens / (num_gpus * gpu.peak_flops * mfu);
    const double weights = model.WeightBytes() / (num_gpus * gpu.hbm_bandwidth * mbu);
    return std::max(compute, weights);
  }
  double AttentionSeconds(const StepShape& s) const {
    const double flops = 4.0 * model.n_layers * model.hidden_size * s.attention_context;
    const double bytes = model.KvBytesPerToken() * s.kv_read_tokens;
    return flops / (num_gpus * gpu.peak_flops * mfu) + bytes / (num_gpus * gpu.hbm_bandwidth * mbu);
  }
  double AllReduceSeconds(const StepShape& s) const {
    if (num_gpus <= 1 || all_reduce_bandwidth <= 0) return 0;
    const double per_op = all_reduce_latency + s.tokens * model.hidden_size * model.dtype_bytes / all_reduce_bandwidth;
    return 2.0 * model.n_layers * per_op;
  }
  // Expected duration of a step (the jitter factor has mean 1); 0 for an empty one.
  double StepSeconds(const StepShape& s) const {
    if (s.tokens <= 0) return 0;
    const double linear = LinearSeconds(s);
    const double all_reduce = AllReduceSeconds(s);
    const double gemm_and_comm = overlap_all_reduce ? std::max(linear, all_reduce) : linear + all_reduce;
    return fixed_step_overhead + per_sequence_cpu * s.sequences + gemm_and_comm + AttentionSeconds(s);
  }
  // Time on the API server's tokenizer for a prompt of `prompt_tokens` tokens.
  double TokenizeSeconds(double prompt_tokens) const { return tokenize_per_token * prompt_tokens; }
};

}  // namespace prefix_router::engine_model
