// StepCostModel: how long one continuous-batching step of a transformer engine takes, from
// first principles (the roofline of one forward pass).
//
// A step runs one forward pass over every token scheduled in it (prefill chunks and one decode
// token per decoding sequence). It is bound either by arithmetic or by memory traffic:
//
//   step_time = fixed_step_overhead + max(compute_time, memory_time)
//
//   compute_time = FLOPs / (num_gpus * peak_flops_per_gpu * mfu)
//     FLOPs = 2 * n_params * tokens                  (a multiply-add per weight per token)
//           + 4 * n_layers * hidden * sum(context)   (attention: QK^T and AV, 2 FLOPs each per
//                                                     context position per hidden dimension per
//                                                     layer; `context` is each processed
//                                                     token's position, causal)
//   memory_time = (weight_bytes + kv_bytes_per_token * sum(sequence context lengths))
//                 / (num_gpus * hbm_bandwidth_per_gpu * mbu)
//     every step streams all weights once and, per scheduled sequence, the KV of its context
//     (cached and newly written tokens).
//
//   kv_bytes_per_token = 2 (K and V) * n_layers * n_kv_heads * head_dim * dtype_bytes
//   weight_bytes       = n_params * dtype_bytes
//
// mfu and mbu (model FLOPs / bandwidth utilisation) are the fractions of the peaks a real
// kernel mix achieves; fixed_step_overhead is the per-step time no roofline sees (scheduling,
// sampling, tensor-parallel all-reduce latency). request_overhead is time outside the engine
// loop per request (API server, tokenization, detokenization, network): the engine never adds
// it to its own events; the caller applies it once (the emulator delays the response by it,
// the simulator adds it to the time to first token).
//
// Thread-safety: values; StepSeconds is const and pure.
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
  double hbm_bytes = 0;      // memory size
};

// What a step processed, accumulated by the scheduler as it builds the batch.
struct StepShape {
  double tokens = 0;             // tokens processed (prefill chunk tokens + decode tokens)
  double attention_context = 0;  // sum over processed tokens of their position (context seen)
  double kv_read_tokens = 0;     // sum over scheduled sequences of their context after the step

  // Adds a sequence that processes `chunk` tokens after `start` already-computed ones.
  void Add(double start, double chunk) {
    tokens += chunk;
    attention_context += chunk * start + chunk * (chunk + 1) / 2;
    kv_read_tokens += start + chunk;
  }
};

struct StepCostModel {
  ModelSpec model;
  GpuSpec gpu;
  uint32_t num_gpus = 1;           // tensor-parallel group serving one instance
  double mfu = 0.5;                // achieved fraction of peak FLOP/s
  double mbu = 0.8;                // achieved fraction of peak HBM bandwidth
  double fixed_step_overhead = 0;  // seconds per step
  double request_overhead = 0;     // seconds per request, outside the engine (see above)

  double ComputeSeconds(const StepShape& s) const {
    const double flops = 2.0 * model.n_params * s.tokens +
                         4.0 * model.n_layers * model.hidden_size * s.attention_context;
    return flops / (num_gpus * gpu.peak_flops * mfu);
  }
  double MemorySeconds(const StepShape& s) const {
    const double bytes = model.WeightBytes() + model.KvBytesPerToken() * s.kv_read_tokens;
    return bytes / (num_gpus * gpu.hbm_bandwidth * mbu);
  }
  // Duration of a step; 0 for an empty one.
  double StepSeconds(const StepShape& s) const {
    if (s.tokens <= 0) return 0;
    return fixed_step_overhead + std::max(ComputeSeconds(s), MemorySeconds(s));
  }
};

}  // namespace prefix_router::engine_model
