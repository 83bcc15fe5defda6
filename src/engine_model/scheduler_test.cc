#include "engine_model/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "engine_model/profiles.h"
#include "engine_model/tokenizer.h"

namespace prefix_router::engine_model {
namespace {

std::vector<uint32_t> Tokens(uint64_t seed, size_t n) {
  Rng rng(seed);
  std::vector<uint32_t> out(n);
  for (uint32_t& t : out) t = 1000 + rng.Uniform(127000);
  return out;
}

std::vector<uint32_t> Concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

SchedulerConfig Profile(std::string_view name) {
  Result<engine_model::Profile> p = FindProfile(name);
  EXPECT_TRUE(p.ok());
  return p->config;
}

EngineRequest Req(uint64_t id, std::vector<uint32_t> prompt, uint32_t max_tokens, std::string adapter = "") {
  return EngineRequest{id, std::move(prompt), std::move(adapter), max_tokens, id * 7919};
}

// What happened to one request, gathered from the step results.
struct Outcome {
  RequestEvent first;
  RequestEvent finished;
  bool has_first = false;
  bool has_finished = false;
  std::vector<uint32_t> token_indices;
  std::vector<uint32_t> token_ids;
  int preemptions = 0;
};

struct Trace {
  std::map<uint64_t, Outcome> outcomes;
  std::vector<StepResult> steps;  // copies, in order
  double end = 0;
};

// A request to submit at `arrival`.
struct Arrival {
  double arrival;
  EngineRequest request;
};

// Drives `s` from `now` with the given arrivals (sorted by time) until nothing is left,
// advancing the clock by each step's duration as the emulator and simulator do.
Trace Drive(StepScheduler& s, std::vector<Arrival> arrivals, double now = 0) {
  Trace run;
  size_t next = 0;
  while (next < arrivals.size() || s.HasWork()) {
    while (next < arrivals.size() && arrivals[next].arrival <= now) {
      EXPECT_TRUE(s.Submit(std::move(arrivals[next].request), arrivals[next].arrival).ok());
      ++next;
    }
    if (!s.HasWork()) {
      now = arrivals[next].arrival;
      continue;
    }
    const StepResult& r = s.Step(now);
    now += r.duration;
    run.steps.push_back(r);
    for (const RequestEvent& e : r.events) {
      Outcome& o = run.outcomes[e.request_id];
      switch (e.kind) {
        case EventKind::kFirstToken:
          o.first = e;
          o.has_first = true;
          [[fallthrough]];
        case EventKind::kToken:
          o.token_indices.push_back(e.token_index);
          o.token_ids.push_back(e.token_id);
          break;
        case EventKind::kFinished:
          o.finished = e;
          o.has_finished = true;
          break;
        case EventKind::kPreempted: ++o.preemptions; break;
      }
    }
  }
  run.end = now;
  return run;
}

Trace DriveAll(StepScheduler& s, std::vector<EngineRequest> requests, double now = 0) {
  std::vector<Arrival> arrivals;
  for (EngineRequest& r : requests) arrivals.push_back({now, std::move(r)});
  return Drive(s, std::move(arrivals), now);
}

// Client-visible TTFT: the engine's plus the per-request overhead outside it.
double ClientTtft(const StepScheduler& s, const Outcome& o) { return o.first.ttft + s.config().cost.request_overhead; }

// Two requests sharing an 8,000-token prefix: the second is served from the cache, fast.
TEST(StepSchedulerTest, SharedPrefixIsServedFromCache) {
  StepScheduler s(Profile("llama-70b-h100x8"));
  const std::vector<uint32_t> prefix = Tokens(1, 8000);
  Trace first = DriveAll(s, {Req(1, prefix, 20)});
  Trace same = DriveAll(s, {Req(2, prefix, 20)}, first.end + 1);
  Trace longer = DriveAll(s, {Req(3, Concat(prefix, Tokens(3, 60)), 20)}, same.end + 1);

  EXPECT_EQ(first.outcomes[1].first.cached_tokens, 0u);
  EXPECT_GE(same.outcomes[2].first.cached_tokens, 7984u);
  EXPECT_EQ(longer.outcomes[3].first.cached_tokens, 8000u);
  EXPECT_NEAR(ClientTtft(s, first.outcomes[1]), 0.280, 0.010);
  EXPECT_NEAR(ClientTtft(s, same.outcomes[2]), 0.063, 0.003);
  EXPECT_NEAR(ClientTtft(s, longer.outcomes[3]), 0.063, 0.005);
  EXPECT_EQ(s.kv_cache().stats().hit_tokens, 7984u + 8000u);
}

// On an idle instance TTFT never decreases as the uncached part of an 8,000-token prompt grows.
TEST(StepSchedulerTest, TtftGrowsWithUncachedTokens) {
  const std::vector<uint32_t> prompt = Tokens(2, 8000);
  std::vector<std::pair<uint32_t, double>> points;  // (uncached tokens, ttft)
  for (size_t uncached = 0; uncached <= 8000; uncached += 320) {
    StepScheduler s(Profile("llama-70b-h100x8"));
    double now = 0;
    if (uncached < 8000) {
      std::vector<uint32_t> warm(prompt.begin(), prompt.end() - static_cast<ptrdiff_t>(uncached));
      now = DriveAll(s, {Req(1, std::move(warm), 1)}).end + 1;
    }
    Trace run = DriveAll(s, {Req(2, prompt, 1)}, now);
    points.emplace_back(8000 - run.outcomes[2].first.cached_tokens, run.outcomes[2].first.ttft);
  }
  for (size_t i = 1; i < points.size(); ++i) {
    EXPECT_GT(points[i].first, points[i - 1].first);
    EXPECT_GE(points[i].second, points[i - 1].second) << points[i].first << " uncached";
  }
  EXPECT_EQ(points.front().first, 16u);
  EXPECT_EQ(points.back().first, 8000u);
  EXPECT_GT(points.back().second, points.front().second + 0.15);
}

// Under overload later requests wait in the queue and their TTFT grows in arrival order.
TEST(StepSchedulerTest, TtftGrowsWithQueueingUnderOverload) {
  StepScheduler s(Profile("tiny-test"));
  std::vector<EngineRequest> requests;
  for (uint64_t id = 1; id <= 40; ++id) requests.push_back(Req(id, Tokens(id, 300), 16));
  size_t max_waiting = 0;
  std::vector<Arrival> arrivals;
  for (EngineRequest& r : requests) arrivals.push_back({0, std::move(r)});
  // Count the queue as it forms.
  ASSERT_TRUE(s.Submit(std::move(arrivals[0].request), 0).ok());
  for (size_t i = 1; i < arrivals.size(); ++i) {
    ASSERT_TRUE(s.Submit(std::move(arrivals[i].request), 0).ok());
  }
  max_waiting = s.num_waiting();
  Trace run = Drive(s, {});
  EXPECT_EQ(max_waiting, 40u);
  ASSERT_EQ(run.outcomes.size(), 40u);
  for (uint64_t id = 2; id <= 40; ++id) {
    EXPECT_GE(run.outcomes[id].first.queue_wait, run.outcomes[id - 1].first.queue_wait);
    EXPECT_GE(run.outcomes[id].first.ttft, run.outcomes[id - 1].first.ttft);
  }
  EXPECT_EQ(run.outcomes[1].first.queue_wait, 0.0);
  EXPECT_GT(run.outcomes[40].first.queue_wait, 0.1);
  EXPECT_GT(run.outcomes[40].first.ttft, 10 * run.outcomes[1].first.ttft);
  for (const StepResult& step : run.steps) EXPECT_LE(step.num_scheduled_seqs, 8u);
}

// Prefill is chunked: no step processes more tokens than the budget, decodes included.
TEST(StepSchedulerTest, ChunkedPrefillRespectsTheTokenBudget) {
  StepScheduler s(Profile("tiny-test"));
  std::vector<Arrival> arrivals;
  for (uint64_t id = 1; id <= 3; ++id) arrivals.push_back({0, Req(id, Tokens(id, 40), 200)});
  arrivals.push_back({0.05, Req(9, Tokens(9, 2000), 4)});
  Trace run = Drive(s, std::move(arrivals));
  uint32_t prefill_steps_with_decodes = 0;
  uint64_t prefill_total = 0;
  for (const StepResult& step : run.steps) {
    EXPECT_LE(step.num_prefill_tokens + step.num_decode_tokens, 512u);
    prefill_total += step.num_prefill_tokens;
    if (step.num_prefill_tokens > 0 && step.num_decode_tokens == 3) {
      ++prefill_steps_with_decodes;
      EXPECT_EQ(step.num_prefill_tokens + step.num_decode_tokens, std::min<uint32_t>(512, step.num_prefill_tokens + 3));
    }
  }
  EXPECT_EQ(prefill_total, 3u * 40u + 2000u);
  // 2,000 tokens next to 3 decodes: ceil(2000 / 509) = 4 steps.
  EXPECT_EQ(prefill_steps_with_decodes, 4u);
  EXPECT_EQ(run.outcomes[9].token_indices.size(), 4u);
}

// Blocks filled while decoding are registered: resending prompt + reply hits past the prompt.
TEST(StepSchedulerTest, FollowUpTurnHitsBlocksWrittenWhileDecoding) {
  StepScheduler s(Profile("tiny-test"));
  const std::vector<ChatMessage> turn1 = {{"system", "You are a helpful assistant that answers in short sentences."},
                                          {"user", "List a few rivers of Europe, with one fact about each of them."}};
  const std::vector<uint32_t> prompt1 = RenderChat(turn1);
  EngineRequest r1 = Req(1, prompt1, 60);
  const uint64_t seed = r1.output_seed;
  Trace first = DriveAll(s, {std::move(r1)});
  ASSERT_EQ(first.outcomes[1].token_ids.size(), 60u);
  for (size_t i = 0; i < 60; ++i) {
    EXPECT_EQ(first.outcomes[1].token_ids[i], GeneratedTokenId(seed, i));
  }

  std::vector<ChatMessage> turn2 = turn1;
  turn2.push_back({"assistant", GeneratedText(seed, 60)});
  turn2.push_back({"user", "Now the same for Asia."});
  Trace second = DriveAll(s, {Req(2, RenderChat(turn2), 10)}, first.end + 1);
  const uint32_t cached = second.outcomes[2].first.cached_tokens;
  // All full blocks of the prompt, and those of prompt + the 59 computed reply tokens.
  EXPECT_GE(cached, prompt1.size() / 16 * 16);
  EXPECT_EQ(cached, (prompt1.size() + 59) / 16 * 16);
}

// The same prompt under a different adapter gets no cache hit; under the same one it does.
TEST(StepSchedulerTest, AdaptersDoNotShareCache) {
  StepScheduler s(Profile("tiny-test"));
  const std::vector<uint32_t> prompt = Tokens(4, 320);
  Trace a = DriveAll(s, {Req(1, prompt, 2, "lora-a")});
  Trace b = DriveAll(s, {Req(2, prompt, 2, "lora-b")}, a.end + 1);
  Trace base = DriveAll(s, {Req(3, prompt, 2)}, b.end + 1);
  Trace again = DriveAll(s, {Req(4, prompt, 2, "lora-a")}, base.end + 1);
  EXPECT_EQ(b.outcomes[2].first.cached_tokens, 0u);
  EXPECT_EQ(base.outcomes[3].first.cached_tokens, 0u);
  EXPECT_EQ(again.outcomes[4].first.cached_tokens, 304u);
}

// When decoding runs out of blocks the newest request is preempted, recomputed and finished,
// and every request still streams each token exactly once.
TEST(StepSchedulerTest, PreemptsNewestWhenKvRunsOutAndRecovers) {
  StepScheduler s(Profile("tiny-test"));
  std::vector<EngineRequest> requests;
  // 8 x (200 + 400) tokens = 300 blocks > 256: decoding must preempt.
  for (uint64_t id = 1; id <= 8; ++id) requests.push_back(Req(id, Tokens(id, 200), 400));
  Trace run = DriveAll(s, std::move(requests));
  EXPECT_GT(s.num_preemptions(), 0u);
  int preempted_requests = 0;
  for (uint64_t id = 1; id <= 8; ++id) {
    const Outcome& o = run.outcomes[id];
    ASSERT_TRUE(o.has_finished) << id;
    ASSERT_EQ(o.token_indices.size(), 400u) << id;
    for (uint32_t i = 0; i < 400; ++i) {
      EXPECT_EQ(o.token_indices[i], i);
      EXPECT_EQ(o.token_ids[i], GeneratedTokenId(id * 7919, i));
    }
    EXPECT_EQ(o.finished.token_index, 400u);
    if (o.preemptions > 0) ++preempted_requests;
  }
  EXPECT_GT(preempted_requests, 0);
  // The oldest request is never the victim while newer ones run.
  EXPECT_EQ(run.outcomes[1].preemptions, 0);
  EXPECT_FALSE(s.HasWork());
  EXPECT_EQ(s.kv_usage(), 0.0);
  EXPECT_TRUE(s.kv_cache().CheckInvariants().ok());
}

// No more than max_num_seqs requests run at once; the rest wait.
TEST(StepSchedulerTest, RunsAtMostMaxNumSeqs) {
  StepScheduler s(Profile("tiny-test"));
  for (uint64_t id = 1; id <= 20; ++id) ASSERT_TRUE(s.Submit(Req(id, Tokens(id, 16), 50), 0).ok());
  double now = 0;
  size_t max_running = 0;
  while (s.HasWork()) {
    now += s.Step(now).duration;
    max_running = std::max(max_running, s.num_running());
    EXPECT_EQ(s.num_running() + s.num_waiting() > 0, s.HasWork());
  }
  EXPECT_EQ(max_running, 8u);
}

// Requests that could never run, or reuse a live id, are refused at submission.
TEST(StepSchedulerTest, RefusesInvalidRequests) {
  StepScheduler s(Profile("tiny-test"));
  EXPECT_EQ(s.Submit(Req(1, {}, 5), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Submit(Req(1, Tokens(1, 5), 0), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Submit(Req(1, Tokens(1, 4000), 200), 0).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.Submit(Req(1, Tokens(1, 5), 5), 0).ok());
  EXPECT_EQ(s.Submit(Req(1, Tokens(1, 5), 5), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.num_waiting(), 1u);
}

// Aborting a request frees its blocks wherever it is.
TEST(StepSchedulerTest, AbortFreesRunningAndWaitingRequests) {
  StepScheduler s(Profile("tiny-test"));
  for (uint64_t id = 1; id <= 10; ++id) ASSERT_TRUE(s.Submit(Req(id, Tokens(id, 100), 50), 0).ok());
  double now = s.Step(0).duration;
  EXPECT_GT(s.kv_usage(), 0.0);
  EXPECT_TRUE(s.Abort(1));   // running
  EXPECT_TRUE(s.Abort(10));  // waiting
  EXPECT_FALSE(s.Abort(10));
  EXPECT_TRUE(s.kv_cache().CheckInvariants().ok());
  Trace rest = Drive(s, {}, now);
  EXPECT_EQ(rest.outcomes.count(1), 0u);
  EXPECT_EQ(rest.outcomes.count(10), 0u);
  EXPECT_EQ(rest.outcomes.size(), 8u);
  EXPECT_EQ(s.kv_usage(), 0.0);
}

// A seeded mixed workload: shared prefixes, adapters, random lengths, arrivals over time.
std::vector<Arrival> MixedWorkload(uint64_t seed, int n) {
  Rng rng(seed);
  std::vector<std::vector<uint32_t>> prefixes;
  for (uint64_t i = 0; i < 5; ++i) prefixes.push_back(Tokens(1000 + i, 64 + 96 * i));
  std::vector<Arrival> out;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    t += -std::log(1.0 - rng.NextDouble()) * 0.01;
    auto prompt = Concat(prefixes[rng.Uniform(5)], Tokens(seed * 100000 + i, 1 + rng.Uniform(200)));
    out.push_back({t, Req(static_cast<uint64_t>(i + 1), std::move(prompt), 1 + rng.Uniform(120),
                          rng.Uniform(3) == 0 ? "lora" : "")});
  }
  return out;
}

bool SameEvents(const std::vector<RequestEvent>& a, const std::vector<RequestEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].request_id != b[i].request_id || a[i].token_index != b[i].token_index ||
        a[i].token_id != b[i].token_id || a[i].cached_tokens != b[i].cached_tokens ||
        a[i].queue_wait != b[i].queue_wait || a[i].ttft != b[i].ttft) {
      return false;
    }
  }
  return true;
}

// The same inputs give exactly the same steps and events.
TEST(StepSchedulerTest, IsDeterministic) {
  StepScheduler s1(Profile("tiny-test"));
  StepScheduler s2(Profile("tiny-test"));
  Trace a = Drive(s1, MixedWorkload(7, 300));
  Trace b = Drive(s2, MixedWorkload(7, 300));
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].duration, b.steps[i].duration);
    EXPECT_TRUE(SameEvents(a.steps[i].events, b.steps[i].events)) << "step " << i;
  }
  EXPECT_EQ(a.end, b.end);
  EXPECT_EQ(s1.num_preemptions(), s2.num_preemptions());
  // And the workload exercised the interesting paths.
  EXPECT_GT(s1.kv_cache().stats().hit_tokens, 0u);
  EXPECT_GT(s1.kv_cache().stats().evicted_blocks, 0u);
  ASSERT_EQ(a.outcomes.size(), 300u);
  for (const auto& [id, o] : a.outcomes) EXPECT_TRUE(o.has_finished) << id;
}

// Blocks are taken per scheduled chunk (vLLM v1's allocate_slots): a long prompt holds only its
// first chunk after admission and grows chunk by chunk.
TEST(StepSchedulerTest, AllocatesBlocksPerChunk) {
  StepScheduler s(Profile("tiny-test"));  // 512 tokens per step, blocks of 16
  ASSERT_TRUE(s.Submit(Req(1, Tokens(1, 2000), 4), 0).ok());
  double now = 0;
  std::vector<size_t> held;
  while (s.HasWork() && held.size() < 4) {
    now += s.Step(now).duration;
    held.push_back(s.kv_cache().NumHeld(1));
  }
  EXPECT_EQ(held, (std::vector<size_t>{512, 1024, 1536, 2000}));
  EXPECT_EQ(s.kv_cache().stats().used_blocks, 125u);  // ceil(2000 / 16)
}

// Under KV pressure from prompts that together exceed the cache, the newest running request
// gives way (recompute preemption) and every request completes, oldest first: the progress
// guarantee. 30 distinct prompts of 51,100 tokens on the 70B profile need 1.53M tokens of KV,
// more than its 1.39M, and each decodes long enough (400 steps) for the others to fill it.
TEST(StepSchedulerTest, LongPromptsPastCapacityAllComplete) {
  StepScheduler s(Profile("llama-70b-h100x8"));
  std::vector<EngineRequest> requests;
  for (uint64_t id = 1; id <= 30; ++id) requests.push_back(Req(id, Tokens(1000 + id, 51100), 400));
  Trace run = DriveAll(s, std::move(requests));
  ASSERT_EQ(run.outcomes.size(), 30u);
  double last_finish_order = -1;
  for (uint64_t id = 1; id <= 30; ++id) {
    const Outcome& o = run.outcomes[id];
    ASSERT_TRUE(o.has_finished) << id;
    EXPECT_EQ(o.token_indices.size(), 400u) << id;
    EXPECT_GE(o.first.ttft, last_finish_order) << id;  // first tokens in arrival order
    last_finish_order = o.first.ttft;
  }
  EXPECT_GT(s.num_preemptions(), 0u);
  EXPECT_EQ(run.outcomes[1].preemptions, 0);
  EXPECT_FALSE(s.HasWork());
  EXPECT_TRUE(s.kv_cache().CheckInvariants().ok());
}

// A prefill chunk that cannot get blocks preempts the newest running request, as a decode does;
// the preempted request recomputes and its tokens are the same.
TEST(StepSchedulerTest, PrefillChunkPreemptsNewest) {
  StepScheduler s(Profile("tiny-test"));  // 4,096 tokens of KV
  // Three 1,500-token prompts (94 blocks each, 282 > 256): the third is admitted with its first
  // chunk, then the second's or third's growth runs out of blocks.
  std::vector<EngineRequest> requests;
  for (uint64_t id = 1; id <= 3; ++id) requests.push_back(Req(id, Tokens(id, 1500), 20));
  Trace run = DriveAll(s, std::move(requests));
  EXPECT_GT(s.num_preemptions(), 0u);
  EXPECT_EQ(run.outcomes[1].preemptions, 0);
  for (uint64_t id = 1; id <= 3; ++id) {
    const Outcome& o = run.outcomes[id];
    ASSERT_TRUE(o.has_finished) << id;
    for (uint32_t i = 0; i < 20; ++i) EXPECT_EQ(o.token_ids[i], GeneratedTokenId(id * 7919, i));
  }
  EXPECT_TRUE(s.kv_cache().CheckInvariants().ok());
}

// The API server's tokenizer takes one request at a time: requests arriving together wait for
// the ones before them, and an idle engine waits for the first to be ready.
TEST(StepSchedulerTest, TokenizationQueuesOnOneThread) {
  SchedulerConfig c = Profile("tiny-test");
  c.cost.tokenize_per_token = 1e-4;  // 10 ms for 100 tokens
  StepScheduler s(c);
  ASSERT_TRUE(s.Submit(Req(1, Tokens(1, 100), 1), 0).ok());
  ASSERT_TRUE(s.Submit(Req(2, Tokens(2, 100), 1), 0).ok());
  const StepResult& idle = s.Step(0);
  EXPECT_EQ(idle.num_scheduled_seqs, 0u);
  EXPECT_NEAR(idle.duration, 0.010, 1e-9);
  std::vector<Arrival> none;
  Trace run = Drive(s, std::move(none), 0.010);
  EXPECT_NEAR(run.outcomes[1].first.queue_wait, 0.010, 1e-9);
  EXPECT_GE(run.outcomes[2].first.queue_wait, 0.020 - 1e-9);
  // A request arriving after the tokenizer went idle waits for its own tokenization only.
  ASSERT_TRUE(s.Submit(Req(3, Tokens(3, 50), 1), 10.0).ok());
  Trace later = Drive(s, {}, 10.0);
  EXPECT_NEAR(later.outcomes[3].first.queue_wait, 0.005, 1e-9);
}

// A long run on the 70B profile drains completely with consistent accounting.
TEST(StepSchedulerTest, LargeProfileDrainsUnderLoad) {
  StepScheduler s(Profile("llama-70b-h100x8"));
  std::vector<Arrival> arrivals = MixedWorkload(11, 2000);
  for (Arrival& a : arrivals) a.arrival /= 20;  // 2,000 requests/s: well past saturation
  Trace run = Drive(s, std::move(arrivals));
  EXPECT_EQ(run.outcomes.size(), 2000u);
  size_t tokens = 0;
  for (const auto& [id, o] : run.outcomes) {
    EXPECT_TRUE(o.has_finished);
    tokens += o.token_indices.size();
  }
  EXPECT_GT(tokens, 100000u);
  EXPECT_EQ(s.kv_usage(), 0.0);
  EXPECT_EQ(s.num_preemptions(), 0u);  // 1.39M tokens of KV: no memory pressure here
  EXPECT_TRUE(s.kv_cache().CheckInvariants().ok());
}

}  // namespace
}  // namespace prefix_router::engine_model
