// Loopback tests of RunLoad: against the real engine emulator (tiny-test profile, time-scaled),
// the scriptable FakeUpstream (errors, stream shapes), a small header-scripting server
// (decision headers, connection closes) and a real gateway over two emulators. They check what
// `bench` reports: per-request timings and usage, cache hits, open-loop pacing by count, every
// failure kind recorded (never a hang), multi-turn history, warm-up and instance mapping.
//
// Timing assertions are loose (counts and orderings, not precise rates): CI machines are slow
// and noisy. Every run is bounded by its requests or duration and a short timeout.
#include "loadgen/loadgen.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_server.h"
#include "gateway/gateway.h"
#include "testing/fake_upstream.h"

namespace prefix_router::loadgen {
namespace {

using namespace std::chrono_literals;
namespace pt = prefix_router::testing;
namespace bhttp = http::bhttp;
namespace net = http::net;
using Clock = std::chrono::steady_clock;
using report::RequestRecord;

const bool kQuietLogs = [] {
  spdlog::set_level(spdlog::level::warn);
  return true;
}();

// ------------------------------------------------------------------------------------ helpers

// A scripted workload: sessions of `turns` requests made by `make(session, turn)`; optionally a
// finite number of sessions and trace-style arrival times. It records every previous reply its
// sessions were given (loadgen calls it under its lock; the test reads after the run).
class ScriptedWorkload final : public workload::Workload {
 public:
  using Make = std::function<workload::Request(uint64_t session, uint32_t turn)>;
  ScriptedWorkload(uint32_t turns, Make make) : turns_(turns), make_(std::move(make)) {}

  std::optional<uint64_t> max_sessions;
  std::function<double(uint64_t session)> arrival_s;  // unset = none (Poisson)
  double think_s = 0;
  std::vector<std::string> replies_seen;

  std::string_view name() const override { return "scripted"; }
  double mean_turns() const override { return turns_; }
  std::map<std::string, std::string> Parameters() const override { return {}; }
  workload::SessionStart NextSession() override {
    workload::SessionStart s;
    if (max_sessions && next_ >= *max_sessions) return s;
    const uint64_t id = next_++;
    s.session = std::make_unique<Session>(*this, id);
    if (arrival_s) s.arrival_s = arrival_s(id);
    return s;
  }

 private:
  class Session final : public workload::Session {
   public:
    Session(ScriptedWorkload& w, uint64_t id) : w_(w), id_(id) {}
    std::optional<workload::Request> Next(std::string_view previous_reply) override {
      if (turn_ == w_.turns_) return std::nullopt;
      w_.replies_seen.emplace_back(previous_reply);
      return w_.make_(id_, turn_++);
    }
    double think_s() const override { return w_.think_s; }

   private:
    ScriptedWorkload& w_;
    uint64_t id_;
    uint32_t turn_ = 0;
  };

  uint32_t turns_;
  Make make_;
  uint64_t next_ = 0;
};

// A chat request: a long system prompt shared by every request (several KV blocks) and a
// question that differs by `salt`.
workload::Request Chat(uint64_t salt, uint32_t max_tokens = 16) {
  workload::Request r;
  r.api = api::ApiKind::kChatCompletions;
  std::string system = "You are a careful assistant for the prefix router load generator tests.";
  for (int i = 0; i < 8; ++i)
    system += " Repeat the shared context paragraph number " + std::to_string(i) + " verbatim.";
  r.messages = {{"system", system}, {"user", "Question number " + std::to_string(salt) + ": what now?"}};
  r.max_tokens = max_tokens;
  return r;
}

// `prompt_tokens_details`: the engine reports cached tokens (vLLM's
// --enable-prompt-tokens-details); the tests that read cached counts need it.
// `components`: the engine's inference components (EngineOptions::inference_components).
std::unique_ptr<engine::EngineServer> StartEngine(double time_scale, std::string model = "llama",
                                                  bool prompt_tokens_details = true,
                                                  std::vector<std::string> components = {}) {
  engine::EngineOptions o;
  o.inference_components = std::move(components);
  o.host = "127.0.0.1";
  o.port = 0;
  o.profile = "tiny-test";
  o.time_scale = time_scale;
  o.model = std::move(model);
  o.enable_prompt_tokens_details = prompt_tokens_details;
  auto created = engine::EngineServer::Create(o);
  if (!created.ok()) {
    ADD_FAILURE() << created.status().ToString();
    return nullptr;
  }
  auto e = std::move(*created);
  if (Status s = e->Start(); !s.ok()) {
    ADD_FAILURE() << s.ToString();
    return nullptr;
  }
  return e;
}

std::unique_ptr<pt::FakeUpstream> StartFake(pt::Behavior b, std::string name = "fake") {
  auto f = std::make_unique<pt::FakeUpstream>(std::move(name));
  if (Status s = f->Start(); !s.ok()) {
    ADD_FAILURE() << s.ToString();
    return nullptr;
  }
  f->SetBehavior(std::move(b));
  return f;
}

std::string Url(uint16_t port) { return "http://127.0.0.1:" + std::to_string(port); }

LoadOptions Closed(uint16_t port, uint32_t users, uint64_t requests) {
  LoadOptions o;
  o.url = Url(port);
  o.default_model = "llama";
  o.mode = Mode::kClosed;
  o.concurrency = users;
  o.requests = requests;
  o.timeout_s = 5;
  return o;
}

// An OpenAI chat SSE stream replying `pieces`, with usage and [DONE].
std::vector<std::string> SseReply(const std::vector<std::string>& pieces, bool done = true) {
  std::vector<std::string> out;
  for (const auto& p : pieces)
    out.push_back("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + p + "\"}}]}\n\n");
  out.push_back("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":" +
                std::to_string(pieces.size()) + ",\"prompt_tokens_details\":{\"cached_tokens\":7}}}\n\n");
  if (done) out.push_back("data: [DONE]\n\n");
  return out;
}

pt::Behavior SseBehavior(std::vector<std::string> chunks) {
  pt::Behavior b;
  b.sse = true;
  b.chunks = std::move(chunks);
  return b;
}

LoadRun MustRun(const LoadOptions& o, workload::Workload& w) {
  auto r = RunLoad(o, w);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : LoadRun{};
}

uint64_t Errors(const LoadRun& run) {
  return static_cast<uint64_t>(
      std::count_if(run.records.begin(), run.records.end(), [](const RequestRecord& r) { return r.error; }));
}

// A server whose responses carry scripted gateway decision headers: the n-th response (from 0)
// names instance kNames[n % 3] with decision kKinds[n % 3], and every 4th asks to close the
// connection. Optionally closes idle connections quickly (to exercise stale keep-alive).
class DecisionServer final : public http::Handler {
 public:
  static constexpr const char* kNames[] = {"a", "b", "c"};
  static constexpr const char* kKinds[] = {"affinity", "overflow", "saturated"};

  explicit DecisionServer(std::chrono::milliseconds idle_timeout = 60s) {
    http::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.idle_timeout = idle_timeout;
    server_ = std::make_unique<http::Server>(o, *this);
    EXPECT_TRUE(server_->Start().ok());
  }
  ~DecisionServer() override { server_->Stop(0ms); }
  uint16_t port() const { return server_->port(); }
  int served() const { return n_.load(); }

  net::awaitable<void> Handle(http::Exchange& ex) override {
    const int n = n_++;
    bhttp::response_header<> head;
    head.result(bhttp::status::ok);
    head.set(bhttp::field::content_type, "text/event-stream");
    head.set("x-prefix-router-instance", kNames[n % 3]);
    head.set("x-prefix-router-decision", kKinds[n % 3]);
    head.set("x-prefix-router-rank", "0");
    if (n % 4 == 3) ex.CloseAfter();
    if (!co_await ex.SendHead(std::move(head))) co_return;
    std::string body;
    for (const auto& c : SseReply({"ok"})) body += c;
    if (co_await ex.SendBody(net::buffer(body))) co_await ex.Finish();
  }

 private:
  std::unique_ptr<http::Server> server_;
  std::atomic<int> n_{0};
};

// ------------------------------------------------------------------------ against the emulator

// A closed loop against the emulator: every request succeeds with coherent timings, usage and
// engine timing, and the shared system prompt gets cache hits.
TEST(RunLoad, ClosedLoopAgainstEmulator) {
  auto engine = StartEngine(0.05);
  ASSERT_TRUE(engine);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed(engine->port(), 4, 40);
  o.time_scale = 0.05;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(run.records.size(), 40u);
  EXPECT_TRUE(run.errors_by_kind.empty()) << run.first_error;
  uint64_t cached = 0;
  for (const RequestRecord& r : run.records) {
    ASSERT_FALSE(r.error);
    EXPECT_TRUE(r.counted);
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_LE(r.ttft_s, r.e2e_s);
    EXPECT_GT(r.itl_mean_s, 0);
    EXPECT_GT(r.prompt_tokens, 100u);
    EXPECT_EQ(r.output_tokens, 16u);
    EXPECT_LE(r.cached_tokens, r.prompt_tokens);
    EXPECT_GT(r.engine_ttft_s, 0);
    EXPECT_GE(r.engine_queue_s, 0);
    // Client TTFT (model time) includes the engine's modelled TTFT, give or take skipped sleeps.
    EXPECT_GE(r.ttft_s, 0.5 * r.engine_ttft_s);
    EXPECT_EQ(r.instance, -1);  // no gateway in between
    cached += r.cached_tokens;
  }
  EXPECT_GT(cached, 0u);
  EXPECT_TRUE(run.instance_names.empty());
  EXPECT_GT(run.wall_s, 0);
}

// The same request twice in a row: the first is a miss, the second is served from the cache.
TEST(RunLoad, SecondIdenticalRequestGetsCachedTokens) {
  auto engine = StartEngine(0.05);
  ASSERT_TRUE(engine);
  ScriptedWorkload w(1, [](uint64_t, uint32_t) { return Chat(7); });
  LoadOptions o = Closed(engine->port(), 1, 2);
  o.time_scale = 0.05;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(run.records.size(), 2u);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  EXPECT_EQ(run.records[0].cached_tokens, 0u);
  // vLLM leaves a count of 0 out of usage; the emulator's header still has it.
  EXPECT_TRUE(run.records[0].cached_tokens_known);
  EXPECT_GT(run.records[1].cached_tokens, run.records[1].prompt_tokens / 2);
  EXPECT_TRUE(run.records[1].cached_tokens_known);
}

// Against an engine that reports no cached tokens (the emulator's default, as vLLM's), no record
// has a cached count, streamed or not, though the second of each pair hits the cache; the
// run's hit rate is then not known (NaN, "n/a"), not 0.
TEST(RunLoad, NoCachedCountsFromADefaultEngine) {
  auto engine = StartEngine(0.05, "llama", /*prompt_tokens_details=*/false);
  ASSERT_TRUE(engine);
  for (const bool stream : {true, false}) {
    ScriptedWorkload w(1, [](uint64_t, uint32_t) { return Chat(7); });
    LoadOptions o = Closed(engine->port(), 1, 2);
    o.time_scale = 0.05;
    o.stream = stream;
    LoadRun run = MustRun(o, w);
    ASSERT_EQ(run.records.size(), 2u);
    ASSERT_EQ(Errors(run), 0u) << run.first_error;
    for (const RequestRecord& r : run.records) {
      EXPECT_FALSE(r.cached_tokens_known) << "stream " << stream;
      EXPECT_EQ(r.cached_tokens, 0u);
      EXPECT_GT(r.prompt_tokens, 100u);
    }
    report::RunResult result;
    report::Summarize(run.records, {}, result);
    EXPECT_TRUE(std::isnan(result.hit_rate)) << result.hit_rate;
  }
}

// A server without the emulator's header (a real vLLM): usage with prompt_tokens_details null
// gives no cached count; a number there, even 0, is one.
TEST(RunLoad, CachedCountOnlyFromANumber) {
  for (const std::string details : {"null", "{\"cached_tokens\":0}"}) {
    auto fake = StartFake(SseBehavior({"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
                                       "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":1,"
                                       "\"prompt_tokens_details\":" +
                                           details + "}}\n\n",
                                       "data: [DONE]\n\n"}));
    ASSERT_TRUE(fake);
    ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
    LoadRun run = MustRun(Closed(fake->port(), 1, 1), w);
    ASSERT_EQ(run.records.size(), 1u);
    ASSERT_EQ(Errors(run), 0u) << run.first_error;
    EXPECT_EQ(run.records[0].prompt_tokens, 11u);
    EXPECT_EQ(run.records[0].cached_tokens_known, details != "null") << details;
  }
}

// Non-streaming requests: TTFT is the whole response, usage and engine timing still read.
TEST(RunLoad, NonStreaming) {
  auto engine = StartEngine(0.05);
  ASSERT_TRUE(engine);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s, 8); });
  LoadOptions o = Closed(engine->port(), 2, 6);
  o.time_scale = 0.05;
  o.stream = false;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(run.records.size(), 6u);
  for (const RequestRecord& r : run.records) {
    ASSERT_FALSE(r.error) << run.first_error;
    EXPECT_DOUBLE_EQ(r.ttft_s, r.e2e_s);
    EXPECT_EQ(r.output_tokens, 8u);
    EXPECT_GT(r.prompt_tokens, 0u);
    EXPECT_GT(r.engine_ttft_s, 0);
  }
}

// The completions and native APIs go to their paths; native with a routing group sends the
// SageMaker header (the emulator answers both shapes).
TEST(RunLoad, CompletionsAndNativeApis) {
  auto fake = StartFake(SseBehavior({"data: {\"choices\":[{\"text\":\"x\"}]}\n\n", "data: [DONE]\n\n"}));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) {
    workload::Request r;
    r.api = s % 2 ? api::ApiKind::kNative : api::ApiKind::kCompletions;
    r.prompt = "hello";
    r.routing_group = "tenant-1";
    return r;
  });
  LoadRun run = MustRun(Closed(fake->port(), 1, 2), w);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  auto got = fake->received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].target, "/v1/completions");
  EXPECT_EQ(got[0].Header("x-amzn-sagemaker-prefix-aware-id"), "");
  EXPECT_EQ(got[1].target, "/invocations");
  EXPECT_EQ(got[1].Header("x-amzn-sagemaker-prefix-aware-id"), "tenant-1");
  EXPECT_EQ(got[1].Header("content-type"), "application/json");
}

// --api native: a chat workload's requests all go to /invocations with the chat body's bytes
// less the trailing prompt_cache_key, whose value travels in the routing-ID header instead;
// the default sends the same requests to the chat route with prompt_cache_key and no header.
TEST(RunLoad, NativeApiSendsTheChatBodyAndTheGroupHeader) {
  auto make = [](uint64_t s, uint32_t) {
    workload::Request r = Chat(s);
    r.routing_group = s % 2 ? "tenant-1" : "";
    return r;
  };
  for (const ApiChoice api : {ApiChoice::kNative, ApiChoice::kWorkload}) {
    auto fake = StartFake(SseBehavior(SseReply({"a"})));
    ASSERT_TRUE(fake);
    ScriptedWorkload w(1, make);
    LoadOptions o = Closed(fake->port(), 1, 4);
    o.api = api;
    LoadRun run = MustRun(o, w);
    ASSERT_EQ(Errors(run), 0u) << run.first_error;
    const auto got = fake->received();
    ASSERT_EQ(got.size(), 4u);
    for (uint64_t s = 0; s < got.size(); ++s) {
      const workload::Request sent = make(s, 0);
      const std::string chat = workload::RenderBody(sent, true, "llama");
      const std::string group = sent.routing_group;
      if (api == ApiChoice::kWorkload) {
        EXPECT_EQ(got[s].target, "/v1/chat/completions");
        EXPECT_EQ(got[s].body, chat);
        EXPECT_EQ(got[s].Header("x-amzn-sagemaker-prefix-aware-id"), "");
        continue;
      }
      EXPECT_EQ(got[s].target, "/invocations");
      EXPECT_EQ(got[s].Header("x-amzn-sagemaker-prefix-aware-id"), group) << s;
      EXPECT_EQ(got[s].Header("x-amzn-sagemaker-inference-component"), "");
      // The chat body's bytes: all of them, less `,"prompt_cache_key":"..."` before the brace.
      const std::string key = group.empty() ? "" : ",\"prompt_cache_key\":\"" + group + "\"";
      ASSERT_EQ(chat.substr(chat.size() - 1 - key.size()), key + "}");
      EXPECT_EQ(got[s].body, chat.substr(0, chat.size() - 1 - key.size()) + "}") << s;
      EXPECT_EQ(got[s].body.find("prompt_cache_key"), std::string::npos);
    }
  }
}

// --api native against the emulator, streamed and not: the chat-shaped body on /invocations
// streams when asked, TTFT is measured at the first content chunk (or is the whole response),
// usage and the engine's timing are read, and a repeated prompt is served from the cache.
TEST(RunLoad, NativeApiAgainstEmulatorStreamedOrNot) {
  auto engine = StartEngine(0.05);
  ASSERT_TRUE(engine);
  for (const bool stream : {true, false}) {
    ScriptedWorkload w(1, [](uint64_t, uint32_t) { return Chat(3, 8); });
    LoadOptions o = Closed(engine->port(), 1, 2);
    o.time_scale = 0.05;
    o.api = ApiChoice::kNative;
    o.stream = stream;
    LoadRun run = MustRun(o, w);
    ASSERT_EQ(run.records.size(), 2u);
    ASSERT_EQ(Errors(run), 0u) << run.first_error;
    for (const RequestRecord& r : run.records) {
      EXPECT_GT(r.ttft_s, 0) << stream;
      EXPECT_EQ(r.output_tokens, 8u) << stream;
      EXPECT_GT(r.prompt_tokens, 100u) << stream;
      EXPECT_GT(r.engine_ttft_s, 0) << stream;
      if (stream) {
        EXPECT_LT(r.ttft_s, r.e2e_s);
        EXPECT_GT(r.itl_mean_s, 0);
      } else {
        EXPECT_DOUBLE_EQ(r.ttft_s, r.e2e_s);
      }
    }
    EXPECT_GT(run.records[1].cached_tokens, run.records[1].prompt_tokens / 2) << stream;
  }
}

// Sessions get components from the seed (the same for every turn of a session), uniformly; no
// components, none.
TEST(ComponentFor, DeterministicPerSessionAndSpread) {
  LoadOptions o;
  EXPECT_EQ(ComponentFor(o, 0), -1);
  o.inference_components = {"ic-a", "ic-b", "ic-c"};
  o.seed = 5;
  LoadOptions other = o;
  other.seed = 6;
  int counts[3] = {0, 0, 0}, differ = 0;
  constexpr int kN = 30'000;
  for (uint64_t s = 0; s < kN; ++s) {
    const int32_t c = ComponentFor(o, s);
    ASSERT_GE(c, 0);
    ASSERT_LT(c, 3);
    ASSERT_EQ(c, ComponentFor(o, s));
    ++counts[c];
    differ += ComponentFor(other, s) != c;
  }
  for (int c : counts) EXPECT_NEAR(static_cast<double>(c) / kN, 1.0 / 3, 0.02);
  EXPECT_GT(differ, kN / 2);
}

// Every request carries its session's component in the inference component header, on either
// API; with no default model the body's model is the component, with one it stays; the run
// counts requests per component.
TEST(RunLoad, InferenceComponentHeaderAndModel) {
  for (const ApiChoice api : {ApiChoice::kNative, ApiChoice::kWorkload}) {
    for (const std::string default_model : {"", "llama"}) {
      auto fake = StartFake(SseBehavior(SseReply({"a"})));
      ASSERT_TRUE(fake);
      ScriptedWorkload w(2, [](uint64_t s, uint32_t turn) { return Chat(s * 10 + turn); });
      LoadOptions o = Closed(fake->port(), 1, 40);
      o.api = api;
      o.default_model = default_model;
      o.inference_components = {"ic-a", "ic-b"};
      o.seed = 3;
      LoadRun run = MustRun(o, w);
      ASSERT_EQ(Errors(run), 0u) << run.first_error;
      const auto got = fake->received();
      ASSERT_EQ(got.size(), 40u);
      std::vector<uint64_t> per(2, 0);
      for (size_t i = 0; i < got.size(); ++i) {
        // One user: request i is turn i % 2 of session i / 2.
        const int32_t c = ComponentFor(o, i / 2);
        ASSERT_GE(c, 0);
        const std::string& name = o.inference_components[static_cast<size_t>(c)];
        EXPECT_EQ(got[i].Header("x-amzn-sagemaker-inference-component"), name) << i;
        const std::string model = default_model.empty() ? name : default_model;
        EXPECT_NE(got[i].body.find("{\"model\":\"" + model + "\","), std::string::npos) << got[i].body.substr(0, 40);
        EXPECT_EQ(got[i].target, api == ApiChoice::kNative ? "/invocations" : "/v1/chat/completions");
        ++per[static_cast<size_t>(c)];
      }
      EXPECT_EQ(run.component_requests, per);
      EXPECT_GT(per[0], 0u);
      EXPECT_GT(per[1], 0u);
      EXPECT_EQ(run.component_errors, (std::vector<uint64_t>{0, 0}));
    }
  }
}

// Tenant classes: every request carries its session's class as x-prefix-router-priority and
// x-gateway-inference-fairness-id, its record the class; classes are drawn by share; a 429 is
// recorded refused (and failed), another error status is not.
TEST(RunLoad, TenantClassHeadersAndRefusals) {
  auto fake = StartFake(SseBehavior(SseReply({"a"})));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(2, [](uint64_t s, uint32_t turn) { return Chat(s * 10 + turn); });
  LoadOptions o = Closed(fake->port(), 1, 60);
  o.tenants = {{"interactive", 1, 1, 750}, {"bulk", -2, 3}};
  o.seed = 4;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  const auto got = fake->received();
  ASSERT_EQ(got.size(), 60u);
  std::vector<uint64_t> per(2, 0);
  for (size_t i = 0; i < got.size(); ++i) {
    const int32_t c = TenantFor(o, i / 2);  // one user: request i is turn i % 2 of session i / 2
    ASSERT_GE(c, 0);
    const workload::TenantClass& t = o.tenants[static_cast<size_t>(c)];
    EXPECT_EQ(got[i].Header("x-prefix-router-priority"), std::to_string(t.priority)) << i;
    EXPECT_EQ(got[i].Header("x-gateway-inference-fairness-id"), t.name) << i;
    EXPECT_EQ(got[i].Header("x-slo-ttft-ms"), t.ttft_objective_ms > 0 ? "750" : "") << i;
    EXPECT_EQ(run.records[i].tenant, c) << i;
    EXPECT_FALSE(run.records[i].refused);
    ++per[static_cast<size_t>(c)];
  }
  EXPECT_GT(per[0], 0u);
  EXPECT_GT(per[1], per[0]);  // three times the share

  for (const int status : {429, 503}) {
    pt::Behavior refusing;
    refusing.status = status;
    fake->SetBehavior(refusing);
    ScriptedWorkload again(1, [](uint64_t s, uint32_t) { return Chat(s); });
    LoadRun refused = MustRun(Closed(fake->port(), 1, 4), again);
    ASSERT_EQ(refused.records.size(), 4u);
    for (const RequestRecord& r : refused.records) {
      EXPECT_TRUE(r.error);
      EXPECT_EQ(r.refused, status == 429) << status;
      EXPECT_EQ(r.tenant, -1);  // no classes in this run
    }
  }
}

// Classes by share, per session, from the seed alone.
TEST(TenantFor, DeterministicPerSessionAndByShare) {
  LoadOptions o;
  EXPECT_EQ(TenantFor(o, 0), -1);
  o.tenants = {{"a", 0, 1}, {"b", 0, 4}};
  o.seed = 9;
  o.inference_components = {"ic-a", "ic-b"};
  int counts[2] = {0, 0}, same_as_component = 0;
  constexpr int kN = 20'000;
  for (uint64_t s = 0; s < kN; ++s) {
    const int32_t t = TenantFor(o, s);
    ASSERT_EQ(t, TenantFor(o, s));
    ++counts[t];
    same_as_component += t == ComponentFor(o, s);
  }
  EXPECT_NEAR(static_cast<double>(counts[0]) / kN, 0.2, 0.02);
  // Independent of the component draw: agreement as by chance (0.2 x 0.5 + 0.8 x 0.5).
  EXPECT_NEAR(static_cast<double>(same_as_component) / kN, 0.5, 0.03);
}

// Through a real gateway over two emulators serving one inference component each (discovered
// from their /v1/models): the component header (native API, whatever the body's model) or the
// component as `model` (chat) picks the pool, so every request lands on the engine serving its
// component, and the per-instance counts equal the per-component counts; without a component
// the default pool spans both engines.
TEST(RunLoad, InferenceComponentsPickTheGatewayPool) {
  auto e1 = StartEngine(0.05, "llama", true, {"ic-a"});
  auto e2 = StartEngine(0.05, "llama", true, {"ic-b"});
  ASSERT_TRUE(e1 && e2);
  gateway::GatewayConfig c;
  c.listen = "127.0.0.1:0";
  c.io_threads = 1;
  c.health.interval = 0;
  c.timeouts.drain = 1;
  c.routing.strategy = Strategy::kRoundRobin;
  c.instances.push_back(gateway::InstanceConfig{"e1", Url(e1->port())});
  c.instances.push_back(gateway::InstanceConfig{"e2", Url(e2->port())});
  ASSERT_TRUE(gateway::ValidateConfig(c).ok());
  auto gw = gateway::Gateway::Create(std::move(c));
  ASSERT_TRUE(gw.ok()) << gw.status().ToString();
  ASSERT_TRUE((*gw)->Start().ok());
  for (const ApiChoice api : {ApiChoice::kNative, ApiChoice::kWorkload}) {
    ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s, 4); });
    LoadOptions o = Closed((*gw)->port(), 2, 24);
    o.time_scale = 0.05;
    o.api = api;
    // Native: the body names the base model, which both engines serve: only the header can
    // pick the pool (and the engine serves the header's component).
    o.default_model = api == ApiChoice::kNative ? "llama" : "";
    o.inference_components = {"ic-a", "ic-b"};
    o.instance_names = {"e1", "e2"};
    LoadRun run = MustRun(o, w);
    ASSERT_EQ(Errors(run), 0u) << run.first_error;
    uint64_t per_instance[2] = {0, 0};
    for (const RequestRecord& r : run.records) {
      ASSERT_TRUE(r.instance == 0 || r.instance == 1) << r.instance;
      ++per_instance[r.instance];
    }
    EXPECT_EQ(per_instance[0], run.component_requests[0]) << "ic-a is served by e1 only";
    EXPECT_EQ(per_instance[1], run.component_requests[1]) << "ic-b is served by e2 only";
    EXPECT_GT(per_instance[0], 0u);
    EXPECT_GT(per_instance[1], 0u);
  }
  // Without components, round-robin over both engines (the default pool and the base model).
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s, 4); });
  LoadOptions o = Closed((*gw)->port(), 1, 4);
  o.time_scale = 0.05;
  o.api = ApiChoice::kNative;
  o.instance_names = {"e1", "e2"};
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  uint64_t per_instance[2] = {0, 0};
  for (const RequestRecord& r : run.records) ++per_instance[r.instance == 1];
  EXPECT_EQ(per_instance[0], 2u);
  EXPECT_EQ(per_instance[1], 2u);
  (*gw)->Stop();
}

// ListModels reads the emulator's /v1/models.
TEST(ListModels, FromEmulator) {
  auto engine = StartEngine(0.05, "tiny-llama");
  ASSERT_TRUE(engine);
  auto models = ListModels(Url(engine->port()), 2);
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_EQ(*models, std::vector<std::string>{"tiny-llama"});
  EXPECT_FALSE(ListModels("http://127.0.0.1:1", 1).ok());
}

// ------------------------------------------------------------------------------ open loop

// An open loop sends about rate x duration requests (Poisson: loose bounds), counting the
// turns of multi-turn sessions towards the rate, spread over the duration.
TEST(RunLoad, OpenLoopRateRoughlyRespected) {
  auto fake = StartFake(SseBehavior(SseReply({"a"})));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(2, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o;
  o.url = fake->url();
  o.mode = Mode::kOpen;
  o.rate_rps = 100;
  o.duration_s = 1.0;
  o.timeout_s = 5;
  o.seed = 3;
  const auto t0 = Clock::now();
  LoadRun run = MustRun(o, w);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(run.records.size(), 60u);
  EXPECT_LE(run.records.size(), 140u);
  EXPECT_EQ(Errors(run), 0u) << run.first_error;
  EXPECT_LT(wall, 3.0);
  // Starts cover the duration: some in each half.
  const auto early =
      std::count_if(run.records.begin(), run.records.end(), [](const RequestRecord& r) { return r.start_s < 0.5; });
  EXPECT_GT(early, 15);
  EXPECT_LT(static_cast<size_t>(early), run.records.size() - 15);
}

// Model time: at time_scale 0.1 the same model-time rate and duration take a tenth of the wall
// time and record start times in model seconds.
TEST(RunLoad, OpenLoopTimeScaled) {
  auto fake = StartFake(SseBehavior(SseReply({"a"})));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o;
  o.url = fake->url();
  o.mode = Mode::kOpen;
  o.rate_rps = 50;
  o.duration_s = 2.0;
  o.time_scale = 0.1;
  LoadRun run = MustRun(o, w);
  EXPECT_GE(run.records.size(), 55u);
  EXPECT_LE(run.records.size(), 150u);
  EXPECT_LT(run.wall_s, 1.5);
  double last = 0;
  for (const auto& r : run.records) last = std::max(last, r.start_s);
  EXPECT_GT(last, 1.0);  // model seconds
  EXPECT_LE(last, 2.2);
}

// Trace arrival times are honoured (scaled by trace_speed); a finite workload ends the run.
TEST(RunLoad, TraceArrivalsAndExhaustion) {
  auto fake = StartFake(SseBehavior(SseReply({"a"})));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  w.max_sessions = 5;
  w.arrival_s = [](uint64_t s) { return 0.1 * static_cast<double>(s); };
  LoadOptions o;
  o.url = fake->url();
  o.mode = Mode::kOpen;
  o.trace_speed = 2;
  o.duration_s = 30;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(run.records.size(), 5u);
  EXPECT_LT(run.wall_s, 2.0);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(run.records[i].start_s, 0.05 * static_cast<double>(i), 0.04) << i;
  }
}

// --------------------------------------------------------------------------- stream shapes

// SSE written one byte per write (CRLF line endings) parses exactly as whole events.
TEST(RunLoad, SseSplitIntoSingleBytes) {
  std::string stream;
  for (const auto& c : SseReply({"Hel", "lo", " world"})) stream += c;
  std::string crlf;
  for (char ch : stream) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
  std::vector<std::string> bytes;
  for (char ch : crlf) bytes.emplace_back(1, ch);
  auto fake = StartFake(SseBehavior(bytes));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(2, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadRun run = MustRun(Closed(fake->port(), 1, 2), w);
  ASSERT_EQ(run.records.size(), 2u);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  EXPECT_EQ(run.records[0].output_tokens, 3u);
  EXPECT_EQ(run.records[0].prompt_tokens, 11u);
  EXPECT_EQ(run.records[0].cached_tokens, 7u);
  EXPECT_GT(run.records[0].ttft_s, 0);
  ASSERT_EQ(w.replies_seen.size(), 2u);
  EXPECT_EQ(w.replies_seen[1], "Hello world");
}

// Several events per write (the whole stream in one piece) parse the same.
TEST(RunLoad, SseManyEventsPerWrite) {
  std::string stream;
  for (const auto& c : SseReply({"Hel", "lo"})) stream += c;
  auto fake = StartFake(SseBehavior({stream}));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(2, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadRun run = MustRun(Closed(fake->port(), 1, 2), w);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  EXPECT_EQ(w.replies_seen.at(1), "Hello");
  EXPECT_EQ(run.records[0].itl_mean_s, 0);  // both content chunks in one read
}

// ----------------------------------------------------------------------------------- errors

// A 500 answer is an error of kind status_500, recorded and not dropped; the loop goes on.
TEST(RunLoad, StatusErrorRecorded) {
  pt::Behavior b;
  b.status = 500;
  auto fake = StartFake(b);
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadRun run = MustRun(Closed(fake->port(), 2, 6), w);
  ASSERT_EQ(run.records.size(), 6u);
  EXPECT_EQ(Errors(run), 6u);
  EXPECT_EQ(run.errors_by_kind["status_500"], 6u);
  EXPECT_NE(run.first_error.find("500"), std::string::npos);
  for (const auto& r : run.records) EXPECT_LT(r.e2e_s, 0);
}

// Nothing listening: every request is a connect error, quickly.
TEST(RunLoad, ConnectionRefused) {
  uint16_t port;
  {
    auto fake = StartFake({});
    ASSERT_TRUE(fake);
    port = fake->port();
  }
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadRun run = MustRun(Closed(port, 2, 4), w);
  ASSERT_EQ(run.records.size(), 4u);
  EXPECT_EQ(run.errors_by_kind["connect"], 4u);
  EXPECT_LT(run.wall_s, 2.0);
}

// An upstream that never answers: each request times out at timeout_s; the run does not hang.
TEST(RunLoad, NeverAnswersTimesOut) {
  pt::Behavior b;
  b.fault = pt::Behavior::Fault::kHang;
  b.hang_for = 10s;
  auto fake = StartFake(b);
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed(fake->port(), 2, 2);
  o.timeout_s = 0.3;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(run.records.size(), 2u);
  EXPECT_EQ(run.errors_by_kind["timeout"], 2u);
  EXPECT_LT(run.wall_s, 2.0);
}

// A stream that ends (properly framed) without [DONE] is an error of kind no_done.
TEST(RunLoad, StreamWithoutDone) {
  auto fake = StartFake(SseBehavior(SseReply({"a", "b"}, /*done=*/false)));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadRun run = MustRun(Closed(fake->port(), 1, 2), w);
  EXPECT_EQ(run.errors_by_kind["no_done"], 2u);
}

// A connection cut mid-stream is an error of kind read.
TEST(RunLoad, StreamCutMidway) {
  pt::Behavior b = SseBehavior(SseReply({"a", "b", "c"}));
  b.fault = pt::Behavior::Fault::kCloseMidStream;
  b.fault_after_chunks = 2;
  auto fake = StartFake(b);
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadRun run = MustRun(Closed(fake->port(), 1, 3), w);
  ASSERT_EQ(run.records.size(), 3u);
  EXPECT_EQ(run.errors_by_kind["read"], 3u) << run.first_error;
}

// An SSE error event (the gateway's broken-upstream event) is an error of kind sse_error.
TEST(RunLoad, SseErrorEvent) {
  auto fake = StartFake(SseBehavior({"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
                                     "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n"}));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadRun run = MustRun(Closed(fake->port(), 1, 1), w);
  EXPECT_EQ(run.errors_by_kind["sse_error"], 1u);
  EXPECT_NE(run.first_error.find("boom"), std::string::npos);
}

// Bad options are InvalidArgument, before anything is sent.
TEST(RunLoad, InvalidOptions) {
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  auto code = [&](LoadOptions o) { return RunLoad(o, w).status().code(); };
  LoadOptions base = Closed(1, 1, 1);
  LoadOptions o = base;
  o.requests = 0;  // no stop condition
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = base;
  o.url = "https://127.0.0.1:8080";
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o.url = "http://127.0.0.1:99999";
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = base;
  o.concurrency = 0;
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = base;
  o.time_scale = 0;
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
  o = base;
  o.mode = Mode::kOpen;  // a generated workload without a rate
  EXPECT_EQ(code(o), StatusCode::kInvalidArgument);
}

// -------------------------------------------------------------------------- sessions, flags

// Multi-turn: each turn's session gets the previous turn's reply; after a failed turn, "".
TEST(RunLoad, MultiTurnPassesPreviousReply) {
  auto fake = StartFake(SseBehavior(SseReply({"Hello", " world"})));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(3, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadRun run = MustRun(Closed(fake->port(), 1, 3), w);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  EXPECT_EQ(w.replies_seen, (std::vector<std::string>{"", "Hello world", "Hello world"}));

  pt::Behavior failing;
  failing.status = 503;
  fake->SetBehavior(failing);
  ScriptedWorkload w2(2, [](uint64_t s, uint32_t) { return Chat(s); });
  MustRun(Closed(fake->port(), 1, 2), w2);
  EXPECT_EQ(w2.replies_seen, (std::vector<std::string>{"", ""}));
}

// Multi-turn against the emulator: the second turn resends the first reply and hits the cache
// for the whole first turn.
TEST(RunLoad, MultiTurnAgainstEmulatorHitsCache) {
  auto engine = StartEngine(0.05);
  ASSERT_TRUE(engine);
  ScriptedWorkload* self = nullptr;
  ScriptedWorkload w(2, [&self](uint64_t s, uint32_t turn) {
    workload::Request r = Chat(s);
    if (turn == 1) {
      r.messages.push_back({"assistant", self->replies_seen.back()});
      r.messages.push_back({"user", "And then?"});
    }
    return r;
  });
  self = &w;
  LoadOptions o = Closed(engine->port(), 1, 2);
  o.time_scale = 0.05;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  ASSERT_EQ(w.replies_seen.size(), 2u);
  EXPECT_FALSE(w.replies_seen[1].empty());
  EXPECT_GT(run.records[1].cached_tokens, run.records[0].prompt_tokens / 2);
}

// The first warmup_requests sent are recorded with counted = false, the rest counted.
TEST(RunLoad, WarmupFlag) {
  auto fake = StartFake(SseBehavior(SseReply({"a"})));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed(fake->port(), 1, 5);
  o.warmup_requests = 2;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(run.records.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(run.records[i].counted, i >= 2) << i;
}

// A duration limit stops sending in time and in-flight requests finish; progress reports the
// final counts.
TEST(RunLoad, DurationStopsAndProgressReports) {
  pt::Behavior b = SseBehavior(SseReply({"a"}));
  b.head_delay = 20ms;
  auto fake = StartFake(b);
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed(fake->port(), 2, 0);
  o.duration_s = 0.3;
  std::vector<std::array<uint64_t, 3>> calls;
  o.progress = [&](uint64_t done, uint64_t failed, uint64_t in_flight) { calls.push_back({done, failed, in_flight}); };
  LoadRun run = MustRun(o, w);
  EXPECT_GE(run.records.size(), 4u);
  EXPECT_LT(run.wall_s, 1.5);
  EXPECT_EQ(Errors(run), 0u) << run.first_error;
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back()[0], run.records.size());
  EXPECT_EQ(calls.back()[2], 0u);
}

// Think time between turns, with a server that closes idle connections sooner: the stale
// kept connection is replaced without an error.
TEST(RunLoad, StaleKeepAliveIsRetried) {
  DecisionServer server(50ms);
  ScriptedWorkload w(3, [](uint64_t s, uint32_t) { return Chat(s); });
  w.think_s = 0.15;
  LoadRun run = MustRun(Closed(server.port(), 1, 3), w);
  ASSERT_EQ(run.records.size(), 3u);
  EXPECT_EQ(Errors(run), 0u) << run.first_error;
}

// Decision headers: instance names map to indices (preset names first, new ones appended) and
// overflow / saturated decisions set overflow; Connection: close answers are handled.
TEST(RunLoad, DecisionHeadersMapToInstances) {
  DecisionServer server;
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed(server.port(), 1, 9);
  o.instance_names = {"c"};
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(run.records.size(), 9u);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  EXPECT_EQ(run.instance_names, (std::vector<std::string>{"c", "a", "b"}));
  const int32_t index_of[] = {1, 2, 0};  // a, b, c
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(run.records[i].instance, index_of[i % 3]) << i;
    EXPECT_EQ(run.records[i].overflow, i % 3 != 0) << i;
  }
}

// Through a real gateway over two emulators (round-robin): both instances get requests, by the
// names the gateway reports, and nothing is an overflow.
TEST(RunLoad, ThroughGatewayRoundRobin) {
  auto e1 = StartEngine(0.05);
  auto e2 = StartEngine(0.05);
  ASSERT_TRUE(e1 && e2);
  gateway::GatewayConfig c;
  c.listen = "127.0.0.1:0";
  c.io_threads = 1;
  c.health.interval = 0;
  c.timeouts.drain = 1;
  c.routing.strategy = Strategy::kRoundRobin;
  c.instances.push_back(gateway::InstanceConfig{"e1", Url(e1->port())});
  c.instances.push_back(gateway::InstanceConfig{"e2", Url(e2->port())});
  ASSERT_TRUE(gateway::ValidateConfig(c).ok());
  auto gw = gateway::Gateway::Create(std::move(c));
  ASSERT_TRUE(gw.ok()) << gw.status().ToString();
  ASSERT_TRUE((*gw)->Start().ok());
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed((*gw)->port(), 2, 10);
  o.time_scale = 0.05;
  o.instance_names = {"e2", "e1"};
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  EXPECT_EQ(run.instance_names, (std::vector<std::string>{"e2", "e1"}));
  int per[2] = {0, 0};
  for (const auto& r : run.records) {
    ASSERT_TRUE(r.instance == 0 || r.instance == 1);
    ++per[r.instance];
    EXPECT_FALSE(r.overflow);
    EXPECT_GT(r.engine_ttft_s, 0);
  }
  EXPECT_EQ(per[0], 5);
  EXPECT_EQ(per[1], 5);
  (*gw)->Stop();
}

// Several I/O threads: a closed loop spread over them completes every request.
TEST(RunLoad, SeveralThreads) {
  auto fake = StartFake(SseBehavior(SseReply({"a"})));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(2, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed(fake->port(), 8, 100);
  o.threads = 3;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(run.records.size(), 100u);
  EXPECT_EQ(Errors(run), 0u) << run.first_error;
}

// ------------------------------------------------------------------------- mixed traffic

// Polls `done` every 10 ms for up to `limit`; true once it holds.
bool Eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 3000ms) {
  const auto until = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// By default every request follows `stream` and none is abandoned (the existing behaviour).
TEST(PlanRequest, DefaultsKeepEveryRequestAlike) {
  LoadOptions o;
  for (bool stream : {true, false}) {
    o.stream = stream;
    for (uint64_t i = 0; i < 2000; ++i) {
      const RequestPlan p = PlanRequest(o, i);
      ASSERT_EQ(p.stream, stream) << i;
      ASSERT_EQ(p.abort, AbortPoint::kNone) << i;
    }
  }
}

// The fractions hold over many requests, the three abort points are equally likely and the
// abort positions spread over [0, 1).
TEST(PlanRequest, FractionsRespected) {
  LoadOptions o;
  o.seed = 7;
  o.stream_fraction = 0.3;
  o.abort_fraction = 0.1;
  constexpr uint64_t kN = 60'000;
  uint64_t streaming = 0, aborted = 0, by_point[4] = {0, 0, 0, 0}, late = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    const RequestPlan p = PlanRequest(o, i);
    streaming += p.stream;
    if (p.abort != AbortPoint::kNone) {
      ++aborted;
      ++by_point[static_cast<int>(p.abort)];
      ASSERT_GE(p.abort_at, 0);
      ASSERT_LT(p.abort_at, 1);
      late += p.abort_at >= 0.5;
    }
  }
  EXPECT_NEAR(static_cast<double>(streaming) / kN, 0.3, 0.01);
  EXPECT_NEAR(static_cast<double>(aborted) / kN, 0.1, 0.005);
  for (int k = 1; k <= 3; ++k) EXPECT_NEAR(static_cast<double>(by_point[k]) / aborted, 1.0 / 3, 0.03) << k;
  EXPECT_NEAR(static_cast<double>(late) / aborted, 0.5, 0.03);
  // Fractions 0 and 1 are exact.
  o.stream_fraction = 1;
  o.abort_fraction = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(PlanRequest(o, i).stream);
    ASSERT_EQ(PlanRequest(o, i).abort, AbortPoint::kNone);
  }
  o.stream_fraction = 0;
  o.abort_fraction = 1;
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_FALSE(PlanRequest(o, i).stream);
    ASSERT_NE(PlanRequest(o, i).abort, AbortPoint::kNone);
  }
}

// Plans are a function of the seed and the index: the same seed gives the same plans, another
// seed others, and changing the abort fraction leaves the stream choices alone.
TEST(PlanRequest, DeterministicBySeed) {
  LoadOptions a;
  a.seed = 11;
  a.stream_fraction = 0.5;
  a.abort_fraction = 0.2;
  LoadOptions b = a;
  LoadOptions other = a;
  other.seed = 12;
  LoadOptions fewer_aborts = a;
  fewer_aborts.abort_fraction = 0.05;
  int differ = 0;
  for (uint64_t i = 0; i < 5000; ++i) {
    const RequestPlan p = PlanRequest(a, i), q = PlanRequest(b, i);
    ASSERT_EQ(p.stream, q.stream);
    ASSERT_EQ(p.abort, q.abort);
    ASSERT_EQ(p.abort_at, q.abort_at);
    const RequestPlan r = PlanRequest(other, i);
    differ += r.stream != p.stream || r.abort != p.abort;
    const RequestPlan f = PlanRequest(fewer_aborts, i);
    ASSERT_EQ(f.stream, p.stream);
    if (f.abort != AbortPoint::kNone) {
      ASSERT_EQ(f.abort, p.abort);  // a subset of the same aborts
    }
  }
  EXPECT_GT(differ, 1000);
}

// Mixed streaming against the emulator: each request streams exactly when its plan says so
// (streamed ones have an inter-token latency, whole responses have TTFT = e2e), all succeed.
TEST(RunLoad, StreamFractionFollowsPlans) {
  auto engine = StartEngine(0.05);
  ASSERT_TRUE(engine);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s, 8); });
  LoadOptions o = Closed(engine->port(), 3, 30);
  o.time_scale = 0.05;
  o.stream_fraction = 0.5;
  o.seed = 5;
  LoadRun run = MustRun(o, w);
  ASSERT_EQ(run.records.size(), 30u);
  ASSERT_EQ(Errors(run), 0u) << run.first_error;
  EXPECT_EQ(run.aborted, 0u);
  int streamed = 0;
  for (size_t i = 0; i < run.records.size(); ++i) {
    const RequestRecord& r = run.records[i];
    if (PlanRequest(o, i).stream) {
      ++streamed;
      EXPECT_GT(r.itl_mean_s, 0) << i;
      EXPECT_LT(r.ttft_s, r.e2e_s) << i;
    } else {
      EXPECT_LT(r.itl_mean_s, 0) << i;
      EXPECT_DOUBLE_EQ(r.ttft_s, r.e2e_s) << i;
    }
    EXPECT_EQ(r.output_tokens, 8u) << i;
  }
  EXPECT_GT(streamed, 5);
  EXPECT_LT(streamed, 25);
}

// Every request abandoned, against a server slower than any client patience (head after
// 300 ms, then a piece every 20 ms): each request is abandoned exactly where its plan says,
// none is an error or a record, and the server got the whole request for all but the ones
// cut while sending, and saw every one of those clients go.
TEST(RunLoad, AbortsHappenWherePlanned) {
  pt::Behavior b = SseBehavior(SseReply({"a", "b", "c", "d", "e", "f"}));
  b.head_delay = 300ms;
  b.chunk_delay = 20ms;
  auto fake = StartFake(b);
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed(fake->port(), 8, 40);
  o.abort_fraction = 1;
  o.stream_fraction = 0.5;
  o.seed = 3;
  LoadRun run = MustRun(o, w);
  std::map<std::string, uint64_t> planned;
  for (uint64_t i = 0; i < 40; ++i) {
    const AbortPoint p = PlanRequest(o, i).abort;
    ++planned[p == AbortPoint::kSending ? "sending" : p == AbortPoint::kWaiting ? "waiting" : "receiving"];
  }
  EXPECT_TRUE(run.records.empty());
  EXPECT_TRUE(run.errors_by_kind.empty()) << run.first_error;
  EXPECT_EQ(run.aborted, 40u);
  EXPECT_EQ(run.aborted_by_point, planned);
  EXPECT_GT(planned["sending"], 0u);
  EXPECT_GT(planned["waiting"], 0u);
  EXPECT_GT(planned["receiving"], 0u);
  const int complete = static_cast<int>(40 - planned["sending"]);
  EXPECT_TRUE(Eventually([&] { return fake->requests() == complete && fake->in_progress() == 0; }))
      << fake->requests() << " requests, " << fake->in_progress() << " in progress";
  EXPECT_EQ(fake->aborted(), complete);
}

// Abandoned requests in a warm-up are counted apart; the counted ones keep their place.
TEST(RunLoad, AbortsDuringWarmupCountedApart) {
  auto fake = StartFake(SseBehavior(SseReply({"a"})));
  ASSERT_TRUE(fake);
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed(fake->port(), 1, 200);
  o.warmup_requests = 100;
  o.abort_fraction = 0.25;
  o.seed = 9;
  LoadRun run = MustRun(o, w);
  uint64_t planned_sending_warm = 0, planned_sending_counted = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    if (PlanRequest(o, i).abort == AbortPoint::kSending) ++(i < 100 ? planned_sending_warm : planned_sending_counted);
  }
  EXPECT_EQ(run.records.size() + run.aborted + run.aborted_warmup, 200u);
  EXPECT_EQ(run.aborted_by_point["sending"], planned_sending_counted);
  EXPECT_GE(run.aborted_warmup, planned_sending_warm);
  EXPECT_EQ(Errors(run), 0u) << run.first_error;
  const auto counted =
      std::count_if(run.records.begin(), run.records.end(), [](const RequestRecord& r) { return r.counted; });
  EXPECT_EQ(static_cast<uint64_t>(counted) + run.aborted, 100u);
}

// Through a real gateway over two emulators, a quarter of the requests abandoned at every
// point: the others all succeed, and once the clients are gone the gateway holds no request in
// flight on any instance (abandoned requests release their load count).
TEST(RunLoad, AbortsThroughGatewayLeaveNothingInFlight) {
  auto e1 = StartEngine(0.05);
  auto e2 = StartEngine(0.05);
  ASSERT_TRUE(e1 && e2);
  gateway::GatewayConfig c;
  c.listen = "127.0.0.1:0";
  c.io_threads = 2;
  c.health.interval = 0;
  c.timeouts.drain = 1;
  c.routing.strategy = Strategy::kPrefixAware;
  c.instances.push_back(gateway::InstanceConfig{"e1", Url(e1->port())});
  c.instances.push_back(gateway::InstanceConfig{"e2", Url(e2->port())});
  ASSERT_TRUE(gateway::ValidateConfig(c).ok());
  auto gw = gateway::Gateway::Create(std::move(c));
  ASSERT_TRUE(gw.ok()) << gw.status().ToString();
  ASSERT_TRUE((*gw)->Start().ok());
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s % 5); });
  LoadOptions o = Closed((*gw)->port(), 6, 120);
  o.time_scale = 0.05;
  o.stream_fraction = 0.5;
  o.abort_fraction = 0.25;
  LoadRun run = MustRun(o, w);
  EXPECT_EQ(Errors(run), 0u) << run.first_error;
  EXPECT_GT(run.aborted, 10u);
  EXPECT_EQ(run.records.size() + run.aborted, 120u);
  auto rs = (*gw)->routing();
  EXPECT_TRUE(Eventually([&] {
    return rs->fleet->state(0).in_flight.load() == 0 && rs->fleet->state(1).in_flight.load() == 0;
  })) << rs->fleet->state(0).in_flight.load()
      << " and " << rs->fleet->state(1).in_flight.load() << " in flight";
  (*gw)->Stop();
}

// Inference component names are checked: the service's rule, no repeats.
TEST(RunLoad, InvalidInferenceComponents) {
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"ic_a"}, std::vector<std::string>{"ic-a", "ic-a"}, std::vector<std::string>{""}}) {
    LoadOptions o = Closed(9, 1, 1);
    o.inference_components = bad;
    auto r = RunLoad(o, w);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("inference_components"), std::string::npos) << r.status().message();
  }
}

// Fractions outside [0, 1] are InvalidArgument.
TEST(RunLoad, InvalidFractions) {
  ScriptedWorkload w(1, [](uint64_t s, uint32_t) { return Chat(s); });
  LoadOptions o = Closed(1, 1, 1);
  o.stream_fraction = 1.5;
  EXPECT_EQ(RunLoad(o, w).status().code(), StatusCode::kInvalidArgument);
  o.stream_fraction = -1;
  o.abort_fraction = -0.1;
  EXPECT_EQ(RunLoad(o, w).status().code(), StatusCode::kInvalidArgument);
  o.abort_fraction = 2;
  EXPECT_EQ(RunLoad(o, w).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace prefix_router::loadgen
