#include "engine_model/profiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "engine_model/scheduler.h"

namespace prefix_router::engine_model {
namespace {

std::vector<uint32_t> Tokens(uint64_t seed, size_t n) {
  Rng rng(seed);
  std::vector<uint32_t> out(n);
  for (uint32_t& t : out) t = 1000 + rng.Uniform(127000);
  return out;
}

// Runs `s` until idle from `now`; returns the client-visible TTFT (engine TTFT plus the
// per-request overhead) of request `id` and its cached tokens.
struct FirstToken {
  double ttft = -1;
  uint32_t cached = 0;
};
FirstToken RunAndGetFirstToken(StepScheduler& s, uint64_t id, double now) {
  FirstToken out;
  while (s.HasWork()) {
    const StepResult& r = s.Step(now);
    now += r.duration;
    for (const RequestEvent& e : r.events) {
      if (e.kind == EventKind::kFirstToken && e.request_id == id) {
        out.ttft = e.ttft + s.config().cost.request_overhead;
        out.cached = e.cached_tokens;
      }
    }
  }
  return out;
}

SchedulerConfig Llama() {
  Result<Profile> p = FindProfile("llama-70b-h100x8");
  EXPECT_TRUE(p.ok());
  return p->config;
}

// The calibration: on an idle instance an uncached 8,000-token prompt takes 280 ms to the first
// token and the same prompt with 7,984 tokens cached 63 ms (the published range), in expectation
// (IdleTtft) and on average over jittered runs; the fit is the one the header states.
TEST(ProfilesTest, Llama70bTtftCalibration) {
  const SchedulerConfig c = Llama();
  EXPECT_NEAR(IdleTtft(c, 8000, 0), 0.280, 1e-6);
  EXPECT_NEAR(IdleTtft(c, 8000, 7984), 0.063, 1e-6);
  EXPECT_NEAR(c.cost.mfu, 0.875, 0.001);
  EXPECT_NEAR(c.cost.request_overhead, 0.0331, 0.0002);
  EXPECT_FALSE(c.cost.overlap_all_reduce);

  StepScheduler s(c);
  double uncached_sum = 0;
  double cached_sum = 0;
  double now = 0;
  const int kRuns = 60;
  for (int i = 0; i < kRuns; ++i) {
    const std::vector<uint32_t> prompt = Tokens(100 + i, 8000);
    const uint64_t id = 2 * i + 1;
    ASSERT_TRUE(s.Submit({id, prompt, "", 1, 0}, now).ok());
    const FirstToken uncached = RunAndGetFirstToken(s, id, now);
    EXPECT_EQ(uncached.cached, 0u);
    uncached_sum += uncached.ttft;
    now += 10;
    ASSERT_TRUE(s.Submit({id + 1, prompt, "", 1, 0}, now).ok());
    const FirstToken cached = RunAndGetFirstToken(s, id + 1, now);
    EXPECT_EQ(cached.cached, 7984u);
    cached_sum += cached.ttft;
    now += 10;
  }
  // Jitter of 5% per step: the mean of 60 runs is within about 1% (3 standard errors).
  EXPECT_NEAR(uncached_sum / kRuns, 0.280, 0.280 * 0.015);
  EXPECT_NEAR(cached_sum / kRuns, 0.063, 0.063 * 0.015);
}

// Calibrate refits any reachable pair, overlapping the all-reduces when a serial fit would need
// an unbelievable MFU, and refuses pairs beyond the hardware with a reason.
TEST(ProfilesTest, CalibrateRefitsAndRefusesTheUnreachable) {
  for (double uncached : {0.250, 0.280, 0.350}) {
    for (double cached : {0.035, 0.063, 0.100}) {
      SchedulerConfig c = Llama();
      ASSERT_TRUE(Calibrate(c, Calibration{uncached, cached, 8000}).ok()) << uncached << " " << cached;
      EXPECT_NEAR(IdleTtft(c, 8000, 0), uncached, 1e-6);
      EXPECT_NEAR(IdleTtft(c, 8000, 7984), cached, 1e-6);
      EXPECT_LE(c.cost.mfu, c.cost.overlap_all_reduce ? 1.0 : kMaxSerialMfu);
      EXPECT_GE(c.cost.request_overhead, 0.0);
    }
  }
  SchedulerConfig c = Llama();
  EXPECT_TRUE(Calibrate(c, Calibration{0.250, 0.100, 8000}).ok());
  EXPECT_TRUE(c.cost.overlap_all_reduce);  // serial would need an MFU above 0.9
  c = Llama();
  ASSERT_TRUE(Calibrate(c, Calibration{0.350, 0.063, 8000}).ok());
  EXPECT_FALSE(c.cost.overlap_all_reduce);
  EXPECT_LT(c.cost.mfu, 0.7);  // slower engine, lower MFU
  // Faster than any MFU allows, and cheaper than reading the weights.
  const SchedulerConfig before = Llama();
  c = before;
  Status fast = Calibrate(c, Calibration{0.150, 0.063, 8000});
  EXPECT_EQ(fast.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fast.message().find("out of reach"), std::string::npos);
  EXPECT_EQ(c.cost.mfu, before.cost.mfu);  // unchanged on failure
  Status cheap = Calibrate(c, Calibration{0.280, 0.010, 8000});
  EXPECT_NE(cheap.message().find("reading the weights"), std::string::npos);
  EXPECT_FALSE(Calibrate(c, Calibration{0.063, 0.280, 8000}).ok());
}

TEST(ProfilesTest, ParseCalibration) {
  Result<Calibration> both = ParseCalibration("uncached=350,cached=35");
  ASSERT_TRUE(both.ok());
  EXPECT_DOUBLE_EQ(both->uncached_ttft, 0.350);
  EXPECT_DOUBLE_EQ(both->cached_ttft, 0.035);
  Result<Calibration> one = ParseCalibration("cached=100");
  ASSERT_TRUE(one.ok());
  EXPECT_DOUBLE_EQ(one->uncached_ttft, 0.280);
  EXPECT_DOUBLE_EQ(one->cached_ttft, 0.100);
  for (const char* bad :
       {"", "uncached", "uncached=", "uncached=-1", "uncached=2x", "warm=3", "uncached=280,,cached=63"}) {
    EXPECT_FALSE(ParseCalibration(bad).ok()) << bad;
  }
}

// The KV capacity is what remains of 90% of the 85.0e9 bytes each H100 exposes, after weights
// and the reserve; vLLM V1's defaults for this GPU.
TEST(ProfilesTest, Llama70bCapacityIsDerivedFromMemory) {
  const SchedulerConfig c = Llama();
  EXPECT_DOUBLE_EQ(c.cost.model.KvBytesPerToken(), 327680.0);  // 2 * 80 * 8 * 128 * 2
  EXPECT_DOUBLE_EQ(c.cost.model.WeightBytes(), 141.2e9);
  const double expected = std::floor((8 * 85.0e9 * 0.9 - 141.2e9 - 8 * 2e9) / (327680.0 * 16));
  EXPECT_EQ(c.capacity_blocks, static_cast<uint32_t>(expected));
  EXPECT_EQ(c.capacity_blocks, llama70b_h100x8::kCapacityBlocks);
  EXPECT_GE(c.capacity_blocks, 83000u);
  EXPECT_LE(c.capacity_blocks, 88000u);
  EXPECT_EQ(c.block_size, 16u);
  EXPECT_EQ(c.max_num_seqs, 1024u);
  EXPECT_EQ(c.max_num_batched_tokens, 8192u);
}

// A decode step of the 70B model is bound by reading the weights (mbu 0.5: 10.5 ms) plus the
// per-step costs; the KV reads of a batch add on top, and in a mixed step the decodes' KV reads
// add to the prefill's GEMMs instead of hiding under them.
TEST(ProfilesTest, Llama70bStepCosts) {
  const StepCostModel& cost = Llama().cost;
  StepShape decode;
  decode.Add(8000, 1);
  // 1.4 fixed + 0.01 per sequence + 1.6 all-reduce + 10.54 weights + 0.2 KV.
  EXPECT_NEAR(cost.StepSeconds(decode), 0.01375, 0.0002);
  EXPECT_NEAR(cost.AllReduceSeconds(decode), 160 * 10e-6, 1e-5);
  StepShape batch;
  for (int i = 0; i < 64; ++i) batch.Add(8000, 1);
  // + 64 x 8,001 x 320 KiB of KV (168 GB at 13.4 TB/s: 12.5 ms) + 0.64 ms of CPU.
  EXPECT_NEAR(cost.StepSeconds(batch), 0.0271, 0.0005);
  StepShape prefill;
  prefill.Add(0, 4096);
  StepShape mixed = prefill;
  for (int i = 0; i < 64; ++i) mixed.Add(8000, 1);
  const double kv_read = 64 * 8001 * 327680.0 / (8 * 3.35e12 * cost.mbu);
  EXPECT_GT(cost.StepSeconds(mixed) - cost.StepSeconds(prefill), kv_read);
  // An 8,000-token prefill: 54 ms of all-reduces on the critical path.
  StepShape full;
  full.Add(0, 8000);
  EXPECT_NEAR(cost.AllReduceSeconds(full), 0.054, 0.001);
  EXPECT_EQ(cost.StepSeconds(StepShape{}), 0.0);
}

// Step times are jittered by a bounded, seeded factor: the same seed gives the same steps, another
// seed other steps, and no step leaves the 3-sigma band around its expected time.
TEST(ProfilesTest, StepJitterIsSeededAndBounded) {
  auto run = [](uint64_t seed) {
    SchedulerConfig c = Llama();
    c.seed = seed;
    StepScheduler s(c);
    std::vector<double> ratios;
    double now = 0;
    for (uint64_t id = 1; id <= 40; ++id) {
      EXPECT_TRUE(s.Submit({id, Tokens(id, 300), "", 4, 0}, now).ok());
    }
    while (s.HasWork()) {
      const StepResult& r = s.Step(now);
      now += r.duration;
      ratios.push_back(r.duration);
    }
    return ratios;
  };
  const std::vector<double> a = run(7);
  const std::vector<double> b = run(7);
  const std::vector<double> other = run(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  // Bounds, on a shape whose expected time is known: one decode step, many times.
  SchedulerConfig c = Llama();
  StepScheduler s(c);
  ASSERT_TRUE(s.Submit({1, Tokens(1, 100), "", 2000, 0}, 0).ok());
  double now = 0;
  const double sigma = c.cost.step_jitter;
  const double lo = std::exp(-3 * sigma - sigma * sigma / 2);
  const double hi = std::exp(3 * sigma - sigma * sigma / 2);
  double sum = 0;
  int decodes = 0;
  double min_ratio = 10, max_ratio = 0;
  while (s.HasWork()) {
    const StepResult& r = s.Step(now);
    now += r.duration;
    if (r.num_decode_tokens != 1) continue;
    StepShape shape;
    shape.Add(100 + decodes, 1);
    const double ratio = r.duration / c.cost.StepSeconds(shape);
    min_ratio = std::min(min_ratio, ratio);
    max_ratio = std::max(max_ratio, ratio);
    sum += ratio;
    ++decodes;
  }
  ASSERT_GT(decodes, 1000);
  EXPECT_GE(min_ratio, lo - 1e-9);
  EXPECT_LE(max_ratio, hi + 1e-9);
  EXPECT_LT(min_ratio, 0.95);  // it does vary
  EXPECT_GT(max_ratio, 1.05);
  EXPECT_NEAR(sum / decodes, 1.0, 0.01);
}

// Every listed profile resolves to a valid configuration; unknown names list the known ones.
TEST(ProfilesTest, NamesResolveAndUnknownNamesAreNotFound) {
  for (std::string_view name : ProfileNames()) {
    Result<Profile> p = FindProfile(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ(p->name, name);
    EXPECT_TRUE(p->config.Validate().ok()) << p->config.Validate().ToString();
    EXPECT_FALSE(p->description.empty());
  }
  Result<Profile> missing = FindProfile("gpt-5");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("tiny-test"), std::string::npos);
}

// The test profile is small and takes milliseconds per step.
TEST(ProfilesTest, TinyTestIsSmallAndFast) {
  const SchedulerConfig c = FindProfile("tiny-test")->config;
  EXPECT_EQ(c.capacity_blocks, 256u);
  EXPECT_EQ(c.max_num_seqs, 8u);
  EXPECT_EQ(c.max_num_batched_tokens, 512u);
  StepShape decode;
  decode.Add(100, 1);
  StepShape prefill;
  prefill.Add(0, 512);
  EXPECT_GT(c.cost.StepSeconds(decode), 0.001);
  EXPECT_LT(c.cost.StepSeconds(decode), 0.010);
  EXPECT_LT(c.cost.StepSeconds(prefill), 0.050);
}

// Configuration errors name the field at fault.
TEST(ProfilesTest, ValidationNamesTheField) {
  SchedulerConfig c = FindProfile("tiny-test")->config;
  c.max_num_seqs = 1000;
  EXPECT_NE(c.Validate().message().find("max_num_seqs"), std::string::npos);
  c = FindProfile("tiny-test")->config;
  c.cost.mfu = 0;
  EXPECT_NE(c.Validate().message().find("mfu"), std::string::npos);
  c = FindProfile("tiny-test")->config;
  c.cost.step_jitter = 0.9;
  EXPECT_NE(c.Validate().message().find("step_jitter"), std::string::npos);
  c = FindProfile("tiny-test")->config;
  c.cost.tokenize_per_token = -1;
  EXPECT_NE(c.Validate().message().find("tokenize_per_token"), std::string::npos);
  c = FindProfile("tiny-test")->config;
  c.capacity_blocks = 0;
  EXPECT_NE(c.Validate().message().find("capacity_blocks"), std::string::npos);
}

}  // namespace
}  // namespace prefix_router::engine_model
