// An instance's `kv_events` settings: parsing, validation messages that name the field, and the
// gateway wiring (a configured stream is subscribed to and counted in /metrics).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "api/kv_event_decoder.h"
#include "gateway/config.h"
#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"
#include "testing/wait.h"
#include "zmq/socket.h"

namespace prefix_router::gateway {
namespace {

Status ValidateKv(const std::string& kv, GatewayConfig* out = nullptr) {
  return testing::ValidateYaml("instances: [{name: a, url: 'http://127.0.0.1:8001', kv_events: " + kv + "}]\n", out);
}

void ExpectInvalid(const Status& s, const std::string& field) {
  ASSERT_FALSE(s.ok()) << "expected an error naming " << field;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
}

// Every field is read; an instance without kv_events has none.
TEST(KvEventsConfig, Parsed) {
  GatewayConfig c;
  ASSERT_TRUE(ValidateKv("{endpoint: 'tcp://10.0.0.5:5557', topic: kv-events, "
                         "replay_endpoint: 'tcp://10.0.0.5:5558'}",
                         &c)
                  .ok());
  EXPECT_EQ(c.instances[0].kv_events, (KvEventsConfig{"tcp://10.0.0.5:5557", "kv-events", "tcp://10.0.0.5:5558"}));
  ASSERT_TRUE(ValidateKv("{endpoint: 'ipc:///run/vllm/kv'}", &c).ok());
  EXPECT_EQ(c.instances[0].kv_events.endpoint, "ipc:///run/vllm/kv");
  ASSERT_TRUE(testing::ValidateYaml("instances: [{url: 'http://127.0.0.1:8001'}]\n"
                                    "timeouts: {kv_events_silence: 5}\n",
                                    &c)
                  .ok());
  EXPECT_TRUE(c.instances[0].kv_events.endpoint.empty());
  EXPECT_EQ(c.timeouts.kv_events_silence, 5);
}

// Bad values name the field.
TEST(KvEventsConfig, ErrorsNameTheField) {
  ExpectInvalid(ValidateKv("{endpoint: 'http://x:1'}"), "instances[0].kv_events.endpoint");
  ExpectInvalid(ValidateKv("{endpoint: 'tcp://x'}"), "instances[0].kv_events.endpoint");
  ExpectInvalid(ValidateKv("{endpoint: 'tcp://x:0'}"), "instances[0].kv_events.endpoint");
  ExpectInvalid(ValidateKv("{endpoint: 'tcp://x:99999'}"), "instances[0].kv_events.endpoint");
  ExpectInvalid(ValidateKv("{endpoint: 'tcp://*:5557'}"), "instances[0].kv_events.endpoint");
  ExpectInvalid(ValidateKv("{endpoint: 'inproc://'}"), "instances[0].kv_events.endpoint");
  ExpectInvalid(ValidateKv("{endpoint: 'tcp://x:1', replay_endpoint: 'udp://x:2'}"),
                "instances[0].kv_events.replay_endpoint");
  ExpectInvalid(ValidateKv("{replay_endpoint: 'tcp://x:2'}"), "instances[0].kv_events.endpoint");
  ExpectInvalid(ValidateKv("{endpoint: 'tcp://x:1', topc: a}"), "topc");
  ExpectInvalid(ValidateKv("{endpoint: [1]}"), "instances[0].kv_events.endpoint");
  ExpectInvalid(testing::ValidateYaml("instances: [{url: 'http://127.0.0.1:8001'}]\n"
                                      "timeouts: {kv_events_silence: 0}\n"),
                "timeouts.kv_events_silence");
}

// Publishes one batch after another until the gateway counts one for instance "a".
bool CountedByGateway(zmq::Socket& pub, Gateway& g) {
  uint64_t seq = 0;
  KvEventBatch b;
  b.events.push_back(KvAllBlocksCleared{});
  return prefix_router::testing::Eventually(
      [&] {
        b.seq = seq;
        std::string payload = api::EncodeKvEventBatch(b, api::KvEventEncoding::kMap);
        (void)pub.Send({"", api::EncodeKvSeq(seq++), payload}, std::chrono::milliseconds(100));
        return g.metrics().Render().find("prefix_router_kv_event_batches_total{instance=\"a\"}") != std::string::npos;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(20));
}

GatewayConfig OneInstance(const std::string& kv_endpoint) {
  GatewayConfig c;
  c.listen = "127.0.0.1:0";
  c.io_threads = 1;
  c.health.interval = 0;
  c.timeouts.drain = 0;
  InstanceConfig ic{"a", "http://127.0.0.1:9"};
  ic.kv_events.endpoint = kv_endpoint;
  c.instances.push_back(ic);
  return c;
}

// A gateway with a kv_events instance subscribes to it: batches published there are counted
// under the instance's name in /metrics.
TEST(KvEventsConfig, GatewaySubscribes) {
  testing::QuietLogs();
  zmq::Context ctx;
  zmq::Socket pub = zmq::Socket::Open(ctx, zmq::SocketType::kPub).value();
  ASSERT_TRUE(pub.Bind("tcp://127.0.0.1:*").ok());
  auto g = testing::StartGateway(OneInstance(pub.LastEndpoint().value()));
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(CountedByGateway(pub, *g));
  g->Stop();
  g->Wait();
}

// A reload that gives an instance a kv_events endpoint starts the subscription.
TEST(KvEventsConfig, ReloadSubscribes) {
  testing::QuietLogs();
  zmq::Context ctx;
  zmq::Socket pub = zmq::Socket::Open(ctx, zmq::SocketType::kPub).value();
  ASSERT_TRUE(pub.Bind("tcp://127.0.0.1:*").ok());
  auto g = testing::StartGateway(OneInstance(""));
  ASSERT_NE(g, nullptr);
  GatewayConfig next = OneInstance(pub.LastEndpoint().value());
  ASSERT_TRUE(ValidateConfig(next).ok());
  g->Reload(next, "test");
  EXPECT_TRUE(CountedByGateway(pub, *g));
  g->Stop();
  g->Wait();
}

}  // namespace
}  // namespace prefix_router::gateway
