// Flow control at a pool's ceiling (routing.flow_control): requests wait in the pool's queue
// instead of getting 429 at once, leave it by priority as slots free, and are refused when the
// queue is full, their priority is sheddable, their wait runs out or a higher priority takes their
// place; a client that leaves while queued leaves the queue. Every count returns to 0.
//
// The fake instance holds its responses until the test lets them go (HoldResponses), so the
// pool's one slot stays taken for as long as a test needs; every wait is an Eventually.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gateway/gateway_test_util.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

using namespace std::chrono_literals;
using namespace prefix_router::gateway::testing;
using pt::ClientResponse;
using pt::Eventually;
using pt::HttpClient;

const bool kQuiet = [] {
  QuietLogs();
  return true;
}();

constexpr auto kClientDeadline = 8000ms;
constexpr std::string_view kPriority = "x-prefix-router-priority";

std::string ErrorCode(const std::string& body) {
  auto v = boost::json::parse(body);
  const auto& code = v.at("error").at("code");
  return code.is_string() ? std::string(code.as_string()) : "";
}

double QueueLength(uint16_t port) { return pt::Metric(port, R"(prefix_router_queue_length{pool="default"})"); }

double Rejected(uint16_t port, std::string_view reason) {
  return pt::Metric(port,
                    R"(prefix_router_rejected_requests_total{model="other",reason=")" + std::string(reason) + "\"}");
}

// One slot, a queue of `max_queue`; the fake holds its answers.
struct Queueing {
  explicit Queueing(uint32_t max_queue, double max_wait = 10, std::string objectives = "") {
    fakes = StartFakes({"a"});
    fakes[0]->HoldResponses(true);
    config = ConfigFor(fakes);
    config.routing.max_in_flight = 1;
    config.routing.flow_control.max_queue = max_queue;
    config.routing.flow_control.max_queue_wait = max_wait;
    config.routing.flow_control.objectives = std::move(objectives);
    gw = StartGateway(config);
  }
  GatewayConfig config;
  uint16_t port() const { return gw->port(); }
  // Sends in the background; the response lands in `out`.
  void Send(std::string name, int priority, ClientResponse* out) {
    pt::Headers headers;
    if (priority != 0) headers.emplace_back(std::string(kPriority), std::to_string(priority));
    threads.emplace_back(
        [this, name, headers, out] { *out = pt::Fetch(port(), JsonRequest(kChat, ChatBody("m1", name), headers)); });
  }
  void SendWith(std::string name, pt::Headers headers, ClientResponse* out) {
    threads.emplace_back(
        [this, name, headers, out] { *out = pt::Fetch(port(), JsonRequest(kChat, ChatBody("m1", name), headers)); });
  }
  void Join() {
    for (auto& t : threads) t.join();
    threads.clear();
  }
  // The users' messages in the order they reached the instance.
  std::vector<std::string> Order() const {
    std::vector<std::string> out;
    for (const auto& r : fakes[0]->received()) {
      auto v = boost::json::parse(r.body);
      const auto& messages = v.at("messages").as_array();
      out.emplace_back(messages.back().at("content").as_string());
    }
    return out;
  }
  Fakes fakes;
  std::unique_ptr<Gateway> gw;
  std::vector<std::thread> threads;
};

// The slot's holder ends; the queued requests follow one at a time, the higher priority first,
// each let out by the end of the one before; the waits are in the histogram, counts back to 0.
TEST(FlowControlTest, QueuedRequestsLeaveByPriorityAsSlotsFree) {
  Queueing s(10);
  ASSERT_NE(s.gw, nullptr);
  ClientResponse first, low, high, mid;
  s.Send("first", 0, &first);
  ASSERT_TRUE(Eventually([&] { return s.fakes[0]->in_progress() == 1; }, 10'000ms));
  s.Send("low", 0, &low);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 1; }, 10'000ms));
  s.Send("high", 5, &high);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 2; }, 10'000ms));
  s.Send("mid", 2, &mid);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 3; }, 10'000ms));
  EXPECT_EQ(s.fakes[0]->requests(), 1);  // nothing queued reached the instance
  s.fakes[0]->HoldResponses(false);
  s.Join();
  for (const ClientResponse* r : {&first, &low, &high, &mid}) EXPECT_EQ(r->status(), 200) << r->body();
  EXPECT_EQ(s.Order(), (std::vector<std::string>{"first", "high", "mid", "low"}));
  EXPECT_EQ(QueueLength(s.port()), 0);
  EXPECT_EQ(pt::Metric(s.port(), R"(prefix_router_queue_wait_seconds_count{model="other",priority="0"})"), 1);
  EXPECT_EQ(pt::Metric(s.port(), R"(prefix_router_queue_wait_seconds_count{model="other",priority="5"})"), 1);
  ExpectNothingInFlight(*s.gw, s.fakes);
}

// A time-to-first-token objective (x-slo-ttft-ms) is a deadline in the queue: within a tenant the
// earliest leaves first, those without one after them in arrival order; a malformed one is a 400.
TEST(FlowControlTest, TtftObjectivesLeaveEarliestDeadlineFirst) {
  Queueing s(10);
  ASSERT_NE(s.gw, nullptr);
  ClientResponse first, none, loose, tight;
  s.Send("first", 0, &first);
  ASSERT_TRUE(Eventually([&] { return s.fakes[0]->in_progress() == 1; }, 10'000ms));
  s.SendWith("none", {}, &none);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 1; }, 10'000ms));
  s.SendWith("loose", {{"x-slo-ttft-ms", "60000"}}, &loose);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 2; }, 10'000ms));
  s.SendWith("tight", {{"x-slo-ttft-ms", "9000"}}, &tight);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 3; }, 10'000ms));
  for (const char* bad : {"0", "-5", "1.5", "soon", "86400001"}) {
    const ClientResponse r = pt::Fetch(s.port(), JsonRequest(kChat, ChatBody("m1", "bad"), {{"x-slo-ttft-ms", bad}}));
    EXPECT_EQ(r.status(), 400) << bad;
    EXPECT_EQ(ErrorCode(r.body()), "invalid_slo") << bad;
  }
  s.fakes[0]->HoldResponses(false);
  s.Join();
  for (const ClientResponse* r : {&first, &none, &loose, &tight}) EXPECT_EQ(r->status(), 200) << r->body();
  EXPECT_EQ(s.Order(), (std::vector<std::string>{"first", "tight", "loose", "none"}));
  ExpectNothingInFlight(*s.gw, s.fakes);
}

// A full queue refuses a request of the lowest queued priority at once, a sheddable one is never
// queued, and a higher priority displaces the newest of the lowest; each answer is 429 with
// Retry-After and an OpenAI-style body, counted by reason.
// Objectives name priorities (routing.flow_control.objectives): a request naming one in
// x-gateway-inference-objective gets its priority, x-prefix-router-priority wins over it, an
// objective not listed is priority 0, and a sheddable objective is refused while the pool is full.
TEST(FlowControlTest, ObjectivesNamePriorities) {
  Queueing s(10, 10, "interactive=5,batch=2,bulk=-1");
  ASSERT_NE(s.gw, nullptr);
  auto objective = [](std::string name) { return pt::Headers{{"x-gateway-inference-objective", std::move(name)}}; };
  ClientResponse first, plain, unknown, batch, both, interactive, bulk;
  s.Send("first", 0, &first);
  ASSERT_TRUE(Eventually([&] { return s.fakes[0]->in_progress() == 1; }, 10'000ms));
  int queued = 0;
  for (auto [name, headers, out] : std::vector<std::tuple<std::string, pt::Headers, ClientResponse*>>{
           {"plain", {}, &plain},
           {"unknown", objective("not-listed"), &unknown},
           {"batch", objective("batch"), &batch},
           {"both", {{"x-gateway-inference-objective", "interactive"}, {std::string(kPriority), "1"}}, &both},
           {"interactive", objective("interactive"), &interactive}}) {
    s.SendWith(name, headers, out);
    ++queued;
    ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == queued; }, 10'000ms)) << name;
  }
  s.SendWith("bulk", objective("bulk"), &bulk);
  ASSERT_TRUE(Eventually([&] { return Rejected(s.port(), "queue_shed") == 1; }, 10'000ms));
  s.fakes[0]->HoldResponses(false);
  s.Join();
  EXPECT_EQ(bulk.status(), 429);
  EXPECT_EQ(ErrorCode(bulk.body()), "pool_overloaded");
  for (const ClientResponse* r : {&first, &plain, &unknown, &batch, &both, &interactive}) {
    EXPECT_EQ(r->status(), 200) << r->body();
  }
  EXPECT_EQ(s.Order(), (std::vector<std::string>{"first", "interactive", "batch", "both", "plain", "unknown"}));
  ExpectNothingInFlight(*s.gw, s.fakes);
}

// A reload that changes only the objectives keeps the queue and the requests in it (they leave in
// one order with the requests that come after), and new requests are classified by the new map.
TEST(FlowControlTest, ReloadingObjectivesKeepsTheQueue) {
  Queueing s(10, 10, "interactive=5");
  ASSERT_NE(s.gw, nullptr);
  auto objective = [](std::string name) { return pt::Headers{{"x-gateway-inference-objective", std::move(name)}}; };
  ClientResponse first, low, early, vip, late;
  s.Send("first", 0, &first);
  ASSERT_TRUE(Eventually([&] { return s.fakes[0]->in_progress() == 1; }, 10'000ms));
  s.Send("low", 0, &low);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 1; }, 10'000ms));
  s.SendWith("early", objective("interactive"), &early);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 2; }, 10'000ms));

  GatewayConfig next = s.config;
  next.routing.flow_control.objectives = "interactive=-1,vip=7";
  ASSERT_TRUE(ValidateConfig(next).ok());
  const ReloadReport report = s.gw->Reload(next, "test");
  EXPECT_TRUE(report.restart_required.empty());
  EXPECT_EQ(QueueLength(s.port()), 2);  // the same queue, still holding both

  s.SendWith("vip", objective("vip"), &vip);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 3; }, 10'000ms));
  s.SendWith("late", objective("interactive"), &late);  // now sheddable: refused at once
  ASSERT_TRUE(Eventually([&] { return Rejected(s.port(), "queue_shed") == 1; }, 10'000ms));
  s.fakes[0]->HoldResponses(false);
  s.Join();
  EXPECT_EQ(late.status(), 429);
  for (const ClientResponse* r : {&first, &low, &early, &vip}) EXPECT_EQ(r->status(), 200) << r->body();
  EXPECT_EQ(s.Order(), (std::vector<std::string>{"first", "vip", "early", "low"}));
  ExpectNothingInFlight(*s.gw, s.fakes);
}

TEST(FlowControlTest, FullQueueShedAndDisplaced) {
  Queueing s(1);
  ASSERT_NE(s.gw, nullptr);
  ClientResponse first, queued, displacer;
  s.Send("first", 0, &first);
  ASSERT_TRUE(Eventually([&] { return s.fakes[0]->in_progress() == 1; }, 10'000ms));
  s.Send("queued", 0, &queued);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 1; }, 10'000ms));

  const ClientResponse full = pt::Fetch(s.port(), JsonRequest(kChat, ChatBody("m1", "full")));
  EXPECT_EQ(full.status(), 429);
  EXPECT_EQ(full.Header("retry-after"), "1");
  EXPECT_EQ(ErrorCode(full.body()), "pool_overloaded");
  const ClientResponse shed =
      pt::Fetch(s.port(), JsonRequest(kChat, ChatBody("m1", "shed"), {{std::string(kPriority), "-1"}}));
  EXPECT_EQ(shed.status(), 429);
  const ClientResponse bad =
      pt::Fetch(s.port(), JsonRequest(kChat, ChatBody("m1", "bad"), {{std::string(kPriority), "11"}}));
  EXPECT_EQ(bad.status(), 400);
  EXPECT_EQ(ErrorCode(bad.body()), "invalid_priority");

  s.Send("displacer", 1, &displacer);
  ASSERT_TRUE(Eventually([&] { return Rejected(s.port(), "queue_displaced") == 1; }, 10'000ms));
  EXPECT_EQ(QueueLength(s.port()), 1);
  s.fakes[0]->HoldResponses(false);
  s.Join();
  EXPECT_EQ(first.status(), 200);
  EXPECT_EQ(displacer.status(), 200);
  EXPECT_EQ(queued.status(), 429);
  EXPECT_EQ(queued.Header("retry-after"), "1");
  EXPECT_EQ(ErrorCode(queued.body()), "pool_overloaded");
  EXPECT_EQ(s.Order(), (std::vector<std::string>{"first", "displacer"}));
  EXPECT_EQ(Rejected(s.port(), "queue_full"), 1);
  EXPECT_EQ(Rejected(s.port(), "queue_shed"), 1);
  EXPECT_EQ(pt::Metric(s.port(), R"(prefix_router_responses_total{code="429",origin="gateway"})"), 3);
  ExpectNothingInFlight(*s.gw, s.fakes);
}

// A request that waits max_queue_wait gets 429; the slot's holder is not disturbed, and the next
// request after it finds the pool free.
TEST(FlowControlTest, WaitDeadlineAnswers429) {
  Queueing s(10, /*max_wait=*/0.3);
  ASSERT_NE(s.gw, nullptr);
  ClientResponse first;
  s.Send("first", 0, &first);
  ASSERT_TRUE(Eventually([&] { return s.fakes[0]->in_progress() == 1; }, 10'000ms));
  const ClientResponse waited = pt::Fetch(s.port(), JsonRequest(kChat, ChatBody("m1", "waits")));
  EXPECT_EQ(waited.status(), 429);
  EXPECT_EQ(waited.Header("retry-after"), "1");
  EXPECT_NE(waited.body().find("max_queue_wait"), std::string::npos) << waited.body();
  EXPECT_EQ(Rejected(s.port(), "queue_timeout"), 1);
  EXPECT_EQ(QueueLength(s.port()), 0);
  s.fakes[0]->HoldResponses(false);
  s.Join();
  EXPECT_EQ(first.status(), 200);
  EXPECT_EQ(pt::Fetch(s.port(), JsonRequest(kChat, ChatBody("m1", "after"))).status(), 200);
  EXPECT_EQ(s.Order(), (std::vector<std::string>{"first", "after"}));
  ExpectNothingInFlight(*s.gw, s.fakes);
}

// A client that leaves while queued leaves the queue at once, never reaches an instance, and is
// counted; the slot then goes to the next one waiting.
TEST(FlowControlTest, ClientLeavingWhileQueuedLeavesTheQueue) {
  Queueing s(10);
  ASSERT_NE(s.gw, nullptr);
  ClientResponse first, next;
  s.Send("first", 0, &first);
  ASSERT_TRUE(Eventually([&] { return s.fakes[0]->in_progress() == 1; }, 10'000ms));
  {
    HttpClient leaving(s.port(), kClientDeadline);
    EXPECT_FALSE(leaving.Send(JsonRequest(kChat, ChatBody("m1", "leaves"))));
    ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 1; }, 10'000ms));
    leaving.Close();
  }
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 0; }, 10'000ms));
  EXPECT_EQ(pt::Metric(s.port(), R"(prefix_router_client_disconnects_total{stage="queued"})"), 1);
  s.Send("next", 0, &next);
  ASSERT_TRUE(Eventually([&] { return QueueLength(s.port()) == 1; }, 10'000ms));
  s.fakes[0]->HoldResponses(false);
  s.Join();
  EXPECT_EQ(first.status(), 200);
  EXPECT_EQ(next.status(), 200);
  EXPECT_EQ(s.Order(), (std::vector<std::string>{"first", "next"}));
  ExpectNothingInFlight(*s.gw, s.fakes);
}

// In-flight saturation (flow_control.saturation in-flight) with no pool ceiling: requests wait
// while every instance holds concurrency_threshold (1 here), none ever holds more, and an
// instance's end lets out the next by priority, routed then to where the room is, whatever the
// strategy would pick (round-robin would send every other request to the full instance); without
// a queue the same saturation answers 429, naming the threshold.
TEST(FlowControlTest, InFlightSaturationWaitsForRoomOnAnInstance) {
  auto fakes = StartFakes({"a", "b"});
  for (auto& f : fakes) f->HoldResponses(true);
  GatewayConfig config = ConfigFor(fakes);
  config.routing.strategy = Strategy::kRoundRobin;
  config.routing.concurrency_threshold = 1;
  config.routing.flow_control.saturation = FlowSaturation::kInFlight;
  config.routing.flow_control.max_queue = 10;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  std::vector<std::thread> threads;
  struct Finally {  // a failed assertion still lets the fakes answer and joins the clients
    Fakes& fakes;
    std::vector<std::thread>& threads;
    ~Finally() {
      for (auto& f : fakes) f->HoldResponses(false);
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } finally{fakes, threads};
  auto send = [&](std::string name, int priority, ClientResponse* out) {
    pt::Headers h;
    if (priority != 0) h.emplace_back(std::string(kPriority), std::to_string(priority));
    threads.emplace_back([=] { *out = pt::Fetch(port, JsonRequest(kChat, ChatBody("m1", name), h)); });
  };
  ClientResponse r1, r2, low, high;
  send("r1", 0, &r1);
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() + fakes[1]->in_progress() == 1; }, 10'000ms));
  send("r2", 0, &r2);
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 1 && fakes[1]->in_progress() == 1; }, 10'000ms));
  send("low", 0, &low);
  ASSERT_TRUE(Eventually([&] { return QueueLength(port) == 1; }, 10'000ms));
  send("high", 3, &high);
  ASSERT_TRUE(Eventually([&] { return QueueLength(port) == 2; }, 10'000ms));
  EXPECT_EQ(fakes[0]->requests() + fakes[1]->requests(), 2);
  // The instance that took r1 answers from now on: both queued requests follow there, one at a
  // time, the higher priority first; the other instance still holds r2.
  const size_t first = fakes[0]->requests() == 1 && fakes[0]->received().front().body.find("r1") != std::string::npos
                           ? 0 : 1;
  fakes[first]->HoldResponses(false);
  ASSERT_TRUE(Eventually([&] { return fakes[first]->requests() == 3; }, 10'000ms));
  EXPECT_EQ(QueueLength(port), 0);
  EXPECT_EQ(fakes[1 - first]->requests(), 1);
  std::vector<std::string> order;
  for (const auto& r : fakes[first]->received()) {
    order.emplace_back(boost::json::parse(r.body).at("messages").as_array().back().at("content").as_string());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"r1", "high", "low"}));
  fakes[1 - first]->HoldResponses(false);
  for (auto& t : threads) t.join();
  threads.clear();
  for (const ClientResponse* r : {&r1, &r2, &low, &high}) EXPECT_EQ(r->status(), 200) << r->body();
  ExpectNothingInFlight(*gw, fakes);

  // No queue: the same saturation refuses at once.
  config.routing.flow_control.max_queue = 0;
  for (auto& f : fakes) f->HoldResponses(true);
  auto plain = StartGateway(config);
  ASSERT_NE(plain, nullptr);
  const uint16_t plain_port = plain->port();
  ClientResponse p1, p2;
  threads.emplace_back([&] { p1 = pt::Fetch(plain_port, JsonRequest(kChat, ChatBody("m1", "p1"))); });
  threads.emplace_back([&] { p2 = pt::Fetch(plain_port, JsonRequest(kChat, ChatBody("m1", "p2"))); });
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 1 && fakes[1]->in_progress() == 1; }, 10'000ms));
  const ClientResponse refused = pt::Fetch(plain_port, JsonRequest(kChat, ChatBody("m1", "p3")));
  EXPECT_EQ(refused.status(), 429);
  EXPECT_EQ(refused.Header("retry-after"), "1");
  EXPECT_NE(refused.body().find("every instance at its concurrency threshold of 1"), std::string::npos)
      << refused.body();
  for (auto& f : fakes) f->HoldResponses(false);
  for (auto& t : threads) t.join();
  EXPECT_EQ(p1.status(), 200);
  EXPECT_EQ(p2.status(), 200);
  ExpectNothingInFlight(*plain, fakes);
}

// Many clients at once against one slot and a short queue: every request gets exactly one answer
// (200 or 429), the instance never has more than one in flight, and every count returns to 0.
TEST(FlowControlTest, ConcurrentLoadKeepsTheCeilingAndLosesNothing) {
  auto fakes = StartFakes({"a"});
  pt::Behavior slow;
  slow.head_delay = 20ms;
  fakes[0]->SetBehavior(slow);
  GatewayConfig config = ConfigFor(fakes);
  config.routing.max_in_flight = 1;
  config.routing.flow_control.max_queue = 4;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  std::atomic<int> ok{0}, refused{0}, other{0}, peak{0};
  std::atomic<bool> done{false};
  std::thread watch([&] {
    while (!done) {
      peak = std::max(peak.load(), fakes[0]->in_progress());
      std::this_thread::sleep_for(1ms);
    }
  });
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 6; ++i) {
        pt::Headers h{{std::string(kPriority), std::to_string((t + i) % 3)}};
        const ClientResponse r = pt::Fetch(gw->port(), JsonRequest(kChat, ChatBody("m1", "c"), h));
        (r.status() == 200 ? ok : r.status() == 429 ? refused : other)++;
      }
    });
  }
  for (auto& c : clients) c.join();
  done = true;
  watch.join();
  EXPECT_EQ(ok + refused, 48);
  EXPECT_EQ(other, 0);
  EXPECT_GT(ok, 0);
  EXPECT_LE(peak, 1);
  EXPECT_EQ(fakes[0]->requests(), ok.load());
  EXPECT_EQ(QueueLength(gw->port()), 0);
  ExpectNothingInFlight(*gw, fakes);
}

double AtBound(uint16_t port) { return pt::Metric(port, R"(prefix_router_queue_tenants_at_bound{pool="default"})"); }

// flow_control.max_in_flight_per_tenant: a tenant holding its bound waits in the queue even though
// the pool has room (no max_in_flight here), another tenant's request passes it, and the wait ends
// when the tenant's own request ends. Counts and gauges go back to 0.
TEST(FlowControlTest, TenantAtItsBoundWaitsWhileOtherTenantsPass) {
  Fakes fakes = StartFakes({"a"});
  fakes[0]->HoldResponses(true);
  GatewayConfig config = ConfigFor(fakes);
  config.routing.flow_control.max_queue = 10;
  config.routing.flow_control.max_in_flight_per_tenant = 1;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  auto send = [&](std::string tenant, std::string name, ClientResponse* out) {
    pt::Headers h{{"x-gateway-inference-fairness-id", tenant}};
    return std::thread([=] { *out = pt::Fetch(port, JsonRequest(kChat, ChatBody("m1", name), h)); });
  };
  ClientResponse a1, a2, b1;
  std::thread t1 = send("a", "a1", &a1);
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 1; }, 10'000ms));
  EXPECT_EQ(AtBound(port), 1);
  std::thread t2 = send("a", "a2", &a2);
  ASSERT_TRUE(Eventually([&] { return QueueLength(port) == 1; }, 10'000ms));
  std::thread t3 = send("b", "b1", &b1);  // b is within its bound: past a's waiting request
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 2; }, 10'000ms));
  EXPECT_EQ(QueueLength(port), 1);
  EXPECT_EQ(AtBound(port), 2);
  fakes[0]->HoldResponses(false);
  for (std::thread* t : {&t1, &t2, &t3}) t->join();
  for (const ClientResponse* r : {&a1, &a2, &b1}) EXPECT_EQ(r->status(), 200) << r->body();
  std::vector<std::string> order;
  for (const auto& r : fakes[0]->received()) {
    order.emplace_back(boost::json::parse(r.body).at("messages").as_array().back().at("content").as_string());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a1", "b1", "a2"}));
  EXPECT_EQ(QueueLength(port), 0);
  EXPECT_EQ(AtBound(port), 0);
  ExpectNothingInFlight(*gw, fakes);
}

// Without a queue, a request over its tenant's bound is refused at once (429, saying which bound),
// while another tenant's is served.
TEST(FlowControlTest, TenantBoundWithoutAQueueRefuses) {
  Fakes fakes = StartFakes({"a"});
  fakes[0]->HoldResponses(true);
  GatewayConfig config = ConfigFor(fakes);
  config.routing.flow_control.max_in_flight_per_tenant = 1;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  const pt::Headers a{{"x-gateway-inference-fairness-id", "a"}};
  ClientResponse held, other;
  std::thread holder([&] { held = pt::Fetch(port, JsonRequest(kChat, ChatBody("m1", "held"), a)); });
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 1; }, 10'000ms));
  const ClientResponse over = pt::Fetch(port, JsonRequest(kChat, ChatBody("m1", "over"), a));
  EXPECT_EQ(over.status(), 429) << over.body();
  EXPECT_NE(over.body().find("max_in_flight_per_tenant"), std::string::npos) << over.body();
  EXPECT_EQ(Rejected(port, "queue_full"), 1);
  std::thread b([&] {
    other = pt::Fetch(port, JsonRequest(kChat, ChatBody("m1", "other"), {{"x-gateway-inference-fairness-id", "b"}}));
  });
  ASSERT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 2; }, 10'000ms));
  fakes[0]->HoldResponses(false);
  holder.join();
  b.join();
  EXPECT_EQ(held.status(), 200) << held.body();
  EXPECT_EQ(other.status(), 200) << other.body();
  // The bound frees with the end of the tenant's request.
  EXPECT_EQ(pt::Fetch(port, JsonRequest(kChat, ChatBody("m1", "again"), a)).status(), 200);
  ExpectNothingInFlight(*gw, fakes);
}

}  // namespace
}  // namespace prefix_router::gateway
