#include "engine_model/profiles.h"

#include <cmath>

namespace prefix_router::engine_model {
namespace {

Profile Llama70bH100x8() {
  namespace p = llama70b_h100x8;
  Profile profile;
  profile.name = "llama-70b-h100x8";
  profile.description =
      "Llama 3.1 70B bf16 on 8x H100 80GB SXM (TP 8), vLLM defaults; TTFT calibrated to "
      "~280 ms uncached / ~63 ms cached for an 8,000-token prompt";
  SchedulerConfig& c = profile.config;
  c.cost.model =
      ModelSpec{p::kParams, p::kLayers, p::kHidden, p::kKvHeads, p::kHeadDim, p::kDtypeBytes};
  c.cost.gpu = GpuSpec{p::kPeakFlops, p::kHbmBandwidth, p::kHbmBytes};
  c.cost.num_gpus = p::kGpus;
  c.cost.mfu = p::kMfu;
  c.cost.mbu = p::kMbu;
  c.cost.fixed_step_overhead = p::kFixedStepOverhead;
  c.cost.request_overhead = p::kRequestOverhead;
  c.block_size = p::kBlockSize;
  c.capacity_blocks = KvCapacityBlocks(c.cost.model, c.cost.gpu, p::kGpus, p::kGpuMemoryUtilization,
                                       p::kReserveBytesPerGpu, p::kBlockSize);
  c.max_num_seqs = p::kMaxNumSeqs;
  c.max_num_batched_tokens = p::kMaxNumBatchedTokens;
  c.max_model_len = p::kMaxModelLen;
  return profile;
}

Profile TinyTest() {
  Profile profile;
  profile.name = "tiny-test";
  profile.description =
      "small fast engine for tests: 1B model, 256 KV blocks of 16, 8 seqs, 512 tokens/step";
  SchedulerConfig& c = profile.config;
  // A 1B model shaped like Llama 3.2 1B (16 layers, 2048 hidden, 8 KV heads of 64), bf16.
  c.cost.model = ModelSpec{1e9, 16, 2048, 8, 64, 2};
  // A notional accelerator: 100 TFLOP/s, 1 TB/s. Decode steps ~3.5 ms, a 512-token prefill
  // chunk ~21 ms.
  c.cost.gpu = GpuSpec{100e12, 1e12, 24e9};
  c.cost.num_gpus = 1;
  c.cost.mfu = 0.5;
  c.cost.mbu = 0.8;
  c.cost.fixed_step_overhead = 1e-3;
  c.cost.request_overhead = 5e-3;
  c.block_size = 16;
  c.capacity_blocks = 256;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 512;
  c.max_model_len = 4096;
  return profile;
}

}  // namespace

uint32_t KvCapacityBlocks(const ModelSpec& model, const GpuSpec& gpu, uint32_t num_gpus,
                          double gpu_memory_utilization, double reserve_bytes_per_gpu,
                          uint32_t block_size) {
  const double usable =
      num_gpus * (gpu.hbm_bytes * gpu_memory_utilization - reserve_bytes_per_gpu) -
      model.WeightBytes();
  const double block_bytes = model.KvBytesPerToken() * block_size;
  if (usable <= 0 || block_bytes <= 0) return 0;
  return static_cast<uint32_t>(std::floor(usable / block_bytes));
}

std::vector<std::string_view> ProfileNames() { return {"llama-70b-h100x8", "tiny-test"}; }

Result<Profile> FindProfile(std::string_view name) {
  if (name == "llama-70b-h100x8") return Llama70bH100x8();
  if (name == "tiny-test") return TinyTest();
  std::string known;
  for (std::string_view n : ProfileNames()) {
    if (!known.empty()) known += ", ";
    known += n;
  }
  return Status::NotFound("unknown engine profile \"" + std::string(name) + "\" (known: " + known +
                          ")");
}

}  // namespace prefix_router::engine_model
