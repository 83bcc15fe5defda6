// The gateway's KV event subscriber on loopback: a test publisher (a PUB socket and a ROUTER
// replay socket, both on 127.0.0.1 ephemeral ports) sends vLLM-shaped messages; a recording
// Policy checks what reaches the policy, in which order, and when the stream is declared lost.
//
// PUB drops messages sent before the subscription arrives, so each test first publishes until
// the subscriber has delivered one batch (bounded), then checks what follows.
#include "gateway/kv_events.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/kv_event_decoder.h"
#include "gateway/clock.h"
#include "testing/wait.h"
#include "zmq/socket.h"

namespace prefix_router::gateway {

namespace {

using std::chrono::milliseconds;

const bool kQuietLogs = [] {
  spdlog::set_level(spdlog::level::err);
  return true;
}();

// Records what the subscriber calls, from its thread.
class RecordingPolicy final : public Policy {
 public:
  Result<Decision> Pick(const RouteRequest&, const FleetSnapshot&, Rng&) const override {
    return Status::Unavailable("not a router");
  }
  std::string_view name() const override { return "recording"; }
  void OnKvEvents(uint64_t seed, const KvEventBatch& batch) override {
    std::lock_guard lock(mu_);
    log_.push_back({seed, false, batch.seq, batch.events.size()});
  }
  void OnKvStreamLost(uint64_t seed) override {
    std::lock_guard lock(mu_);
    log_.push_back({seed, true, 0, 0});
  }
  struct Entry {
    uint64_t seed;
    bool lost;
    uint64_t seq;
    size_t events;
  };
  std::vector<Entry> log() const {
    std::lock_guard lock(mu_);
    return log_;
  }
  void Clear() {
    std::lock_guard lock(mu_);
    log_.clear();
  }
  size_t lost_count() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const Entry& e : log_) n += e.lost;
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Entry> log_;
};

KvEventBatch Batch(uint64_t seq, size_t n_events) {
  KvEventBatch b;
  b.seq = seq;
  b.ts = 1.0 + static_cast<double>(seq);
  b.data_parallel_rank = 0;
  for (size_t i = 0; i < n_events; ++i) b.events.push_back(KvBlockRemoved{{seq * 100 + i}, "GPU"});
  return b;
}

// A vLLM-shaped publisher: live PUB plus a replay ROUTER answering from `replay_store`.
class TestPublisher {
 public:
  TestPublisher() {
    pub_ = zmq::Socket::Open(ctx_, zmq::SocketType::kPub).value();
    EXPECT_TRUE(pub_.Bind("tcp://127.0.0.1:*").ok());
    endpoint_ = pub_.LastEndpoint().value();
    router_ = zmq::Socket::Open(ctx_, zmq::SocketType::kRouter).value();
    EXPECT_TRUE(router_.Bind("tcp://127.0.0.1:*").ok());
    replay_endpoint_ = router_.LastEndpoint().value();
    thread_ = std::thread([this] { ServeReplay(); });
  }
  ~TestPublisher() {
    stop_ = true;
    thread_.join();
  }
  void Publish(uint64_t seq, size_t n_events = 1, const std::string& topic = "kv") {
    std::string payload = api::EncodeKvEventBatch(Batch(seq, n_events), api::KvEventEncoding::kMap);
    EXPECT_TRUE(pub_.Send({topic, api::EncodeKvSeq(seq), payload}, milliseconds(1000)).ok());
  }
  void SendRaw(std::initializer_list<std::string_view> frames) {
    EXPECT_TRUE(pub_.Send(frames, milliseconds(1000)).ok());
  }
  void StoreForReplay(uint64_t seq, size_t n_events = 1) {
    std::lock_guard lock(mu_);
    store_[seq] = api::EncodeKvEventBatch(Batch(seq, n_events), api::KvEventEncoding::kArray);
  }
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  int replay_requests() const { return replay_requests_.load(); }

 private:
  void ServeReplay() {
    while (!stop_) {
      Result<zmq::Message> m = router_.Recv(milliseconds(20), 4);
      if (!m.ok() || m->size() != 3) continue;
      ++replay_requests_;
      const uint64_t start =
          api::DecodeKvSeq(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>((*m)[2].data()), 8)).value();
      std::map<uint64_t, std::string> copy;
      {
        std::lock_guard lock(mu_);
        copy = store_;
      }
      for (const auto& [seq, payload] : copy) {
        if (seq >= start) {
          (void)router_.Send({(*m)[0], "", api::EncodeKvSeq(seq), payload}, milliseconds(1000));
        }
      }
      (void)router_.Send({(*m)[0], "", std::string(8, '\xff'), ""}, milliseconds(1000));
    }
  }

  zmq::Context ctx_;
  zmq::Socket pub_, router_;
  std::string endpoint_, replay_endpoint_;
  std::mutex mu_;
  std::map<uint64_t, std::string> store_;
  std::atomic<bool> stop_{false};
  std::atomic<int> replay_requests_{0};
  std::thread thread_;
};

constexpr uint64_t kSeed = 0xABCDEF;

struct Harness {
  explicit Harness(bool replay, milliseconds silence = milliseconds(60000)) {
    KvSubscriberOptions o;
    o.poll_interval = milliseconds(10);
    o.silence_timeout = silence;
    sub = std::make_unique<KvEventSubscriber>(o, &registry);
    KvSource src;
    src.instance_seed = kSeed;
    src.instance = "engine-a";
    src.config.endpoint = pub.endpoint();
    src.config.topic = "kv";
    if (replay) src.config.replay_endpoint = pub.replay_endpoint();
    src.policies = {policy};
    sub->SetSources({src});
    sub->Start();
  }
  // Publishes seq 0, 1, ... until one is delivered; returns the last seq published, with the
  // policy's log cleared and no message in flight. Once anything is delivered the subscription
  // is in place, so the seq just published arrives too, after every earlier one (ZMQ keeps a
  // connection's order): seeing it delivered leaves nothing in flight.
  uint64_t Join() {
    for (uint64_t seq = 0; seq < 1000; ++seq) {
      pub.Publish(seq);
      if (!prefix_router::testing::Eventually([&] { return !policy->log().empty(); }, milliseconds(10),
                                              milliseconds(1))) {
        continue;
      }
      EXPECT_TRUE(prefix_router::testing::Eventually([&] { return policy->log().back().seq == seq; },
                                                     std::chrono::seconds(10)));
      policy->Clear();
      return seq;
    }
    ADD_FAILURE() << "no batch delivered";
    return 0;
  }
  bool WaitLog(size_t n) {
    return prefix_router::testing::Eventually([&] { return policy->log().size() >= n; }, std::chrono::seconds(10));
  }

  metrics::Registry registry;
  TestPublisher pub;
  std::shared_ptr<RecordingPolicy> policy = std::make_shared<RecordingPolicy>();
  std::unique_ptr<KvEventSubscriber> sub;
};

// Batches in sequence reach the policy in order, named by the instance's seed; counters and
// /metrics count them.
TEST(KvEventSubscriber, DeliversInOrder) {
  Harness h(false);
  const uint64_t last = h.Join();
  const KvSubscriberCounters before = h.sub->counters();
  for (uint64_t i = 1; i <= 5; ++i) h.pub.Publish(last + i, i);
  ASSERT_TRUE(h.WaitLog(5));
  auto log = h.policy->log();
  ASSERT_EQ(log.size(), 5u);
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(log[i].seed, kSeed);
    EXPECT_FALSE(log[i].lost);
    EXPECT_EQ(log[i].seq, last + 1 + i);
    EXPECT_EQ(log[i].events, i + 1);
  }
  const KvSubscriberCounters after = h.sub->counters();
  EXPECT_EQ(after.batches - before.batches, 5u);
  EXPECT_EQ(after.events - before.events, 15u);
  EXPECT_EQ(after.gaps, 0u);
  EXPECT_EQ(after.streams_lost, 0u);
  const std::string text = h.registry.Render();
  EXPECT_NE(text.find("prefix_router_kv_event_batches_total{instance=\"engine-a\"} " + std::to_string(after.batches)),
            std::string::npos)
      << text;
}

// A sequence gap asks the replay socket for the missing batches, which arrive before the batch
// that showed the gap; the view is not declared lost.
TEST(KvEventSubscriber, GapIsFilledByReplay) {
  Harness h(true);
  const uint64_t last = h.Join();
  h.pub.StoreForReplay(last + 1, 2);
  h.pub.StoreForReplay(last + 2, 3);
  h.pub.StoreForReplay(last + 3, 1);  // also in the buffer: must not be delivered twice
  h.pub.Publish(last + 3, 1);
  h.pub.Publish(last + 4, 1);  // a marker: a duplicate of last + 3 would come before it
  ASSERT_TRUE(h.WaitLog(4));
  auto log = h.policy->log();
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[3].seq, last + 4);
  EXPECT_EQ(log[0].seq, last + 1);
  EXPECT_EQ(log[0].events, 2u);
  EXPECT_EQ(log[1].seq, last + 2);
  EXPECT_EQ(log[1].events, 3u);
  EXPECT_EQ(log[2].seq, last + 3);
  for (const auto& e : log) EXPECT_FALSE(e.lost);
  const KvSubscriberCounters c = h.sub->counters();
  EXPECT_EQ(c.gaps, 1u);
  EXPECT_EQ(c.replays, 1u);
  EXPECT_EQ(c.replayed_batches, 2u);
  EXPECT_EQ(c.streams_lost, 0u);
  EXPECT_EQ(h.pub.replay_requests(), 1);
}

// A gap the replay buffer no longer covers (or no replay endpoint) marks the view lost before
// the next batch is delivered.
TEST(KvEventSubscriber, UncoveredGapIsLost) {
  for (bool replay : {false, true}) {
    Harness h(replay);
    const uint64_t last = h.Join();
    if (replay) h.pub.StoreForReplay(last + 2);  // last + 1 fell out of the buffer
    h.pub.Publish(last + 3);
    ASSERT_TRUE(h.WaitLog(2));
    auto log = h.policy->log();
    ASSERT_GE(log.size(), 2u);
    EXPECT_TRUE(log.front().lost) << replay;
    EXPECT_EQ(log.back().seq, last + 3);
    EXPECT_EQ(h.sub->counters().gaps, 1u);
  }
}

// The publisher restarting (seq back to 0) marks the view lost; the stream continues from 0.
TEST(KvEventSubscriber, RestartIsLost) {
  Harness h(false);
  uint64_t last = h.Join();
  if (last == 0) {  // make sure 0 is a step back
    h.pub.Publish(1);
    ASSERT_TRUE(h.WaitLog(1));
    h.policy->Clear();
  }
  h.pub.Publish(0);
  h.pub.Publish(1);
  ASSERT_TRUE(h.WaitLog(3));
  auto log = h.policy->log();
  EXPECT_TRUE(log[0].lost);
  EXPECT_EQ(log[1].seq, 0u);
  EXPECT_EQ(log[2].seq, 1u);
  EXPECT_FALSE(log[2].lost);
  EXPECT_EQ(h.sub->counters().restarts, 1u);
}

// Silence longer than the timeout (on the stepped GatewayClock) calls OnKvStreamLost once; a
// batch ends the silence.
TEST(KvEventSubscriber, SilenceIsLostOnce) {
  ManualGatewayClock clock;
  Harness h(false, milliseconds(300));
  const uint64_t last = h.Join();
  clock.Advance(milliseconds(299));
  const uint64_t turns = h.sub->counters().turns;
  ASSERT_TRUE(prefix_router::testing::Eventually([&] { return h.sub->counters().turns >= turns + 2; }));
  EXPECT_EQ(h.policy->lost_count(), 0u);  // not yet silent for long enough
  clock.Advance(milliseconds(2));
  ASSERT_TRUE(
      prefix_router::testing::Eventually([&] { return h.policy->lost_count() >= 1; }, std::chrono::seconds(10)));
  clock.Advance(milliseconds(4000));
  const uint64_t later = h.sub->counters().turns;
  ASSERT_TRUE(prefix_router::testing::Eventually([&] { return h.sub->counters().turns >= later + 2; }));
  EXPECT_EQ(h.policy->lost_count(), 1u);  // not repeated while still silent
  h.pub.Publish(last + 1);
  ASSERT_TRUE(h.WaitLog(2));
  EXPECT_EQ(h.policy->log()[1].seq, last + 1);
}

// Garbage frames (wrong frame count, bad seq, bad msgpack) are counted and mark the view lost,
// without stopping the stream: the next good batch is delivered.
TEST(KvEventSubscriber, GarbageCountedNotFatal) {
  Harness h(false);
  const uint64_t last = h.Join();
  h.pub.SendRaw({"kv", "only two"});
  h.pub.SendRaw({"kv", "short", "x"});
  h.pub.SendRaw({"kv", api::EncodeKvSeq(last + 1), "\xc1\xc1garbage"});
  h.pub.SendRaw({"kv", "a", "b", "c", "d", "e"});
  h.pub.Publish(last + 1);
  ASSERT_TRUE(prefix_router::testing::Eventually(
      [&] {
        auto log = h.policy->log();
        return !log.empty() && !log.back().lost && log.back().seq == last + 1;
      },
      std::chrono::seconds(10)));
  const KvSubscriberCounters c = h.sub->counters();
  EXPECT_EQ(c.decode_errors, 4u);
  EXPECT_EQ(h.policy->lost_count(), 4u);
  EXPECT_NE(h.registry.Render().find("prefix_router_kv_event_decode_errors_total{instance=\"engine-a\"} 4"),
            std::string::npos);
}

// Messages on another topic are not subscribed to.
TEST(KvEventSubscriber, OtherTopicsIgnored) {
  Harness h(false);
  const uint64_t last = h.Join();
  h.pub.Publish(last + 1, 1, "other");
  h.pub.Publish(last + 1, 1, "kv");
  h.pub.Publish(last + 2, 1, "kv");  // a marker: the other topic's batch would come before it
  ASSERT_TRUE(h.WaitLog(2));
  const auto log = h.policy->log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].seq, last + 1);
  EXPECT_EQ(log[1].seq, last + 2);
  EXPECT_EQ(h.sub->counters().restarts, 0u);
}

}  // namespace
}  // namespace prefix_router::gateway
