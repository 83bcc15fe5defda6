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

// Frozen calibration: an uncached 8,000-token prompt on an idle instance takes ~280 ms to the
// first token, the same prompt with 7,984 tokens cached ~63 ms (the published range).
TEST(ProfilesTest, Llama70bTtftCalibrationIsFrozen) {
  const std::vector<uint32_t> prompt = Tokens(1, 8000);
  StepScheduler s(Llama());
  ASSERT_TRUE(s.Submit({1, prompt, "", 1, 0}, 0.0).ok());
  const FirstToken uncached = RunAndGetFirstToken(s, 1, 0.0);
  EXPECT_EQ(uncached.cached, 0u);
  EXPECT_GE(uncached.ttft, 0.270);
  EXPECT_LE(uncached.ttft, 0.290);

  ASSERT_TRUE(s.Submit({2, prompt, "", 1, 0}, 10.0).ok());
  const FirstToken cached = RunAndGetFirstToken(s, 2, 10.0);
  EXPECT_EQ(cached.cached, 7984u);
  EXPECT_GE(cached.ttft, 0.060);
  EXPECT_LE(cached.ttft, 0.066);
}

// The KV capacity is what remains of 90% of 8 x 80 GB after weights and the reserve.
TEST(ProfilesTest, Llama70bCapacityIsDerivedFromMemory) {
  const SchedulerConfig c = Llama();
  EXPECT_DOUBLE_EQ(c.cost.model.KvBytesPerToken(), 327680.0);  // 2 * 80 * 8 * 128 * 2
  EXPECT_DOUBLE_EQ(c.cost.model.WeightBytes(), 141.2e9);
  const double expected = std::floor((8 * 80e9 * 0.9 - 141.2e9 - 8 * 2e9) / (327680.0 * 16));
  EXPECT_EQ(c.capacity_blocks, static_cast<uint32_t>(expected));
  EXPECT_EQ(c.capacity_blocks, 79879u);
  EXPECT_EQ(c.capacity_blocks, llama70b_h100x8::kCapacityBlocks);
  EXPECT_EQ(c.block_size, 16u);
  EXPECT_EQ(c.max_num_seqs, 256u);
  EXPECT_EQ(c.max_num_batched_tokens, 8192u);
}

// A single decode step of the 70B model is memory-bound at about 10 ms (weights over HBM).
TEST(ProfilesTest, Llama70bDecodeStepIsMemoryBound) {
  const StepCostModel& cost = Llama().cost;
  StepShape decode;
  decode.Add(8000, 1);
  EXPECT_GT(cost.MemorySeconds(decode), 100 * cost.ComputeSeconds(decode));
  EXPECT_NEAR(cost.StepSeconds(decode), 0.0097, 0.0005);
  // A batch of 64 such sequences also reads 64 x 8,000 tokens of KV (168 GB): 17.4 ms.
  StepShape batch;
  for (int i = 0; i < 64; ++i) batch.Add(8000, 1);
  EXPECT_GT(cost.MemorySeconds(batch), cost.ComputeSeconds(batch));
  EXPECT_NEAR(cost.StepSeconds(batch), 0.0174, 0.0005);
  EXPECT_EQ(cost.StepSeconds(StepShape{}), 0.0);
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
  c.capacity_blocks = 0;
  EXPECT_NE(c.Validate().message().find("capacity_blocks"), std::string::npos);
}

}  // namespace
}  // namespace prefix_router::engine_model
