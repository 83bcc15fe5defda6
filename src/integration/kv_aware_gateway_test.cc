// kv-aware end to end on loopback: engine emulators publish their KV events (ZMQ), the gateway
// subscribes, and a kv-aware pool routes a request to the engine that reports holding its
// prefix, even when the gateway never sent that prefix anywhere (it reached the engine
// directly), which no view of the gateway's own traffic (cache-aware, prefix-aware) can know.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_server.h"
#include "engine/kv_event_publisher.h"
#include "gateway/gateway.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::engine {
namespace {

using std::chrono::milliseconds;

// n two-letter words from `salt`: a prompt of about n tokens that no other salt shares.
std::string Words(size_t n, uint64_t salt) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ' ';
    const uint64_t h = (salt * 1000003 + i) * 0x9E3779B97F4A7C15ULL;
    out += static_cast<char>('a' + (h >> 59) % 26);
    out += static_cast<char>('a' + (h >> 40) % 26);
  }
  return out;
}

std::string ChatBody(const std::string& document, const std::string& question) {
  return R"({"model":"llama","max_tokens":1,"messages":[{"role":"system","content":")" + document +
         R"("},{"role":"user","content":")" + question + R"("}]})";
}

std::unique_ptr<EngineServer> StartEngine() {
  EngineOptions eo;
  eo.host = "127.0.0.1";
  eo.port = 0;
  eo.profile = "tiny-test";
  eo.time_scale = 0.01;
  eo.kv_events.endpoint = "tcp://127.0.0.1:*";
  eo.kv_events.topic = "kv-events";
  auto created = EngineServer::Create(eo);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  if (!created.ok()) return nullptr;
  EXPECT_TRUE((*created)->Start().ok());
  return std::move(*created);
}

double BatchesSeen(gateway::Gateway& g, const std::string& instance) {
  const std::string text = g.metrics().Render();
  const std::string series = "prefix_router_kv_event_batches_total{instance=\"" + instance + "\"} ";
  const size_t at = text.find(series);
  return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size()));
}

// The sum of a counter family's series whose labels contain `labels` (0 when none).
double CounterSum(gateway::Gateway& g, const std::string& family, const std::string& labels) {
  const std::string text = g.metrics().Render();
  double sum = 0;
  for (size_t at = text.find(family + "{"); at != std::string::npos; at = text.find(family + "{", at + 1)) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line.find(labels) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

// Each document is first sent straight to one engine (not through the gateway); the same
// document with another question, sent through the gateway, then lands on that engine, for
// every engine in turn. Under cache-aware or prefix-aware the gateway could only guess. With
// `tokenizer`: engine, the prompt tokens come from the emulators' /tokenize, once per request.
void FollowsTheBlocksEnginesReport(TokenizerSource tokenizer) {
  spdlog::set_level(spdlog::level::warn);
  std::vector<std::unique_ptr<EngineServer>> engines;
  for (int i = 0; i < 3; ++i) {
    engines.push_back(StartEngine());
    ASSERT_NE(engines.back(), nullptr);
  }
  gateway::GatewayConfig config;
  config.listen = "127.0.0.1:0";
  config.io_threads = 2;
  config.health.interval = 0;
  config.timeouts.drain = 1;
  config.decision_headers = true;
  config.routing.strategy = Strategy::kKvAware;
  config.routing.tokenizer = tokenizer;
  const std::vector<std::string> names = {"e0", "e1", "e2"};
  for (int i = 0; i < 3; ++i) {
    gateway::InstanceConfig ic{names[i], "http://127.0.0.1:" + std::to_string(engines[i]->port())};
    ic.kv_events.endpoint = engines[i]->kv_publisher()->endpoint();
    ic.kv_events.topic = "kv-events";
    config.instances.push_back(ic);
  }
  ASSERT_TRUE(gateway::ValidateConfig(config).ok());
  auto created = gateway::Gateway::Create(config);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  gateway::Gateway& gw = **created;
  ASSERT_TRUE(gw.Start().ok());

  // Until every subscription is joined: direct requests make each engine publish.
  uint64_t salt = 1;
  ASSERT_TRUE(prefix_router::testing::Eventually(
      [&] {
        for (int i = 0; i < 3; ++i) {
          if (BatchesSeen(gw, names[i]) > 0) continue;
          EXPECT_EQ(testing::Post(engines[i]->port(), "/v1/chat/completions", ChatBody(Words(40, 900 + salt++), "warm"))
                        .status(),
                    200);
        }
        return BatchesSeen(gw, names[0]) > 0 && BatchesSeen(gw, names[1]) > 0 && BatchesSeen(gw, names[2]) > 0;
      },
      std::chrono::seconds(15), milliseconds(50)));

  for (int round = 0; round < 6; ++round) {
    const int target = round % 3;
    const std::string document = Words(300, 5000 + round);  // about 300 tokens: many blocks
    const double before = BatchesSeen(gw, names[target]);
    const uint64_t published_before = engines[target]->kv_publisher()->batches_published();
    ASSERT_EQ(
        testing::Post(engines[target]->port(), "/v1/chat/completions", ChatBody(document, "first question")).status(),
        200);
    // Every batch the engine published for it has reached the gateway (joined: none is dropped).
    const uint64_t published = engines[target]->kv_publisher()->batches_published() - published_before;
    ASSERT_GT(published, 0u);
    ASSERT_TRUE(prefix_router::testing::Eventually(
        [&] { return BatchesSeen(gw, names[target]) >= before + static_cast<double>(published); },
        std::chrono::seconds(10)));
    const auto r = testing::Post(gw.port(), "/v1/chat/completions", ChatBody(document, "second question"));
    ASSERT_EQ(r.status(), 200) << r.body();
    EXPECT_EQ(r.Header("x-prefix-router-instance"), names[target]) << "round " << round;
    EXPECT_EQ(r.Header("x-prefix-router-decision"), "affinity") << "round " << round;
  }
  const double asked = CounterSum(gw, "prefix_router_tokenize_requests_total", "outcome=\"ok\"");
  EXPECT_EQ(asked, tokenizer == TokenizerSource::kEngine ? 6 : 0);
  EXPECT_EQ(CounterSum(gw, "prefix_router_tokenize_requests_total", "outcome=\"failed\""), 0);
  gw.Stop();
  for (auto& e : engines) {
    e->Stop();
    e->Wait();
  }
}

TEST(KvAwareGatewayTest, FollowsTheBlocksEnginesReport) { FollowsTheBlocksEnginesReport(TokenizerSource::kLocal); }

// The same through the engines' /tokenize (what a vLLM fleet needs): the same decisions.
TEST(KvAwareGatewayTest, FollowsTheBlocksWithTheEnginesTokenizer) {
  FollowsTheBlocksEnginesReport(TokenizerSource::kEngine);
}

}  // namespace
}  // namespace prefix_router::engine
