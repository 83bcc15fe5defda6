// The engine emulator's KV event stream on loopback: a SUB socket in the test receives the
// batches the publisher (alone, or inside a running EngineServer) sends, decodes them with the
// gateway's decoder, and a DEALER asks the replay socket for the buffered ones.
//
// PUB drops what it sends before a subscription has arrived, so each test first publishes until
// the subscriber sees a batch, drains, and then checks the batches that follow (bounded waits).
#include "engine/kv_event_publisher.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "engine/engine_server.h"
#include "gateway/kv_events.h"
#include "gateway/prompt_tokens.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::engine {
namespace {

using std::chrono::milliseconds;
using zmq::Message;
using zmq::Socket;
using zmq::SocketType;

const bool kQuietLogs = [] {
  spdlog::set_level(spdlog::level::warn);
  return true;
}();

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

KvEventBatch DecodeOrFail(const Message& m) {
  EXPECT_EQ(m.size(), 3u);
  if (m.size() != 3) return {};
  Result<KvEventBatch> b = api::DecodeKvEventMessage(Bytes(m[1]), Bytes(m[2]));
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? *b : KvEventBatch{};
}

Socket Subscriber(zmq::Context& ctx, const std::string& endpoint, const std::string& topic) {
  Socket sub = Socket::Open(ctx, SocketType::kSub).value();
  EXPECT_TRUE(sub.Subscribe(topic).ok());
  EXPECT_TRUE(sub.Connect(endpoint).ok());
  return sub;
}

// Calls `publish_one` until `sub` receives something (at most 10 s), then drains what is in
// flight. Returns false if nothing ever arrived.
bool Join(Socket& sub, const std::function<void()>& publish_one) {
  bool joined = false;
  for (int i = 0; i < 500 && !joined; ++i) {
    publish_one();
    joined = sub.Recv(milliseconds(20)).ok();
  }
  while (sub.Recv(milliseconds(200)).ok()) {}
  return joined;
}

// Asks the replay socket for the batches from `start`; the reply ends with the 0xFF x 8 marker.
std::vector<KvEventBatch> Replay(zmq::Context& ctx, const std::string& endpoint, uint64_t start, bool* saw_end) {
  Socket dealer = Socket::Open(ctx, SocketType::kDealer).value();
  EXPECT_TRUE(dealer.Connect(endpoint).ok());
  EXPECT_TRUE(dealer.Send({"", api::EncodeKvSeq(start)}, milliseconds(2000)).ok());
  std::vector<KvEventBatch> out;
  *saw_end = false;
  for (;;) {
    Result<Message> m = dealer.Recv(milliseconds(5000));
    if (!m.ok()) {
      ADD_FAILURE() << "replay: " << m.status().ToString();
      break;
    }
    EXPECT_EQ(m->size(), 3u);
    if (m->size() != 3) break;
    EXPECT_EQ((*m)[0], "");
    if ((*m)[1] == std::string(8, '\xff')) {
      EXPECT_EQ((*m)[2], "");
      *saw_end = true;
      break;
    }
    out.push_back(DecodeOrFail({"", (*m)[1], (*m)[2]}));
  }
  return out;
}

KvEventsOptions LoopbackOptions(bool replay) {
  KvEventsOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.topic = "kv-events";
  if (replay) o.replay_endpoint = "tcp://127.0.0.1:*";
  return o;
}

// vLLM's bind-or-connect rule.
TEST(KvEventPublisher, BindsAsVllmDoes) {
  EXPECT_TRUE(KvEndpointBinds("tcp://*:5557"));
  EXPECT_TRUE(KvEndpointBinds("tcp://[::]:5557"));
  EXPECT_TRUE(KvEndpointBinds("ipc:///tmp/kv"));
  EXPECT_TRUE(KvEndpointBinds("inproc://kv"));
  EXPECT_FALSE(KvEndpointBinds("tcp://127.0.0.1:5557"));
  EXPECT_FALSE(KvEndpointBinds("tcp://gateway:5557"));
}

// Bad settings name their flag.
TEST(KvEventPublisher, OptionsValidated) {
  KvEventsOptions o;
  o.replay_endpoint = "tcp://*:1";
  EXPECT_NE(o.Validate().message().find("--kv-events-replay-endpoint"), std::string::npos);
  o = LoopbackOptions(false);
  o.buffer_steps = 0;
  EXPECT_NE(o.Validate().message().find("--kv-events-buffer-steps"), std::string::npos);
  o = LoopbackOptions(false);
  o.endpoint = "tcp://*:notaport";
  auto p = KvEventPublisher::Create(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--kv-events-endpoint"), std::string::npos);
}

// One Flush is one message: the topic, the seq (+1 per batch) and a batch in which a chain of
// stored blocks is one BlockStored, consecutive removals one BlockRemoved; nothing when empty.
TEST(KvEventPublisher, BatchesPerFlushWithSeqAndMergedEvents) {
  for (api::KvEventEncoding enc : {api::KvEventEncoding::kMap, api::KvEventEncoding::kArray}) {
    KvEventsOptions o = LoopbackOptions(false);
    o.encoding = enc;
    auto p = KvEventPublisher::Create(o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    KvEventPublisher& pub = **p;
    zmq::Context ctx;
    Socket sub = Subscriber(ctx, pub.endpoint(), "kv-events");
    ASSERT_TRUE(Join(sub, [&] {
      pub.OnAllCleared();
      pub.OnAllCleared();
      pub.Flush();
    }));
    const uint64_t seq0 = pub.batches_published();
    const uint32_t t1[] = {1, 2}, t2[] = {3, 4}, t3[] = {5, 6};
    pub.OnBlockStored(11, engine_model::kRootParentHash, t1, "");
    pub.OnBlockStored(12, 11, t2, "");
    pub.OnBlockStored(13, 99, t3, "lora");  // another chain: a second event
    pub.OnBlockRemoved(7);
    pub.OnBlockRemoved(8);
    pub.Flush();
    pub.Flush();  // nothing new: no message
    pub.OnAllCleared();
    pub.Flush();
    Result<Message> m1 = sub.Recv(milliseconds(5000));
    ASSERT_TRUE(m1.ok());
    EXPECT_EQ((*m1)[0], "kv-events");
    KvEventBatch b1 = DecodeOrFail(*m1);
    EXPECT_EQ(b1.seq, seq0);
    EXPECT_EQ(b1.data_parallel_rank, 0);
    EXPECT_GT(b1.ts, 1.7e9);  // Unix seconds
    ASSERT_EQ(b1.events.size(), 3u);
    EXPECT_EQ(std::get<KvBlockStored>(b1.events[0]),
              (KvBlockStored{{11, 12}, std::nullopt, {1, 2, 3, 4}, 2, "", "GPU"}));
    EXPECT_EQ(std::get<KvBlockStored>(b1.events[1]), (KvBlockStored{{13}, 99, {5, 6}, 2, "lora", "GPU"}));
    EXPECT_EQ(std::get<KvBlockRemoved>(b1.events[2]), (KvBlockRemoved{{7, 8}, "GPU"}));
    Result<Message> m2 = sub.Recv(milliseconds(5000));
    ASSERT_TRUE(m2.ok());
    KvEventBatch b2 = DecodeOrFail(*m2);
    EXPECT_EQ(b2.seq, seq0 + 1);
    ASSERT_EQ(b2.events.size(), 1u);
    EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(b2.events[0]));
    EXPECT_EQ(sub.Recv(milliseconds(100)).status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(pub.batches_published(), seq0 + 2);
  }
}

// The replay socket answers [seq, payload] for each buffered batch from the start seq, then the
// end marker; the buffer keeps the last buffer_steps batches.
TEST(KvEventPublisher, ReplayReturnsBufferedBatchesAndEndMarker) {
  KvEventsOptions o = LoopbackOptions(true);
  o.buffer_steps = 3;
  auto p = KvEventPublisher::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  KvEventPublisher& pub = **p;
  for (uint64_t i = 0; i < 5; ++i) {
    pub.OnBlockRemoved(100 + i);
    pub.Flush();
  }
  zmq::Context ctx;
  bool end = false;
  std::vector<KvEventBatch> all = Replay(ctx, pub.replay_endpoint(), 0, &end);
  EXPECT_TRUE(end);
  ASSERT_EQ(all.size(), 3u);  // 0 and 1 fell out of the buffer
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(all[i].seq, 2 + i);
    EXPECT_EQ(std::get<KvBlockRemoved>(all[i].events[0]).block_hashes[0], 102 + i);
  }
  std::vector<KvEventBatch> tail = Replay(ctx, pub.replay_endpoint(), 4, &end);
  EXPECT_TRUE(end);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].seq, 4u);
  EXPECT_TRUE(Replay(ctx, pub.replay_endpoint(), 5, &end).empty());
  EXPECT_TRUE(end);
  // A request of the wrong shape is ignored; the socket still serves the next one.
  Socket dealer = Socket::Open(ctx, SocketType::kDealer).value();
  ASSERT_TRUE(dealer.Connect(pub.replay_endpoint()).ok());
  ASSERT_TRUE(dealer.Send({"", "short"}, milliseconds(1000)).ok());
  EXPECT_FALSE(dealer.Recv(milliseconds(200)).ok());
  EXPECT_EQ(Replay(ctx, pub.replay_endpoint(), 3, &end).size(), 2u);
  EXPECT_EQ(pub.replay_requests(), 4u);
}

std::string Words(size_t n, uint64_t salt) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ' ';
    uint64_t h = (salt * 1000003 + i) * 0x9E3779B97F4A7C15ULL;
    out += static_cast<char>('a' + (h >> 59) % 26);
    out += static_cast<char>('a' + (h >> 40) % 26);
  }
  return out;
}

int PostCompletion(uint16_t port, const std::string& prompt) {
  auto r = testing::Post(port, "/v1/completions", R"({"model":"llama","max_tokens":1,"prompt":")" + prompt + R"("})");
  return r.status();
}

// A running engine publishes BlockStored for the blocks a request computed, seq increments per
// step, BlockRemoved once a small cache evicts, and the replay socket hands back every batch.
TEST(KvEventPublisher, EnginePublishesStoredRemovedAndReplays) {
  EngineOptions eo;
  eo.host = "127.0.0.1";
  eo.port = 0;
  eo.profile = "tiny-test";
  eo.time_scale = 0.01;
  eo.capacity_blocks = 24;  // 384 tokens: a few 200-token prompts evict
  eo.kv_events = LoopbackOptions(true);
  eo.kv_events.encoding = api::KvEventEncoding::kArray;
  auto created = EngineServer::Create(eo);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EngineServer& engine = **created;
  ASSERT_TRUE(engine.Start().ok());
  const KvEventPublisher* pub = engine.kv_publisher();
  ASSERT_NE(pub, nullptr);
  zmq::Context ctx;
  Socket sub = Subscriber(ctx, pub->endpoint(), "kv-events");
  uint64_t salt = 1000;
  ASSERT_TRUE(Join(sub, [&] { ASSERT_EQ(PostCompletion(engine.port(), Words(40, salt++)), 200); }));
  const uint64_t first = pub->batches_published();

  std::vector<KvEventBatch> got;
  std::vector<uint32_t> stored_tokens;
  bool removed = false;
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(PostCompletion(engine.port(), Words(200, i)), 200);
  }
  const uint64_t last = pub->batches_published();
  ASSERT_GT(last, first);
  while (got.size() < last - first) {
    Result<Message> m = sub.Recv(milliseconds(5000));
    ASSERT_TRUE(m.ok()) << "after " << got.size() << " of " << last - first;
    got.push_back(DecodeOrFail(*m));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].seq, first + i);
    for (const KvEvent& e : got[i].events) {
      if (const auto* s = std::get_if<KvBlockStored>(&e)) {
        EXPECT_EQ(s->block_size, 16u);
        EXPECT_EQ(s->token_ids.size(), s->block_hashes.size() * 16);
        if (stored_tokens.empty()) stored_tokens = s->token_ids;
      }
      if (std::holds_alternative<KvBlockRemoved>(e)) removed = true;
    }
  }
  EXPECT_FALSE(stored_tokens.empty());
  EXPECT_TRUE(removed);

  bool end = false;
  std::vector<KvEventBatch> replayed = Replay(ctx, pub->replay_endpoint(), 0, &end);
  EXPECT_TRUE(end);
  ASSERT_EQ(replayed.size(), last);
  for (uint64_t i = 0; i < last; ++i) EXPECT_EQ(replayed[i].seq, i);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(replayed[first + i], got[i]);
  engine.Stop();
  engine.Wait();
}

// Records the BlockStored token ids that reach a policy through the gateway's subscriber.
class StoredTokens final : public Policy {
 public:
  Result<Decision> Pick(const RouteRequest&, const FleetSnapshot&, Rng&) const override {
    return Status::Unavailable("not a router");
  }
  std::string_view name() const override { return "stored-tokens"; }
  void OnKvEvents(uint64_t, const KvEventBatch& batch) override {
    std::lock_guard lock(mu_);
    for (const KvEvent& e : batch.events) {
      if (const auto* s = std::get_if<KvBlockStored>(&e)) {
        stored_.push_back(s->token_ids);
      }
    }
  }
  std::vector<std::vector<uint32_t>> stored() const {
    std::lock_guard lock(mu_);
    return stored_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::vector<uint32_t>> stored_;
};

// The whole chain: the emulator publishes, the gateway's subscriber decodes and feeds a policy,
// and the blocks it reports hold the very tokens the gateway computes for the request
// (gateway/prompt_tokens.h), block by block from the prompt's start.
TEST(KvEventPublisher, GatewaySeesTheTokensItComputes) {
  EngineOptions eo;
  eo.host = "127.0.0.1";
  eo.port = 0;
  eo.profile = "tiny-test";
  eo.time_scale = 0.01;
  eo.kv_events = LoopbackOptions(false);
  auto created = EngineServer::Create(eo);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EngineServer& engine = **created;
  ASSERT_TRUE(engine.Start().ok());
  auto policy = std::make_shared<StoredTokens>();
  gateway::KvSubscriberOptions so;
  so.poll_interval = milliseconds(10);
  gateway::KvEventSubscriber sub(so, nullptr);
  gateway::KvSource src;
  src.instance_seed = 1;
  src.instance = "engine";
  src.config.endpoint = engine.kv_publisher()->endpoint();
  src.config.topic = "kv-events";
  src.policies = {policy};
  sub.SetSources({src});
  sub.Start();
  // Requests until the subscription is in place (each one stores new blocks).
  uint64_t salt = 1;
  ASSERT_TRUE(prefix_router::testing::Eventually(
      [&] {
        EXPECT_EQ(PostCompletion(engine.port(), Words(40, salt++)), 200);
        return !policy->stored().empty();
      },
      std::chrono::seconds(10), milliseconds(20)));
  const size_t before = policy->stored().size();
  const std::string body = R"({"model":"llama","max_tokens":1,"messages":[{"role":"system","content":")" +
                           Words(90, 77) + R"("},{"role":"user","content":"and then"}]})";
  ASSERT_EQ(testing::Post(engine.port(), "/v1/chat/completions", body).status(), 200);
  Result<std::vector<uint32_t>> tokens = gateway::EnginePromptTokens(api::ApiKind::kChatCompletions, body);
  ASSERT_TRUE(tokens.ok());
  ASSERT_GE(tokens->size(), 64u);
  // The request's blocks, in the order stored. A warm-up request's last blocks may still arrive
  // after `before` (the engine stores a block once decoding fills it): events that do not
  // continue this request's tokens where `seen` ends belong to another request and are skipped.
  const auto seen_of_request = [&] {
    std::vector<uint32_t> seen;
    auto stored = policy->stored();
    for (size_t i = before; i < stored.size(); ++i) {
      const std::vector<uint32_t>& t = stored[i];
      if (seen.size() + t.size() <= tokens->size() &&
          std::equal(t.begin(), t.end(), tokens->begin() + static_cast<std::ptrdiff_t>(seen.size()))) {
        seen.insert(seen.end(), t.begin(), t.end());
      }
    }
    return seen;
  };
  const size_t full = tokens->size() / 16 * 16;
  // Events travel on their own socket: wait (bounded) until the prompt's blocks have arrived.
  (void)prefix_router::testing::Eventually([&] { return seen_of_request().size() >= full - 16; },
                                           std::chrono::seconds(10));
  const std::vector<uint32_t> seen = seen_of_request();
  // Every full block of the prompt but the last (which may wait for the decode step) was
  // reported, from the prompt's first token on, holding exactly the tokens the gateway computes.
  EXPECT_GE(seen.size(), full - 16) << "of " << tokens->size() << " prompt tokens";
  sub.Stop();
  engine.Stop();
  engine.Wait();
}

}  // namespace
}  // namespace prefix_router::engine
