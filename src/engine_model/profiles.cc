#include "engine_model/profiles.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <string>

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
  c.cost.model = ModelSpec{p::kParams, p::kLayers, p::kHidden, p::kKvHeads, p::kHeadDim, p::kDtypeBytes};
  c.cost.gpu = GpuSpec{p::kPeakFlops, p::kHbmBandwidth, p::kHbmBytes};
  c.cost.num_gpus = p::kGpus;
  c.cost.mbu = p::kMbu;
  c.cost.fixed_step_overhead = p::kFixedStepOverhead;
  c.cost.per_sequence_cpu = p::kPerSequenceCpu;
  c.cost.all_reduce_latency = p::kAllReduceLatency;
  c.cost.all_reduce_bandwidth = p::kAllReduceBandwidth;
  c.cost.step_jitter = p::kStepJitter;
  c.cost.tokenize_per_token = p::kTokenizePerToken;
  c.block_size = p::kBlockSize;
  c.capacity_blocks = KvCapacityBlocks(c.cost.model, c.cost.gpu, p::kGpus, p::kGpuMemoryUtilization,
                                       p::kReserveBytesPerGpu, p::kBlockSize);
  c.max_num_seqs = p::kMaxNumSeqs;
  c.max_num_batched_tokens = p::kMaxNumBatchedTokens;
  c.max_model_len = p::kMaxModelLen;
  // mfu and request_overhead: fitted to the reference calibration (the header comment).
  [[maybe_unused]] Status fitted = Calibrate(c, Calibration{});
  assert(fitted.ok());
  return profile;
}

Profile TinyTest() {
  Profile profile;
  profile.name = "tiny-test";
  profile.description = "small fast engine for tests: 1B model, 256 KV blocks of 16, 8 seqs, 512 tokens/step";
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
  // No jitter, tokenization or all-reduce: tests of the scheduler read exact step times.
  c.block_size = 16;
  c.capacity_blocks = 256;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 512;
  c.max_model_len = 4096;
  return profile;
}

}  // namespace

uint32_t KvCapacityBlocks(const ModelSpec& model, const GpuSpec& gpu, uint32_t num_gpus, double gpu_memory_utilization,
                          double reserve_bytes_per_gpu, uint32_t block_size) {
  const double usable =
      num_gpus * (gpu.hbm_bytes * gpu_memory_utilization - reserve_bytes_per_gpu) - model.WeightBytes();
  const double block_bytes = model.KvBytesPerToken() * block_size;
  if (usable <= 0 || block_bytes <= 0) return 0;
  return static_cast<uint32_t>(std::floor(usable / block_bytes));
}

namespace {

// The expected duration of the prefill steps of one prompt on an idle instance.
double IdlePrefillSeconds(const StepCostModel& cost, uint32_t max_chunk, uint32_t prompt_tokens,
                          uint32_t cached_tokens) {
  double seconds = 0;
  for (uint32_t done = cached_tokens; done < prompt_tokens;) {
    const uint32_t chunk = std::min(max_chunk, prompt_tokens - done);
    StepShape shape;
    shape.Add(done, chunk);
    seconds += cost.StepSeconds(shape);
    done += chunk;
  }
  return seconds;
}

}  // namespace

double IdleTtft(const SchedulerConfig& c, uint32_t prompt_tokens, uint32_t cached_tokens) {
  return c.cost.request_overhead + c.cost.TokenizeSeconds(prompt_tokens) +
         IdlePrefillSeconds(c.cost, c.max_num_batched_tokens, prompt_tokens, cached_tokens);
}

Status Calibrate(SchedulerConfig& c, const Calibration& target) {
  if (!(target.uncached_ttft > 0) || !(target.cached_ttft > 0) || target.cached_ttft >= target.uncached_ttft) {
    return Status::InvalidArgument("calibration needs 0 < cached (" + std::to_string(target.cached_ttft * 1e3) +
                                   " ms) < uncached (" + std::to_string(target.uncached_ttft * 1e3) + " ms)");
  }
  if (target.prompt_tokens < 2 * c.block_size) {
    return Status::InvalidArgument("calibration prompt must span at least two KV blocks");
  }
  // All full blocks but the last are reusable (kv_cache.h: at least one token is computed).
  const uint32_t cached = (target.prompt_tokens - 1) / c.block_size * c.block_size;
  const double gap = target.uncached_ttft - target.cached_ttft;
  StepCostModel cost = c.cost;
  // The uncached prefill minus the cached one shrinks as the mfu grows: bisect for the gap.
  auto excess = [&](double mfu) {
    cost.mfu = mfu;
    return IdlePrefillSeconds(cost, c.max_num_batched_tokens, target.prompt_tokens, 0) -
           IdlePrefillSeconds(cost, c.max_num_batched_tokens, target.prompt_tokens, cached) - gap;
  };
  double ceiling = kMaxSerialMfu;
  cost.overlap_all_reduce = false;
  if (excess(ceiling) > 0) {
    cost.overlap_all_reduce = true;
    ceiling = 1.0;
    if (excess(ceiling) > 0) {
      return Status::InvalidArgument("calibration out of reach: " + std::to_string(target.uncached_ttft * 1e3) +
                                     " ms uncached is less than " + std::to_string(target.cached_ttft * 1e3) +
                                     " ms cached plus the fastest prefill this hardware can do (MFU 1, all-reduces "
                                     "overlapped)");
    }
  }
  double lo = 1e-3;
  double hi = ceiling;
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (excess(mid) > 0 ? lo : hi) = mid;
  }
  cost.mfu = hi;
  cost.request_overhead = 0;
  SchedulerConfig fitted = c;
  fitted.cost = cost;
  const double overhead = target.cached_ttft - IdleTtft(fitted, target.prompt_tokens, cached);
  if (overhead < 0) {
    return Status::InvalidArgument(
        "calibration out of reach: " + std::to_string(target.cached_ttft * 1e3) +
        " ms cached is less than tokenizing the prompt and reading the weights and its KV (" +
        std::to_string((target.cached_ttft - overhead) * 1e3) + " ms)");
  }
  c.cost.mfu = cost.mfu;
  c.cost.overlap_all_reduce = cost.overlap_all_reduce;
  c.cost.request_overhead = overhead;
  return Status::Ok();
}

Result<Calibration> ParseCalibration(std::string_view text) {
  Calibration out;
  if (text.empty()) return Status::InvalidArgument("calibration is empty (want uncached=MS,cached=MS)");
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = part.find('=');
    const std::string_view name = part.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    double ms = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
    if (eq == std::string_view::npos || ec != std::errc() || end != value.data() + value.size() || !(ms > 0) ||
        ms > 1e6) {
      return Status::InvalidArgument("calibration part \"" + std::string(part) +
                                     "\": want uncached=MS or cached=MS, MS a positive number");
    }
    if (name == "uncached") {
      out.uncached_ttft = ms / 1e3;
    } else if (name == "cached") {
      out.cached_ttft = ms / 1e3;
    } else {
      return Status::InvalidArgument("calibration part \"" + std::string(part) +
                                     "\": unknown name (want uncached or cached)");
    }
  }
  return out;
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
  return Status::NotFound("unknown engine profile \"" + std::string(name) + "\" (known: " + known + ")");
}

}  // namespace prefix_router::engine_model
