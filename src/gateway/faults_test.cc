// Fault tests of the gateway on loopback: instances that die under load, are slow, answer 5xx,
// never answer or break mid-stream; overload (the pool ceiling and the connection limit); and
// clients that leave at every stage. Each test drives real traffic through a Gateway in front
// of FakeUpstreams, counts what happened to every request, and asserts that none was lost:
//
//   lost = a request that got no response at all (the client's 8 s deadline passed or the
//          connection failed without a status), or got an error although an untried healthy
//          instance could have served it.
//
// Errors the gateway defines for faults it must not hide are "failed", not lost: a stream that
// already started and breaks ends with the SSE error event (retrying would repeat bytes the
// client has), and an instance that accepts a request and never answers gives 504 (it may still
// be working on it). "retried" is the gateway's prefix_router_retries_total.
//
// Every test prints one line per fault for docs/reliability.md:
//   fault=<name> sent=N failed=N retried=N lost=N
// (build/dev/src/gateway_tests --gtest_filter='FaultTest.*' | grep '^fault=').
//
// Bounded in time: each load phase is a number of requests, not a duration, every client
// operation has a deadline, and every wait is an Eventually with a generous limit. No timing
// assertions; the only ordering relied on has a margin of seconds (a 4 s stream is still
// running when its instance is stopped).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gateway/gateway_test_util.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

using namespace std::chrono_literals;
using namespace prefix_router::gateway::testing;
namespace bhttp = http::bhttp;
using pt::Behavior;
using pt::ClientResponse;
using pt::Eventually;
using pt::FakeUpstream;
using pt::HttpClient;
using pt::StreamedResponse;

const bool kQuiet = [] {
  QuietLogs();
  return true;
}();

constexpr auto kClientDeadline = 8000ms;
// Retries of every reason (the series are prefix_router_retries_total{model="other",reason=...}).
const std::string kRetriesPrefix = R"(prefix_router_retries_total{model="other",)";

// ------------------------------------------------------------------------------------ tallies

enum class Outcome { kOk, kFailed, kLost };

// What happened to the requests of one fault scenario.
struct Tally {
  std::atomic<int> sent{0};
  std::atomic<int> failed{0};
  std::atomic<int> lost{0};
  std::mutex mu;
  std::vector<std::string> lost_examples;  // guarded by mu; the first few, for the message

  void Add(Outcome o, const std::string& why) {
    if (o == Outcome::kFailed) ++failed;
    if (o == Outcome::kLost) {
      ++lost;
      std::lock_guard lock(mu);
      if (lost_examples.size() < 5) lost_examples.push_back(why);
    }
  }
  std::string LostExamples() {
    std::lock_guard lock(mu);
    std::string s;
    for (const auto& e : lost_examples) s += "\n  " + e;
    return s;
  }
};

// The summary line for docs/reliability.md; `retried` is the gateway's retry counter for the scenario.
void Report(std::string_view fault, Tally& t, int retried) {
  std::printf("fault=%.*s sent=%d failed=%d retried=%d lost=%d\n", static_cast<int>(fault.size()), fault.data(),
              t.sent.load(), t.failed.load(), retried, t.lost.load());
  std::fflush(stdout);
  EXPECT_EQ(t.lost.load(), 0) << fault << ": lost requests:" << t.LostExamples();
}

std::string Describe(const StreamedResponse& r) {
  std::string body = r.body.substr(0, 200);
  return "status " + std::to_string(r.status) + (r.complete ? " complete" : " incomplete") +
         (r.error ? " error '" + r.error.message() + "'" : "") + " instance '" + r.Header(kInstance) + "' body '" +
         body + "'";
}

bool EndsWithStreamError(const StreamedResponse& r) {
  return r.status == 200 && r.complete && r.body.find("data: {\"error\":") != std::string::npos &&
         r.body.find("upstream_stream_broken") != std::string::npos && r.body.ends_with("\n\n");
}

// How one response is judged; `why` describes it for the failure message.
using Judge = std::function<Outcome(const StreamedResponse&)>;

// The usual judge: the full expected body is fine, anything else is lost unless `defined`
// (the gateway's defined error for the fault under test) accepts it as a failure.
Judge Expect(std::string full_body, std::function<bool(const StreamedResponse&)> defined = {}) {
  return [full_body = std::move(full_body), defined = std::move(defined)](const StreamedResponse& r) {
    if (r.status == 200 && r.complete && !r.error && r.body == full_body) return Outcome::kOk;
    if (defined && defined(r)) return Outcome::kFailed;
    return Outcome::kLost;
  };
}

// Sends `count` streamed chat requests from `clients` threads, one connection each, over the
// cache keys g0..g23, and judges every response. `between` runs on the calling thread while
// requests flow (it may wait on tally.sent); the call returns when every request has ended.
void RunLoad(uint16_t port, int clients, int count, Tally& tally, const Judge& judge,
             const std::function<void()>& between = {}) {
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        HttpClient client(port, kClientDeadline);
        ++tally.sent;
        const std::string group = "g" + std::to_string(i % 24);
        if (const auto ec = client.Send(JsonRequest(kChat, ChatBody("m1", "q" + std::to_string(i), group, true)))) {
          tally.Add(Outcome::kLost, "request " + std::to_string(i) + ": send failed: " + ec.message());
          continue;
        }
        const StreamedResponse r = client.ReadStreamed();
        tally.Add(judge(r), "request " + std::to_string(i) + " (" + group + "): " + Describe(r));
      }
    });
  }
  if (between) between();
  for (auto& t : threads) t.join();
}

// The instance serving each of the keys g0..g23 (sequential requests, nothing else in flight).
std::vector<std::string> Homes(uint16_t port) {
  std::vector<std::string> homes;
  for (int i = 0; i < 24; ++i) {
    HttpClient client(port, kClientDeadline);
    EXPECT_FALSE(client.Send(JsonRequest(kChat, ChatBody("m1", "home", "g" + std::to_string(i), true))));
    const StreamedResponse r = client.ReadStreamed();
    EXPECT_EQ(r.status, 200) << Describe(r);
    homes.push_back(r.Header(kInstance));
  }
  return homes;
}

// ----------------------------------------------------------------------------- instance faults

// An instance stopped while requests flow: requests it had not answered are retried elsewhere,
// streams it had started end with the SSE error event, nothing hangs; it is ejected, and when it
// comes back on its address it is readmitted and serves its old keys again.
TEST(FaultTest, InstanceKilledUnderLoad) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  const Behavior quick = SseStream(4, 5ms);
  for (auto& f : fakes) f->SetBehavior(quick);
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PlainPrefixAware();
  config.health.interval = 0.1;
  config.health.timeout = 6;  // a check of the slow victim streams for 4.3 s and must pass
  config.health.unhealthy_threshold = 2;
  config.health.healthy_threshold = 2;
  config.health.passive_failures = 1;  // the kill is noticed by live traffic at once
  config.timeouts.first_byte = 5;
  config.timeouts.idle = 5;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  const std::vector<std::string> homes = Homes(port);
  ASSERT_NE(std::count(homes.begin(), homes.end(), "a"), 0);

  // The victim's requests wait 300 ms for their head, then stream for 4 s: when it dies some are
  // waiting (retried elsewhere) and some are streaming (broken with the error event).
  FakeUpstream& victim = *fakes[0];
  const uint16_t victim_port = victim.port();
  Behavior slow = SseStream(40, 100ms);
  slow.head_delay = 300ms;
  victim.SetBehavior(slow);

  Tally tally;
  const int before_retries = static_cast<int>(pt::MetricSum(port, kRetriesPrefix));
  const Judge judge = Expect(Concat(quick.chunks), [&](const StreamedResponse& r) {
    return EndsWithStreamError(r) && r.Header(kInstance) == "a" && r.body.starts_with(slow.chunks[0]);
  });
  bool ejected = false, readmitted = false;
  const std::string a_first_bytes = R"(prefix_router_upstream_first_byte_seconds_count{instance="a",stream="true"})";
  const double a_first_bytes_before = pt::Metric(port, a_first_bytes);
  bool streaming_at_kill = false;
  RunLoad(port, 4, 160, tally, judge, [&] {
    // Kill it once one of its streams has started (a body byte came from it; the stream has 4 s
    // to go) and it holds at least two requests (a health check may be the third).
    streaming_at_kill =
        Eventually([&] { return victim.in_progress() >= 3 && pt::Metric(port, a_first_bytes) > a_first_bytes_before; },
                   10'000ms, 20ms);
    victim.Stop();
    ejected = Eventually([&] { return InstanceHealth(port, "a") == "ejected"; }, 10'000ms);
    const int at_ejection = tally.sent.load();
    Eventually([&] { return tally.sent.load() >= at_ejection + 30; }, 10'000ms);  // traffic while down
    victim.SetBehavior(quick);
    Eventually([&] { return victim.Start(victim_port).ok(); }, 5000ms);
    readmitted = Eventually([&] { return InstanceHealth(port, "a") == "up"; }, 10'000ms);
  });
  Report("instance_killed", tally, static_cast<int>(pt::MetricSum(port, kRetriesPrefix)) - before_retries);
  EXPECT_TRUE(streaming_at_kill);
  EXPECT_GT(tally.failed.load(), 0);  // the streams it had started broke with the error event
  EXPECT_TRUE(ejected);
  EXPECT_TRUE(readmitted);
  ExpectNothingInFlight(*gw, fakes);
  // Back in rotation with its old keys: the same instance for the same key as before.
  EXPECT_EQ(Homes(port), homes);
}

// A stream already running when its instance dies ends with the error event after the pieces
// sent so far, and is not retried.
TEST(FaultTest, KilledInstanceBreaksRunningStreamWithErrorEvent) {
  Fakes fakes = StartFakes({"a", "b"});
  const Behavior slow = SseStream(40, 100ms);  // 4 s
  for (auto& f : fakes) f->SetBehavior(slow);
  auto gw = StartGateway(ConfigFor(fakes));
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  std::promise<void> first_piece, killed;
  std::shared_future<void> killed_done = killed.get_future().share();
  StreamedResponse r;
  std::thread reader([&] {
    HttpClient client(port, kClientDeadline);
    if (client.Send(JsonRequest(kChat, ChatBody("m1", "hi", "g0", true)))) {
      first_piece.set_value();
      return;
    }
    bool told = false;
    r = client.ReadStreamed([&](const StreamedResponse&) {
      if (!told) {
        told = true;
        first_piece.set_value();
        killed_done.wait();
      }
      return true;
    });
    if (!told) first_piece.set_value();
  });
  EXPECT_EQ(first_piece.get_future().wait_for(10s), std::future_status::ready);
  // Stop whichever instance is streaming it.
  for (auto& f : fakes) {
    if (f->in_progress() > 0) f->Stop();
  }
  killed.set_value();
  reader.join();
  Tally tally;
  tally.sent = 1;
  tally.Add(EndsWithStreamError(r) && r.body.starts_with(slow.chunks[0]) ? Outcome::kFailed : Outcome::kLost,
            Describe(r));
  Report("instance_killed_mid_stream", tally, static_cast<int>(pt::MetricSum(port, kRetriesPrefix)));
  EXPECT_EQ(tally.failed.load(), 1);
  EXPECT_EQ(TotalRequests(fakes), 1);  // not retried
  ExpectNothingInFlight(*gw, fakes);
}

// A slow instance (500 ms before its head) delays its requests and loses none.
TEST(FaultTest, SlowInstance) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  const Behavior quick = SseStream(3, 5ms);
  for (auto& f : fakes) f->SetBehavior(quick);
  Behavior slow = quick;
  slow.head_delay = 500ms;
  fakes[0]->SetBehavior(slow);
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PlainPrefixAware();
  config.timeouts.first_byte = 5;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  Tally tally;
  RunLoad(gw->port(), 4, 60, tally, Expect(Concat(quick.chunks)));
  Report("slow_instance", tally, static_cast<int>(pt::MetricSum(gw->port(), kRetriesPrefix)));
  EXPECT_EQ(tally.failed.load(), 0);
  EXPECT_GT(fakes[0]->requests(), 0);  // the slow one did serve
  ExpectNothingInFlight(*gw, fakes);
}

// An instance answering 500, 502 or 503 is skipped for another: every request still succeeds,
// through a retry, and active health checks (which get the same status) eject it.
TEST(FaultTest, InstanceAnswering5xx) {
  for (const int status : {500, 502, 503}) {
    SCOPED_TRACE(status);
    Fakes fakes = StartFakes({"a", "b", "c"});
    const Behavior quick = SseStream(3, 5ms);
    for (auto& f : fakes) f->SetBehavior(quick);
    GatewayConfig config = ConfigFor(fakes);
    config.routing = PlainPrefixAware();
    config.health.interval = 0.2;
    config.health.timeout = 0.5;
    config.health.unhealthy_threshold = 3;
    config.health.passive_failures = 0;
    auto gw = StartGateway(config);
    ASSERT_NE(gw, nullptr);
    // The load cycles through the keys from g0: the first key homed on a comes early, long
    // before three failed checks (0.4 s at least) eject it.
    const std::vector<std::string> homes = Homes(gw->port());
    ASSERT_NE(std::count(homes.begin(), homes.end(), "a"), 0);
    Behavior broken;
    broken.status = status;
    fakes[0]->SetBehavior(broken);
    Tally tally;
    RunLoad(gw->port(), 4, 60, tally, Expect(Concat(quick.chunks)));
    const int retried = static_cast<int>(pt::MetricSum(gw->port(), kRetriesPrefix));
    Report("status_" + std::to_string(status), tally, retried);
    EXPECT_EQ(tally.failed.load(), 0);
    EXPECT_GT(retried, 0);
    EXPECT_TRUE(Eventually([&] { return InstanceHealth(gw->port(), "a") == "ejected"; }, 10'000ms));
    ExpectNothingInFlight(*gw, fakes);
  }
}

// An instance that accepts requests and never answers: each request sent to it gets 504 after
// timeouts.first_byte (the gateway's defined answer: it is not retried, since the instance may
// still be working on it), the instance sees the connection close, active checks eject it, and
// every other request succeeds.
TEST(FaultTest, InstanceThatNeverAnswers) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  const Behavior quick = SseStream(3, 5ms);
  for (auto& f : fakes) f->SetBehavior(quick);
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PlainPrefixAware();
  config.timeouts.first_byte = 0.5;
  config.health.interval = 0.5;
  config.health.timeout = 0.3;
  config.health.unhealthy_threshold = 2;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  // As for 5xx: the first key homed on a comes early in the load, long before two failed checks
  // (1.1 s at least) eject it.
  const std::vector<std::string> homes = Homes(gw->port());
  ASSERT_NE(std::count(homes.begin(), homes.end(), "a"), 0);
  Behavior hang;
  hang.fault = Behavior::Fault::kHang;
  hang.hang_for = 20'000ms;
  fakes[0]->SetBehavior(hang);
  Tally tally;
  const Judge judge = Expect(Concat(quick.chunks), [](const StreamedResponse& r) {
    return r.status == 504 && r.complete && ErrorCode(r.body) == "upstream_failed" &&
           r.body.find("a: no response within the first-byte timeout") != std::string::npos;
  });
  RunLoad(gw->port(), 4, 60, tally, judge);
  Report("never_answers", tally, static_cast<int>(pt::MetricSum(gw->port(), kRetriesPrefix)));
  EXPECT_GT(tally.failed.load(), 0);
  EXPECT_TRUE(Eventually([&] { return InstanceHealth(gw->port(), "a") == "ejected"; }, 10'000ms));
  // Every request the hung instance received was given up: it saw each connection close.
  EXPECT_TRUE(Eventually([&] { return fakes[0]->in_progress() == 0; }, 10'000ms));
  ExpectNothingInFlight(*gw, fakes);
}

// An instance that closes its streams after two pieces: those streams end with the error event
// (defined; no retry after bytes reached the client), every other request succeeds.
TEST(FaultTest, InstanceClosingMidStream) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  const Behavior quick = SseStream(4, 5ms);
  for (auto& f : fakes) f->SetBehavior(quick);
  Behavior breaks = quick;
  breaks.fault = Behavior::Fault::kCloseMidStream;
  breaks.fault_after_chunks = 2;
  fakes[0]->SetBehavior(breaks);
  GatewayConfig config = ConfigFor(fakes);
  config.routing = PlainPrefixAware();
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  Tally tally;
  const std::string two = quick.chunks[0] + quick.chunks[1];
  RunLoad(gw->port(), 4, 60, tally, Expect(Concat(quick.chunks), [&](const StreamedResponse& r) {
            return EndsWithStreamError(r) && r.Header(kInstance) == "a" && r.body.starts_with(two);
          }));
  Report("closes_mid_stream", tally, static_cast<int>(pt::MetricSum(gw->port(), kRetriesPrefix)));
  EXPECT_EQ(tally.failed.load(), fakes[0]->requests());
  EXPECT_GT(tally.failed.load(), 0);
  ExpectNothingInFlight(*gw, fakes);
}

// -------------------------------------------------------------------------------------- overload

// With max_in_flight 4, a fifth concurrent request of the pool gets 429 with Retry-After and an
// OpenAI-style body, counted in /metrics, without reaching an instance; the admitted ones finish
// and the ceiling frees up again.
TEST(FaultTest, PoolCeilingAnswers429) {
  Fakes fakes = StartFakes({"a", "b"});
  Behavior slow;
  slow.head_delay = 4000ms;
  for (auto& f : fakes) f->SetBehavior(slow);
  GatewayConfig config = ConfigFor(fakes);
  config.routing.max_in_flight = 4;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  Tally tally;
  std::vector<std::thread> admitted;
  for (int i = 0; i < 4; ++i) {
    admitted.emplace_back([&, i] {
      ++tally.sent;
      const ClientResponse r = pt::Fetch(port, JsonRequest(kChat, ChatBody("m1", "q" + std::to_string(i))));
      tally.Add(r.status() == 200 ? Outcome::kOk : Outcome::kLost,
                "admitted request: status " + std::to_string(r.status()) + " " + r.error.message());
    });
  }
  ASSERT_TRUE(Eventually([&] { return TotalInProgress(fakes) == 4; }, 10'000ms));
  for (int i = 0; i < 6; ++i) {
    ++tally.sent;
    const ClientResponse r = pt::Post(port, kChat, ChatBody("m1", "over"));
    const bool defined = r.status() == 429 && r.Header("retry-after") == "1" &&
                         r.Header("content-type") == "application/json" && ErrorCode(r.body()) == "pool_overloaded";
    tally.Add(defined ? Outcome::kFailed : Outcome::kLost,
              "over the ceiling: status " + std::to_string(r.status()) + " " + r.body());
  }
  EXPECT_EQ(TotalRequests(fakes), 4);
  EXPECT_EQ(pt::Metric(port, R"(prefix_router_rejected_requests_total{model="other",reason="pool_in_flight"})"), 6);
  EXPECT_EQ(pt::Metric(port, R"(prefix_router_responses_total{code="429",origin="gateway"})"), 6);
  for (auto& t : admitted) t.join();
  Report("pool_ceiling_429", tally, static_cast<int>(pt::MetricSum(port, kRetriesPrefix)));
  EXPECT_EQ(tally.failed.load(), 6);
  ExpectNothingInFlight(*gw, fakes);
  slow.head_delay = 0ms;
  for (auto& f : fakes) f->SetBehavior(slow);
  EXPECT_EQ(pt::Post(port, kChat, ChatBody("m1", "after")).status(), 200);
}

// With max_connections 2, a third connection gets 503 with Connection: close and is closed (the
// client reads the 503, not a reset); a flood of connections beyond the limit is refused the
// same way and counted, the open ones keep working, and a slot freed is usable again.
TEST(FaultTest, ConnectionLimitAnswers503) {
  Fakes fakes = StartFakes({"a"});
  GatewayConfig config = ConfigFor(fakes);
  config.max_connections = 2;
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  Tally tally;
  HttpClient first(port, kClientDeadline), second(port, kClientDeadline);
  for (HttpClient* c : {&first, &second}) {
    ++tally.sent;
    const ClientResponse r = c->RoundTrip(JsonRequest(kChat, ChatBody("m1", "held")));
    tally.Add(r.status() == 200 ? Outcome::kOk : Outcome::kLost, "held connection: " + r.body());
  }
  ASSERT_TRUE(first.connected() && second.connected());

  constexpr int kFlood = 40;
  std::atomic<int> refused_properly{0};
  std::vector<std::thread> flood;
  for (int t = 0; t < 4; ++t) {
    flood.emplace_back([&] {
      for (int i = 0; i < kFlood / 4; ++i) {
        ++tally.sent;
        const ClientResponse r = pt::Fetch(port, JsonRequest(kChat, ChatBody("m1", "flood")));
        const bool defined = r.status() == 503 && !r.message.keep_alive() && r.Header("retry-after") == "1" &&
                             ErrorCode(r.body()) == "too_many_connections";
        if (defined) ++refused_properly;
        tally.Add(defined ? Outcome::kFailed : Outcome::kLost,
                  "over the limit: status " + std::to_string(r.status()) + " error '" + r.error.message() + "'");
      }
    });
  }
  for (auto& t : flood) t.join();
  EXPECT_EQ(refused_properly.load(), kFlood);
  EXPECT_EQ(fakes[0]->requests(), 2);

  // The held connections still work; /metrics over one of them shows the count.
  const ClientResponse m = first.RoundTrip(pt::MakeRequest(bhttp::verb::get, "/metrics"));
  ASSERT_EQ(m.status(), 200);
  EXPECT_NE(m.body().find("prefix_router_rejected_connections_total " + std::to_string(kFlood) + "\n"),
            std::string::npos);
  EXPECT_NE(m.body().find("prefix_router_client_connections 2\n"), std::string::npos);
  Report("connection_limit_503", tally, 0);

  // A slot freed is a slot usable again.
  second.Close();
  EXPECT_TRUE(Eventually([&] { return pt::Post(port, kChat, ChatBody("m1", "again")).status() == 200; }, 10'000ms));
}

// ------------------------------------------------------------------------------ client leaves

// Clients leave at every stage: before their body is complete (nothing reaches an instance),
// while their instance has not answered, and mid-stream. Each upstream exchange is aborted (the
// fake sees its connection close) and every in-flight count returns exactly to 0.
TEST(FaultTest, ClientsLeavingAtEveryStage) {
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing.max_in_flight = 1000;  // the pool count is kept (and checked) either way
  auto gw = StartGateway(config);
  ASSERT_NE(gw, nullptr);
  const uint16_t port = gw->port();
  constexpr int kPerStage = 12;

  // Before the body is complete: the head promises more bytes than ever come.
  {
    Tally tally;
    std::vector<std::thread> threads;
    for (int i = 0; i < kPerStage; ++i) {
      threads.emplace_back([&] {
        ++tally.sent;
        pt::ClientRequest req = JsonRequest(kChat, ChatBody("m1", "partial"));
        req.body().resize(req.body().size() / 2);  // Content-Length still says the whole
        HttpClient client(port, kClientDeadline);
        (void)client.Send(req);
        client.Close();
      });
    }
    for (auto& t : threads) t.join();
    // No instance is ever asked; the server's sessions end (read fails on the close).
    EXPECT_TRUE(Eventually([&] { return pt::Metric(port, "prefix_router_client_connections") == 1; }, 10'000ms));
    const int reached = TotalRequests(fakes);
    for (int i = 0; i < kPerStage; ++i) {
      tally.Add(i < reached ? Outcome::kLost : Outcome::kOk, "a partial request reached an instance");
    }
    Report("client_gone_before_body", tally, 0);
  }

  // While waiting for the instance (the head is 10 s away).
  {
    Behavior slow;
    slow.head_delay = 10'000ms;
    for (auto& f : fakes) f->SetBehavior(slow);
    const int aborted_before = TotalAborted(fakes), requests_before = TotalRequests(fakes);
    Tally tally;
    std::vector<std::unique_ptr<HttpClient>> clients;
    for (int i = 0; i < kPerStage; ++i) {
      clients.push_back(std::make_unique<HttpClient>(port, kClientDeadline));
      ++tally.sent;
      EXPECT_FALSE(clients.back()->Send(JsonRequest(kChat, ChatBody("m1", "wait " + std::to_string(i)))));
    }
    ASSERT_TRUE(Eventually([&] { return TotalInProgress(fakes) == kPerStage; }, 10'000ms));
    EXPECT_EQ(TotalInFlight(*gw), kPerStage);
    EXPECT_EQ(DefaultPoolInFlight(*gw), kPerStage);
    for (auto& c : clients) c->Close();
    Eventually([&] { return TotalAborted(fakes) - aborted_before == kPerStage; }, 10'000ms);
    ExpectNothingInFlight(*gw, fakes);
    const int aborted = TotalAborted(fakes) - aborted_before;
    for (int i = 0; i < kPerStage; ++i) {
      tally.Add(i < aborted ? Outcome::kOk : Outcome::kLost, "an upstream request was not aborted");
    }
    EXPECT_EQ(TotalRequests(fakes) - requests_before, kPerStage);  // none retried
    Report("client_gone_waiting", tally, 0);
  }

  // Mid-stream (a 4 s stream, left after its first piece).
  {
    for (auto& f : fakes) f->SetBehavior(SseStream(40, 100ms));
    const int aborted_before = TotalAborted(fakes);
    Tally tally;
    std::vector<std::unique_ptr<HttpClient>> clients;
    for (int i = 0; i < kPerStage; ++i) {
      clients.push_back(std::make_unique<HttpClient>(port, kClientDeadline));
      ++tally.sent;
      EXPECT_FALSE(clients.back()->Send(JsonRequest(kChat, ChatBody("m1", "s" + std::to_string(i), {}, true))));
    }
    for (auto& c : clients) {
      const StreamedResponse r = c->ReadStreamed([](const StreamedResponse&) { return false; });
      EXPECT_EQ(r.status, 200);
      EXPECT_FALSE(r.pieces.empty());
    }
    EXPECT_EQ(TotalInFlight(*gw), kPerStage);
    for (auto& c : clients) c->Close();
    Eventually([&] { return TotalAborted(fakes) - aborted_before == kPerStage; }, 10'000ms);
    ExpectNothingInFlight(*gw, fakes);
    const int aborted = TotalAborted(fakes) - aborted_before;
    for (int i = 0; i < kPerStage; ++i) {
      tally.Add(i < aborted ? Outcome::kOk : Outcome::kLost, "an upstream stream was not aborted");
    }
    Report("client_gone_mid_stream", tally, 0);
  }
  EXPECT_EQ(pt::Metric(port, R"(prefix_router_client_disconnects_total{stage="waiting"})"), kPerStage);
  EXPECT_EQ(pt::Metric(port, R"(prefix_router_client_disconnects_total{stage="streaming"})"), kPerStage);
}

}  // namespace
}  // namespace prefix_router::gateway
