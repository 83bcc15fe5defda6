// Token accounting end to end: the gateway reads the usage of every response it relays (whole
// JSON bodies and include_usage streams) and counts prompt, cached and completion tokens per
// instance, model and client; the engines' own prefix-cache counters are scraped beside them,
// and the status document shows both hit rates. Against engine emulators (in-process, time
// scaled), the two sources must agree; against FakeUpstreams, the labels stay bounded and the
// histograms say what they measured.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_server.h"
#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"
#include "gateway/status.h"
#include "testing/fake_upstream.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::gateway::testing {
namespace {

namespace json = boost::json;
using std::chrono::milliseconds;

// The sum of a family's samples whose label set contains every one of `labels` (0 when none).
double SumOf(const std::string& text, const std::string& family, const std::vector<std::string>& labels) {
  double sum = 0;
  for (size_t at = text.find(family + "{"); at != std::string::npos; at = text.find(family + "{", at + 1)) {
    if (at > 0 && text[at - 1] != '\n') continue;
    const std::string line = text.substr(at, text.find('\n', at) - at);
    bool all = true;
    for (const std::string& l : labels) all = all && line.find(l) != std::string::npos;
    if (all) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

std::unique_ptr<engine::EngineServer> StartEngine() {
  engine::EngineOptions eo;
  eo.host = "127.0.0.1";
  eo.port = 0;
  eo.profile = "tiny-test";
  eo.time_scale = 0.02;
  eo.enable_prompt_tokens_details = true;  // vLLM's --enable-prompt-tokens-details
  auto created = engine::EngineServer::Create(eo);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  if (!created.ok()) return nullptr;
  EXPECT_TRUE((*created)->Start().ok());
  return std::move(*created);
}

// A chat request over one of a few shared documents (about 300 tokens each, so that their
// blocks are cached and hit) with a question of its own.
std::string DocumentChat(int document, int question, bool stream) {
  std::string doc;
  for (int i = 0; i < 120; ++i) doc += "doc" + std::to_string(document) + " clause " + std::to_string(i) + ". ";
  std::string body = R"({"model":"llama","max_tokens":4,"messages":[{"role":"system","content":")" + doc +
                     R"("},{"role":"user","content":"question )" + std::to_string(question) + R"("}])";
  if (stream) body += R"(,"stream":true,"stream_options":{"include_usage":true})";
  return body + "}";
}

double Number(const json::value& v) { return v.is_null() ? -1 : v.to_number<double>(); }

// Mixed non-streaming and include_usage streaming requests through the gateway to three
// emulated engines: the gateway's token counters equal the engines' own prefix-cache counters
// (vllm:prefix_cache_queries_total, _hits_total) within 1%, instance by instance, and the status
// document's measured hit rate (over its window) matches the engines' hit rate of the same
// window within a point.
TEST(UsageTest, TokenCountersAgreeWithTheEngines) {
  QuietLogs();
  std::vector<std::unique_ptr<engine::EngineServer>> engines;
  GatewayConfig c;
  c.routing.strategy = Strategy::kCacheAware;
  c.listen = "127.0.0.1:0";
  c.io_threads = 2;
  c.health.interval = 0;
  c.timeouts.drain = 1;
  c.engine_metrics.enabled = true;
  c.engine_metrics.interval = 0.05;
  for (int i = 0; i < 3; ++i) {
    engines.push_back(StartEngine());
    ASSERT_NE(engines.back(), nullptr);
    c.instances.push_back(
        InstanceConfig{"e" + std::to_string(i), "http://127.0.0.1:" + std::to_string(engines.back()->port())});
    c.instances.back().models = {"llama"};
  }
  auto gw = StartGateway(c);
  ASSERT_NE(gw, nullptr);
  auto rs = gw->routing();
  // The window opens once every engine's counters have been read once.
  ASSERT_TRUE(pt::Eventually([&] {
    for (const auto& rt : rs->instances) {
      if (!std::isfinite(rt->stats->engine_prefix_queries.load())) return false;
    }
    return true;
  }));
  gw->SampleRequests(StatusClock::now());

  // Two clients, each alternating streaming and whole responses over 6 shared documents.
  std::vector<std::thread> clients;
  std::atomic<int> failures{0};
  for (int t = 0; t < 2; ++t) {
    clients.emplace_back([&, t] {
      for (int n = 0; n < 30; ++n) {
        const bool stream = (n + t) % 2 == 0;
        const auto r = pt::Post(gw->port(), kChat, DocumentChat((n * 7 + t) % 6, n * 2 + t, stream));
        if (r.status() != 200) ++failures;
        if (stream && r.body().find("\"usage\"") == std::string::npos) ++failures;
      }
    });
  }
  for (auto& th : clients) th.join();
  ASSERT_EQ(failures.load(), 0);

  // Each engine's own counters, and the gateway's scrape of them once it has caught up.
  const std::string metrics = gw->metrics().Render();
  double all_prompt = 0, all_cached = 0;
  for (size_t i = 0; i < engines.size(); ++i) {
    const std::string name = "e" + std::to_string(i);
    const uint16_t port = engines[i]->port();
    const double queries = pt::Metric(port, "vllm:prefix_cache_queries_total{model_name=\"llama\"}");
    const double hits = pt::Metric(port, "vllm:prefix_cache_hits_total{model_name=\"llama\"}");
    const std::string inst = "instance=\"" + name + "\"";
    const double cached = SumOf(metrics, "prefix_router_prompt_tokens_total", {inst, "cached=\"true\""});
    const double computed = SumOf(metrics, "prefix_router_prompt_tokens_total", {inst, "cached=\"false\""});
    ASSERT_GT(queries, 0) << name << " served nothing";
    EXPECT_NEAR(cached + computed, queries, 0.01 * queries) << name;
    EXPECT_NEAR(cached, hits, 0.01 * queries) << name;
    EXPECT_GT(SumOf(metrics, "prefix_router_completion_tokens_total", {inst}), 0) << name;
    all_prompt += cached + computed;
    all_cached += cached;
    // The figures compared, for the record (ctest -V shows them).
    std::printf("%s: gateway prompt %.0f cached %.0f; engine queries %.0f hits %.0f\n", name.c_str(), cached + computed,
                cached, queries, hits);
    ASSERT_TRUE(pt::Eventually([&] { return rs->instances[i]->stats->engine_prefix_queries.load() == queries; }))
        << name << ": the gateway's scrape never caught up";
  }
  EXPECT_GT(all_cached, 0.3 * all_prompt) << "shared documents should hit";
  // Every response carried usage: no stream went without include_usage.
  EXPECT_EQ(SumOf(metrics, "prefix_router_usage_responses_total", {"with_usage=\"true\""}), 60);
  EXPECT_EQ(SumOf(metrics, "prefix_router_usage_responses_total", {"with_usage=\"false\""}), 0);

  // The status document: measured and engine hit rates of the window, per instance, per pool,
  // for the whole gateway; the per-model view.
  const json::object s = StatusJson(*gw, StatusClock::now());
  for (const json::value& v : s.at("instances").as_array()) {
    const json::object& recent = v.at("recent").as_object();
    const double measured = Number(recent.at("hit_rate"));
    const double engine = Number(recent.at("engine_hit_rate"));
    ASSERT_GE(measured, 0) << v;
    ASSERT_GE(engine, 0) << v;
    EXPECT_NEAR(measured, engine, 0.01) << v;
    EXPECT_NEAR(Number(recent.at("prompt")), Number(recent.at("engine_prefix_cache_queries")),
                0.01 * Number(recent.at("prompt")));
    EXPECT_GE(Number(v.at("engine").at("hit_rate")), 0);
  }
  const json::object& gateway_recent = s.at("gateway").at("recent").as_object();
  EXPECT_NEAR(Number(gateway_recent.at("hit_rate")), all_cached / all_prompt, 1e-3);
  EXPECT_NEAR(Number(gateway_recent.at("hit_rate")), Number(gateway_recent.at("engine_hit_rate")), 0.01);
  std::printf("window: measured hit rate %.4f, engines' %.4f\n", Number(gateway_recent.at("hit_rate")),
              Number(gateway_recent.at("engine_hit_rate")));
  const json::object& pool = s.at("pools").as_array().at(0).as_object();
  EXPECT_EQ(pool.at("name").as_string(), "default");
  EXPECT_NEAR(Number(pool.at("recent").at("hit_rate")), Number(pool.at("recent").at("engine_hit_rate")), 0.01);
  const json::array& models = s.at("models").as_array();
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].at("name").as_string(), "llama");
  EXPECT_EQ(Number(models[0].at("tokens").at("prompt")), all_prompt);
  EXPECT_EQ(Number(models[0].at("tokens").at("responses_with_usage")), 60);
  EXPECT_GT(Number(models[0].at("ttft").at("samples")), 0);  // the streams' first bytes
}

// A body with usage, split into pieces (a plain chunked body), and an SSE stream.
pt::Behavior UsageBody(bool sse, bool with_usage) {
  pt::Behavior b;
  b.sse = sse;
  if (sse) {
    b.chunks = {"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"};
    if (with_usage) {
      b.chunks.push_back("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":5,");
      b.chunks.push_back("\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n");
    }
    b.chunks.push_back("data: [DONE]\n\n");
  } else {
    b.chunks = {"{\"choices\":[{\"message\":{\"content\":\"hi\"}}],\"us", "age\":{\"prompt_tokens\":100,",
                "\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":6", "4}}}"};
  }
  return b;
}

// Client label values come only from configured client keys (the tenant's name); a request's
// routing group or model name never creates one, unknown models count as "other"; streams
// without usage count in with_usage="false" and add no tokens.
TEST(UsageTest, LabelsAreBoundedAndStreamsWithoutUsageAreCounted) {
  QuietLogs();
  Fakes fakes = StartFakes({"a"});
  GatewayConfig c = ConfigFor(fakes);
  c.instances[0].models = {"m"};
  TempFile keys("usage_keys");
  keys.Write("team-red sk-red-123456\n");
  c.clients.enabled = true;
  c.clients.keys_file = keys.path();
  auto gw = StartGateway(c);
  ASSERT_NE(gw, nullptr);
  const pt::Headers red = {{"Authorization", "Bearer sk-red-123456"}, {std::string(kGroupHeader), "group-x"}};

  fakes[0]->SetBehavior(UsageBody(false, true));
  ASSERT_EQ(pt::Post(gw->port(), kChat, ChatBody("m", "q1"), red).status(), 200);
  fakes[0]->SetBehavior(UsageBody(true, true));
  ASSERT_EQ(pt::Post(gw->port(), kChat, ChatBody("m", "q2", {}, true), red).status(), 200);
  fakes[0]->SetBehavior(UsageBody(true, false));
  ASSERT_EQ(pt::Post(gw->port(), kChat, ChatBody("m", "q3", {}, true), red).status(), 200);
  // An unknown key is refused before anything is counted.
  EXPECT_EQ(pt::Post(gw->port(), kChat, ChatBody("m", "q4"), {{"Authorization", "Bearer sk-unknown"}}).status(), 401);

  const std::string metrics = gw->metrics().Render();
  const std::string labels = R"(instance="a",model="m",client="team-red")";
  EXPECT_EQ(pt::Metric(gw->port(), "prefix_router_prompt_tokens_total{" + labels + ",cached=\"true\"}"), 128);
  EXPECT_EQ(pt::Metric(gw->port(), "prefix_router_prompt_tokens_total{" + labels + ",cached=\"false\"}"), 72);
  EXPECT_EQ(pt::Metric(gw->port(), "prefix_router_completion_tokens_total{" + labels + "}"), 10);
  EXPECT_EQ(pt::Metric(gw->port(), "prefix_router_usage_responses_total{" + labels + ",with_usage=\"true\"}"), 2);
  EXPECT_EQ(pt::Metric(gw->port(), "prefix_router_usage_responses_total{" + labels + ",with_usage=\"false\"}"), 1);
  EXPECT_EQ(metrics.find("sk-unknown"), std::string::npos);
  EXPECT_EQ(metrics.find("group-x"), std::string::npos);

  // First-byte times say whether they measured a stream (TTFT) or a whole response, per
  // instance and per model.
  EXPECT_EQ(pt::Metric(gw->port(), R"(prefix_router_upstream_first_byte_seconds_count{instance="a",stream="true"})"),
            2);
  EXPECT_EQ(pt::Metric(gw->port(), R"(prefix_router_upstream_first_byte_seconds_count{instance="a",stream="false"})"),
            1);
  EXPECT_EQ(pt::Metric(gw->port(), R"(prefix_router_model_first_byte_seconds_count{model="m",stream="true"})"), 2);
  // Request durations are bucketed up to an hour.
  EXPECT_GE(pt::Metric(gw->port(), R"(prefix_router_request_duration_seconds_bucket{instance="a",le="3600"})"), 3);
}

// Without client keys the client label is empty, and a model no instance declares (served by
// an instance that serves every name) is counted as "other", never by the name sent.
TEST(UsageTest, UnknownModelsAreOther) {
  QuietLogs();
  Fakes fakes = StartFakes({"a"});
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  fakes[0]->SetBehavior(UsageBody(false, true));
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(pt::Post(gw->port(), kChat, ChatBody("made-up-" + std::to_string(i), "q")).status(), 200);
  }
  const std::string metrics = gw->metrics().Render();
  EXPECT_EQ(pt::Metric(gw->port(),
                       R"(prefix_router_prompt_tokens_total{instance="a",model="other",client="",cached="true"})"),
            192);
  EXPECT_EQ(metrics.find("made-up-"), std::string::npos);
  EXPECT_EQ(pt::Metric(gw->port(), R"(prefix_router_model_first_byte_seconds_count{model="other",stream="false"})"), 3);
  const json::object s = StatusJson(*gw, StatusClock::now());
  ASSERT_EQ(s.at("models").as_array().size(), 1u);
  EXPECT_EQ(s.at("models").as_array()[0].at("name").as_string(), "other");
  EXPECT_NEAR(Number(s.at("instances").as_array()[0].at("tokens").at("hit_rate")), 0.64, 1e-9);
}

}  // namespace
}  // namespace prefix_router::gateway::testing
