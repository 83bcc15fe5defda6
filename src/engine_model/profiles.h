// Profiles: named engine configurations (model x hardware x vLLM settings) for the emulator and
// the simulator, with every constant's origin stated.
//
// llama-70b-h100x8: Llama 3.1 70B Instruct in bf16 on one 8 x H100 80GB SXM node, tensor
// parallel 8, vLLM defaults. Everything is first principles or a published spec, except two
// constants calibrated to the published TTFT range for this setup:
//     uncached 8,000-token prompt, idle instance:  ~280 ms to first token
//     same prompt with 7,984 tokens cached:        ~63 ms
// The calibration: mbu fixed at 0.8 and the step overhead estimated (below); the cached case
// is then memory-bound (weights + KV read, 6.7 ms) so it fixes the per-request overhead
// (63 - 3 - 6.7 = 53.3 ms); the uncached case is compute-bound (1.21e15 FLOPs) and fixes the
// mfu (0.686). Resulting TTFTs (request overhead included): 279.9 ms and 63.0 ms; one decode
// step at batch 1 and 8k context takes 9.7 ms. Treat mfu and request_overhead as fitted, not
// as measurements of anything.
//
// tiny-test: a small, fast engine for tests: a 1B-parameter model on one notional accelerator,
// 256 KV blocks of 16 tokens (4,096 tokens, so tests reach eviction and preemption quickly),
// 8 sequences, 512 batched tokens, steps of a few milliseconds.
//
// Thread-safety: pure functions; profiles are values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine_model/cost_model.h"
#include "engine_model/scheduler.h"

namespace prefix_router::engine_model {

struct Profile {
  std::string name;
  std::string description;
  SchedulerConfig config;
};

// Names FindProfile accepts, in a stable order.
std::vector<std::string_view> ProfileNames();
// NotFound naming the known profiles when `name` is not one of them.
Result<Profile> FindProfile(std::string_view name);

// KV capacity in blocks, as vLLM sizes it: the memory it may use on all GPUs, less the weights
// and the activation/runtime reserve, divided by the bytes of one block; rounded down.
uint32_t KvCapacityBlocks(const ModelSpec& model, const GpuSpec& gpu, uint32_t num_gpus,
                          double gpu_memory_utilization, double reserve_bytes_per_gpu,
                          uint32_t block_size);

namespace llama70b_h100x8 {

// Llama 3.1 70B (model card and config.json).
inline constexpr double kParams = 70.6e9;
inline constexpr uint32_t kLayers = 80;
inline constexpr uint32_t kHidden = 8192;
inline constexpr uint32_t kKvHeads = 8;     // grouped-query attention: 64 query heads, 8 KV
inline constexpr uint32_t kHeadDim = 128;   // 8192 / 64
inline constexpr uint32_t kDtypeBytes = 2;  // bf16
// => KV bytes per token 2 * 80 * 8 * 128 * 2 = 327,680 (320 KiB); weights 141.2e9 bytes.

// NVIDIA H100 SXM5 80GB datasheet.
inline constexpr uint32_t kGpus = 8;
inline constexpr double kPeakFlops = 989e12;  // dense BF16 tensor core (1,979e12 is sparse)
inline constexpr double kHbmBandwidth = 3.35e12;
inline constexpr double kHbmBytes = 80e9;

// vLLM settings.
inline constexpr double kGpuMemoryUtilization = 0.9;    // --gpu-memory-utilization default
inline constexpr uint32_t kBlockSize = 16;              // --block-size default
inline constexpr uint32_t kMaxNumSeqs = 256;            // --max-num-seqs default
inline constexpr uint32_t kMaxNumBatchedTokens = 8192;  // V1 default for online serving
inline constexpr uint32_t kMaxModelLen = 131072;        // the model's context length

// Memory per GPU that is neither weights nor KV, estimated: vLLM profiles a forward pass of
// max_num_batched_tokens. Per GPU at TP 8 the activations are small (hidden states
// 8192 x 8192 x 2 B = 134 MB; MLP gate+up 8192 x 28672/8 x 2 x 2 B = 117 MB; sampler logits
// 256 x 128,256 x 4 B = 131 MB), but CUDA graph pools, NCCL buffers and allocator slack add
// up; vLLM's start-up logs at this size show 1-3 GiB per GPU. 2 GB, an estimate.
inline constexpr double kReserveBytesPerGpu = 2e9;
// => (8 * 80e9 * 0.9 - 141.2e9 - 8 * 2e9) / (327,680 * 16) = 79,879 blocks (1,278,064 tokens).
inline constexpr uint32_t kCapacityBlocks = 79879;

// Achieved fraction of peak HBM bandwidth: well-tuned decode GEMV/attention kernels reach
// 75-85% on H100; 0.8, from first principles of the roofline, not fitted.
inline constexpr double kMbu = 0.8;
// Per-step time outside the roofline, estimated: TP 8 needs 2 all-reduces per layer, 160 per
// step, ~10 us each at decode message sizes over NVLink (1.6 ms), plus ~1.4 ms of scheduling,
// input preparation and sampling not overlapped with the GPU.
inline constexpr double kFixedStepOverhead = 3e-3;
// Calibrated (see above): per-request time outside the engine loop, and the prefill MFU.
inline constexpr double kRequestOverhead = 53.3e-3;
inline constexpr double kMfu = 0.686;

}  // namespace llama70b_h100x8

}  // namespace prefix_router::engine_model
