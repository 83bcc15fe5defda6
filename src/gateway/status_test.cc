// Tests of the live status page's data: the bounded TTFT window and request series on their
// own (explicit times), and GET /status.json and /status on a real admin listener in front of
// a Gateway and FakeUpstreams (numbers follow traffic, errors, drain; routes, auth, errors).
// The rendered page itself is tested in a browser by tests/status-page.
#include "gateway/status.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gateway/admin.h"
#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"
#include "testing/fake_upstream.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

using namespace std::chrono_literals;
namespace pt = prefix_router::testing;
namespace bhttp = http::bhttp;
namespace json = boost::json;
using testing::ConfigFor;
using testing::Fakes;
using testing::StartFakes;
using testing::StartGateway;

constexpr std::string_view kToken = "st4tus-T0ken-91c2";

StatusClock::time_point At(double seconds) {
  return StatusClock::time_point(
      std::chrono::duration_cast<StatusClock::duration>(std::chrono::duration<double>(1'000'000 + seconds)));
}

std::unique_ptr<AdminServer> StartAdmin(Gateway& g, std::string_view token = {}) {
  AdminConfig ac;
  ac.enabled = true;
  ac.listen_host = "127.0.0.1";
  ac.listen_port = 0;
  if (!token.empty()) ac.token = Secret(std::string(token));
  auto admin = std::make_unique<AdminServer>(ac, TimeoutsConfig{}, g, ConfigLoader{});
  EXPECT_TRUE(admin->Start().ok());
  return admin;
}

pt::ClientResponse Request(uint16_t port, bhttp::verb method, std::string_view target, pt::Headers headers = {}) {
  return pt::Fetch(port, pt::MakeRequest(method, target, "", headers));
}

json::object StatusOf(uint16_t admin_port) {
  const pt::ClientResponse r = Request(admin_port, bhttp::verb::get, "/status.json");
  EXPECT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(r.Header("content-type"), "application/json");
  EXPECT_EQ(r.Header("cache-control"), "no-store");
  boost::system::error_code ec;
  json::value v = json::parse(r.body(), ec);
  EXPECT_FALSE(ec) << r.body();
  return v.is_object() ? v.as_object() : json::object{};
}

int64_t Int(const json::value& v) {
  return v.is_int64() ? v.as_int64() : v.is_uint64() ? static_cast<int64_t>(v.as_uint64()) : -999;
}
double Num(const json::value& v) { return v.is_double() ? v.as_double() : static_cast<double>(Int(v)); }
std::string Str(const json::value& v) { return v.is_string() ? std::string(v.as_string().c_str()) : "<not a string>"; }

const json::object& InstanceNamed(const json::object& status, std::string_view name) {
  for (const auto& v : status.at("instances").as_array()) {
    if (Str(v.at("name")) == name) return v.as_object();
  }
  static const json::object none;
  ADD_FAILURE() << "no instance " << name;
  return none;
}

void SendChats(uint16_t port, int n, std::string_view key_prefix = "k") {
  for (int i = 0; i < n; ++i) {
    const std::string key = std::string(key_prefix) + std::to_string(i % 5);
    const pt::ClientResponse r =
        pt::Fetch(port, testing::JsonRequest(testing::kChat, testing::ChatBody("m", "hi", key)));
    EXPECT_EQ(r.status(), 200) << r.body();
  }
}

// ---------------------------------------------------------------------------- TtftWindow

// P50 and P90 are nearest-rank percentiles of the samples in the window.
TEST(TtftWindowTest, PercentilesByNearestRank) {
  TtftWindow w;
  EXPECT_EQ(w.Recent(At(0)).samples, 0u);
  for (int ms = 10; ms >= 1; --ms) w.Add(At(0), ms / 1000.0);
  const TtftWindow::Percentiles p = w.Recent(At(1));
  EXPECT_EQ(p.samples, 10u);
  EXPECT_DOUBLE_EQ(p.p50, 0.005);
  EXPECT_DOUBLE_EQ(p.p90, 0.009);
}

// Samples older than the window no longer count; the rest still do.
TEST(TtftWindowTest, OldSamplesFadeOut) {
  TtftWindow w;
  w.Add(At(0), 2.0);
  w.Add(At(30), 0.1);
  EXPECT_EQ(w.Recent(At(59)).samples, 2u);
  const TtftWindow::Percentiles p = w.Recent(At(61));
  EXPECT_EQ(p.samples, 1u);
  EXPECT_DOUBLE_EQ(p.p90, 0.1);
  EXPECT_EQ(w.Recent(At(200)).samples, 0u);
}

// However many samples arrive, the window keeps the newest kCapacity.
TEST(TtftWindowTest, KeepsOnlyTheNewestCapacitySamples) {
  TtftWindow w;
  for (int i = 0; i < 1000; ++i) w.Add(At(0), i < 1000 - static_cast<int>(TtftWindow::kCapacity) ? 9.0 : 0.25);
  const TtftWindow::Percentiles p = w.Recent(At(1));
  EXPECT_EQ(p.samples, TtftWindow::kCapacity);
  EXPECT_DOUBLE_EQ(p.p90, 0.25);
  w.Add(At(1), -5);  // clamped, never negative
  EXPECT_DOUBLE_EQ(w.Recent(At(1)).p50, 0.25);
}

// -------------------------------------------------------------------------- RequestSeries

// Buckets are the differences between samples, with a partial bucket up to now; an instance
// added since a sample counts from zero, and one whose count went down counts zero.
TEST(RequestSeriesTest, BucketsAreDifferencesBetweenSamples) {
  RequestSeries s;
  EXPECT_TRUE(s.Buckets(At(0), {{"a", 5}}).empty());
  s.Sample(At(0), {{"b", 100}, {"a", 10}});
  s.Sample(At(10), {{"a", 40}, {"b", 110}});
  s.Sample(At(20), {{"a", 40}, {"b", 50}, {"c", 7}});
  const std::vector<RequestSeries::Count> now{{"a", 45}, {"c", 8}, {"b", 60}};
  const auto b = s.Buckets(At(25), now);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].total, 40u);
  EXPECT_EQ(b[0].by_instance, (std::vector<uint64_t>{30, 0, 10}));  // parallel to `now`
  EXPECT_DOUBLE_EQ(b[0].seconds, 10);
  EXPECT_DOUBLE_EQ(b[0].ended_ago, 15);
  EXPECT_FALSE(b[0].partial);
  EXPECT_EQ(b[1].by_instance, (std::vector<uint64_t>{0, 7, 0}));  // c is new; b went down
  EXPECT_EQ(b[1].total, 7u);
  EXPECT_TRUE(b[2].partial);
  EXPECT_DOUBLE_EQ(b[2].seconds, 5);
  EXPECT_DOUBLE_EQ(b[2].ended_ago, 0);
  EXPECT_EQ(b[2].by_instance, (std::vector<uint64_t>{5, 1, 10}));
  EXPECT_EQ(b[2].total, 16u);
}

// The series holds at most kBuckets + 1 samples: kBuckets complete buckets and the partial one.
TEST(RequestSeriesTest, RingIsBounded) {
  RequestSeries s;
  for (int i = 0; i < 500; ++i) s.Sample(At(10.0 * i), {{"a", static_cast<uint64_t>(3 * i)}});
  EXPECT_EQ(s.samples(), RequestSeries::kBuckets + 1);
  const auto b = s.Buckets(At(4995), {{"a", 1500}});
  ASSERT_EQ(b.size(), RequestSeries::kBuckets + 1);
  EXPECT_DOUBLE_EQ(b.front().ended_ago, 4995 - 10.0 * (500 - RequestSeries::kBuckets));
  for (size_t i = 0; i + 1 < b.size(); ++i) EXPECT_EQ(b[i].total, 3u);
  EXPECT_EQ(b.back().total, 3u);
}

// The hit-rate window: token counts grow from the oldest sample (the series' span, at most
// five minutes, so older traffic drops out); the engines' counters from the oldest sample that
// had them; an engine whose counters went down (restarted) counts from zero.
TEST(RequestSeriesTest, GrowthOverTheWindow) {
  auto count = [](std::string name, uint64_t prompt, uint64_t cached, double hits, double queries) {
    RequestSeries::Count c{std::move(name)};
    c.prompt_tokens = prompt;
    c.cached_tokens = cached;
    c.engine_hits = hits;
    c.engine_queries = queries;
    return c;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  RequestSeries s;
  double seconds = -1;
  EXPECT_EQ(s.Growth(At(0), {count("a", 5, 1, nan, nan)}, &seconds)[0].prompt_tokens, 5u);
  EXPECT_EQ(seconds, 0);
  s.Sample(At(0), {count("a", 100, 50, nan, nan), count("b", 10, 0, 900, 1000)});
  s.Sample(At(10), {count("a", 300, 200, 40, 100), count("b", 20, 5, 950, 1100)});
  auto g = s.Growth(At(15), {count("a", 700, 500, 340, 600), count("b", 30, 6, 20, 50), count("c", 9, 9, nan, nan)},
                    &seconds);
  EXPECT_DOUBLE_EQ(seconds, 15);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].prompt_tokens, 600u);
  EXPECT_EQ(g[0].cached_tokens, 450u);
  EXPECT_DOUBLE_EQ(g[0].engine_hits, 300);  // from the sample at 10 s, a's first report
  EXPECT_DOUBLE_EQ(g[0].engine_queries, 500);
  EXPECT_DOUBLE_EQ(g[1].engine_hits, 20);  // b restarted: its counters count from zero
  EXPECT_DOUBLE_EQ(g[1].engine_queries, 50);
  EXPECT_EQ(g[2].prompt_tokens, 9u);          // new since the oldest sample
  EXPECT_TRUE(std::isnan(g[2].engine_hits));  // never reported
  // No sample has c's counters yet: they count from their first scrape.
  RequestSeries::Count c = count("c", 9, 9, 70, 100);
  c.engine_hits_first = 30;
  c.engine_queries_first = 40;
  g = s.Growth(At(15), {c}, &seconds);
  EXPECT_DOUBLE_EQ(g[0].engine_hits, 40);
  EXPECT_DOUBLE_EQ(g[0].engine_queries, 60);
  // Old samples leave the window: after kBuckets more samples, growth counts from 10 s on.
  for (size_t i = 1; i <= RequestSeries::kBuckets; ++i) {
    s.Sample(At(10.0 + 10.0 * static_cast<double>(i)), {count("a", 300, 200, 40, 100)});
  }
  g = s.Growth(At(10.0 + 10.0 * RequestSeries::kBuckets), {count("a", 400, 200, 40, 100)}, &seconds);
  EXPECT_DOUBLE_EQ(seconds, 10.0 * RequestSeries::kBuckets);
  EXPECT_EQ(g[0].prompt_tokens, 100u);
}

// ---------------------------------------------------------------------------- /status.json

// Doubles come out in their shortest decimal form, everything else as Boost.JSON writes it.
TEST(StatusJsonTest, ReadableNumbers) {
  const json::value v = json::parse(R"({"a":0.25,"b":3.0,"c":[1,-2,"x\"y\u00e9"],"d":null,"e":true,"f":182.4,"g":{}})");
  std::string out;
  AppendReadableJson(out, v);
  EXPECT_EQ(out, "{\"a\":0.25,\"b\":3,\"c\":[1,-2,\"x\\\"y\u00e9\"],\"d\":null,\"e\":true,\"f\":182.4,\"g\":{}}");
}

// Before traffic every count is zero; after it the requests, shares, affinity, TTFT samples and
// the current bucket of the series account for every request.
TEST(StatusJsonTest, NumbersFollowTraffic) {
  testing::QuietLogs();
  Fakes fakes = StartFakes({"a", "b", "c"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing = testing::PlainPrefixAware();
  config.routing.concurrency_threshold = 7;
  config.pools["other"].strategy = Strategy::kRoundRobin;
  auto g = StartGateway(config);
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g);

  json::object s = StatusOf(admin->port());
  ASSERT_EQ(s.at("instances").as_array().size(), 3u);
  const json::object& a0 = InstanceNamed(s, "a");
  EXPECT_EQ(Str(a0.at("url")), fakes[0]->url());
  EXPECT_EQ(Str(a0.at("state")), "available");
  EXPECT_EQ(Int(a0.at("requests")), 0);
  EXPECT_EQ(Int(a0.at("in_flight")), 0);
  EXPECT_EQ(Int(a0.at("concurrency_threshold")), 7);  // round-robin "other" has none
  EXPECT_EQ(Int(a0.at("ttft").at("samples")), 0);
  EXPECT_TRUE(a0.at("ttft").at("p50_ms").is_null());
  EXPECT_EQ(Int(s.at("gateway").at("requests")), 0);
  EXPECT_EQ(Int(s.at("gateway").at("available")), 3);

  // Pools: each with its strategy and, for prefix-aware, its settings.
  const json::array& pools = s.at("pools").as_array();
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(Str(pools[0].at("name")), "default");
  EXPECT_EQ(Str(pools[0].at("strategy")), "prefix-aware");
  EXPECT_EQ(Int(pools[0].at("prefix_length")), kMinPrefixLength);
  EXPECT_EQ(Int(pools[0].at("concurrency_threshold")), 7);
  EXPECT_EQ(Str(pools[0].at("spill_mode")), "next-preferred");
  EXPECT_EQ(Num(pools[0].at("balance_factor")), 0);
  EXPECT_EQ(Str(pools[1].at("name")), "other");
  EXPECT_EQ(Str(pools[1].at("strategy")), "round-robin");
  EXPECT_FALSE(pools[1].as_object().contains("prefix_length"));

  constexpr int kRequests = 20;
  SendChats(g->port(), kRequests);
  s = StatusOf(admin->port());
  int64_t requests = 0, affinity = 0, ttft_samples = 0;
  double share = 0;
  for (const auto& v : s.at("instances").as_array()) {
    requests += Int(v.at("requests"));
    affinity += Int(v.at("affinity"));
    share += Num(v.at("share"));
    ttft_samples += Int(v.at("ttft").at("samples"));
    EXPECT_EQ(Int(v.at("spill")), 0);
    EXPECT_EQ(Int(v.at("upstream_errors")), 0);
    if (Int(v.at("requests")) > 0) {
      EXPECT_GE(Num(v.at("ttft").at("p90_ms")), Num(v.at("ttft").at("p50_ms")));
      EXPECT_GT(Num(v.at("ttft").at("p50_ms")), 0);
      EXPECT_EQ(Int(v.at("decisions").at("affinity")), Int(v.at("affinity")));
    }
  }
  EXPECT_EQ(requests, kRequests);
  EXPECT_EQ(affinity, kRequests);  // nothing in flight: every key on its first choice
  EXPECT_EQ(ttft_samples, kRequests);
  EXPECT_NEAR(share, 1.0, 1e-9);
  EXPECT_EQ(Int(s.at("gateway").at("requests")), kRequests);

  // The series' current bucket holds the requests since the sample taken at start.
  const json::object& series = s.at("series").as_object();
  EXPECT_EQ(Int(series.at("bucket_seconds")), 10);
  EXPECT_EQ(Int(series.at("max_buckets")), 30);
  const json::array& buckets = series.at("buckets").as_array();
  ASSERT_FALSE(buckets.empty());
  const json::object& current = buckets.back().as_object();
  EXPECT_TRUE(current.at("partial").as_bool());
  EXPECT_EQ(Int(current.at("requests")), kRequests);
  int64_t by = 0;
  for (const auto& n : current.at("by_instance").as_array()) by += Int(n);
  EXPECT_EQ(by, kRequests);
  EXPECT_EQ(current.at("by_instance").as_array().size(), 3u);

  // A sample closes the bucket: it moves into the completed ones.
  g->SampleRequests(StatusClock::now());
  s = StatusOf(admin->port());
  const json::array& after = s.at("series").at("buckets").as_array();
  ASSERT_GE(after.size(), 2u);
  EXPECT_EQ(Int(after[after.size() - 2].at("requests")), kRequests);
  EXPECT_FALSE(after[after.size() - 2].at("partial").as_bool());
  EXPECT_EQ(Int(after.back().at("requests")), 0);
}

// Upstream failures count against the instance that failed; drain and ejection show as states;
// in-flight requests show while they last.
// kv-aware with no instance publishing KV events routes as cache-aware: /status says so (the
// warning logged at start), from the running configuration, so a reload that fixes it clears it.
TEST(StatusJsonTest, WarnsOfKvAwareWithoutKvEvents) {
  testing::QuietLogs();
  Fakes fakes = StartFakes({"a"});
  GatewayConfig config = ConfigFor(fakes);
  config.routing.strategy = Strategy::kKvAware;
  auto g = StartGateway(config);
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g);
  json::object s = StatusOf(admin->port());
  const json::array& warnings = s.at("gateway").at("warnings").as_array();
  ASSERT_EQ(warnings.size(), 1u) << json::serialize(warnings);
  EXPECT_NE(Str(warnings[0]).find("routing.routing_strategy: kv-aware"), std::string::npos) << warnings[0];
  EXPECT_NE(Str(warnings[0]).find("no instance has kv_events"), std::string::npos) << warnings[0];

  GatewayConfig fixed = config;
  fixed.routing.strategy = Strategy::kCacheAware;
  ASSERT_TRUE(ValidateConfig(fixed).ok());
  g->Reload(fixed, "test");
  EXPECT_TRUE(StatusOf(admin->port()).at("gateway").at("warnings").as_array().empty());
}

TEST(StatusJsonTest, ErrorsStatesAndInFlight) {
  testing::QuietLogs();
  Fakes fakes = StartFakes({"a", "b"});
  pt::Behavior broken;
  broken.status = 500;
  fakes[0]->SetBehavior(broken);
  auto g = StartGateway(ConfigFor(fakes));
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g);
  // Random routing: at least 6 requests, and more until one has tried a (six in a row to b alone
  // happen once in 64 runs); a's 500 is retried on b.
  for (int i = 0; i < 64; ++i) {
    const pt::ClientResponse r =
        pt::Fetch(g->port(), testing::JsonRequest(testing::kChat, testing::ChatBody("m", "x")));
    EXPECT_EQ(r.status(), 200) << r.body();
    if (i >= 5 && Int(InstanceNamed(StatusOf(admin->port()), "a").at("upstream_errors")) > 0) break;
  }
  json::object s = StatusOf(admin->port());
  const int64_t a_errors = Int(InstanceNamed(s, "a").at("upstream_errors"));
  EXPECT_GT(a_errors, 0);
  EXPECT_EQ(a_errors, Int(InstanceNamed(s, "a").at("requests")));
  EXPECT_EQ(Int(InstanceNamed(s, "b").at("upstream_errors")), 0);
  EXPECT_EQ(Int(s.at("gateway").at("upstream_errors")), a_errors);
  EXPECT_TRUE(InstanceNamed(s, "a").at("concurrency_threshold").is_null());  // random routing

  ASSERT_TRUE(g->SetDrained("a", true).ok());
  g->routing()->fleet->state(1).available.store(false);
  s = StatusOf(admin->port());
  EXPECT_EQ(Str(InstanceNamed(s, "a").at("state")), "drained");
  EXPECT_EQ(Str(InstanceNamed(s, "b").at("state")), "ejected");
  EXPECT_EQ(Int(s.at("gateway").at("available")), 0);
  g->routing()->fleet->state(1).available.store(true);
  ASSERT_TRUE(g->SetDrained("a", false).ok());

  // A slow answer: the request is in flight on its instance while it lasts.
  pt::Behavior slow;
  slow.head_delay = 1500ms;
  fakes[0]->SetBehavior(slow);
  fakes[1]->SetBehavior(slow);
  std::thread client([&] { pt::Fetch(g->port(), testing::JsonRequest(testing::kChat, testing::ChatBody("m", "y"))); });
  EXPECT_TRUE(pt::Eventually([&] { return Int(StatusOf(admin->port()).at("gateway").at("in_flight")) == 1; }));
  client.join();
  // Counted until the last byte went out: the client may read the answer a moment before.
  EXPECT_TRUE(pt::Eventually([&] { return Int(StatusOf(admin->port()).at("gateway").at("in_flight")) == 0; }));
}

// A pool with flow control shows its settings and its queue (one request holds the pool's one
// slot, one waits: length 1, that body's bytes, an oldest wait), and an empty queue once both
// are answered; a pool without flow control has no flow_control field.
TEST(StatusJsonTest, FlowControlSettingsAndQueue) {
  testing::QuietLogs();
  Fakes fakes = StartFakes({"a"});
  fakes[0]->HoldResponses(true);
  GatewayConfig config = ConfigFor(fakes);
  config.routing.max_in_flight = 1;
  config.routing.flow_control.max_queue = 5;
  config.routing.flow_control.max_queue_bytes = 1 << 20;
  config.routing.flow_control.max_queue_wait = 30;
  config.routing.flow_control.fairness = false;
  config.pools["other"].strategy = Strategy::kRoundRobin;  // no max_in_flight: no flow control
  auto g = StartGateway(config);
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g);
  auto pool_named = [](const json::object& status, std::string_view name) {
    for (const auto& v : status.at("pools").as_array()) {
      if (Str(v.at("name")) == name) return v.as_object();
    }
    ADD_FAILURE() << "no pool " << name;
    return json::object{};
  };
  auto queue_length = [&] {
    const json::object p = pool_named(StatusOf(admin->port()), "default");
    return p.contains("flow_control") ? Int(p.at("flow_control").at("queue").at("length")) : -1;
  };

  json::object s = StatusOf(admin->port());
  const json::object other = pool_named(s, "other");
  EXPECT_FALSE(other.contains("flow_control"));
  EXPECT_EQ(Int(other.at("max_in_flight")), 0);
  json::object pool = pool_named(s, "default");
  EXPECT_EQ(Int(pool.at("max_in_flight")), 1);
  ASSERT_TRUE(pool.contains("flow_control"));
  const json::object& f = pool.at("flow_control").as_object();
  EXPECT_EQ(Int(f.at("max_queue")), 5);
  EXPECT_EQ(Int(f.at("max_queue_bytes")), 1 << 20);
  EXPECT_EQ(Num(f.at("max_queue_wait")), 30);
  EXPECT_FALSE(f.at("fairness").as_bool());
  EXPECT_EQ(Int(f.at("queue").at("length")), 0);
  EXPECT_EQ(Int(f.at("queue").at("bytes")), 0);
  EXPECT_TRUE(f.at("queue").at("oldest_wait_seconds").is_null());
  EXPECT_EQ(Int(f.at("max_in_flight_per_tenant")), 0);
  EXPECT_EQ(Int(f.at("queue").at("tenants_at_bound")), 0);

  const std::string queued_body = testing::ChatBody("m1", "queued");
  pt::ClientResponse holder, queued;
  std::thread holding(
      [&] { holder = pt::Fetch(g->port(), testing::JsonRequest(testing::kChat, testing::ChatBody("m1", "holds"))); });
  ASSERT_TRUE(pt::Eventually([&] { return fakes[0]->in_progress() == 1; }, 10'000ms));
  std::thread waiting([&] { queued = pt::Fetch(g->port(), testing::JsonRequest(testing::kChat, queued_body)); });
  EXPECT_TRUE(pt::Eventually([&] { return queue_length() == 1; }, 10'000ms));
  pool = pool_named(StatusOf(admin->port()), "default");
  const json::object& q = pool.at("flow_control").at("queue").as_object();
  EXPECT_EQ(Int(q.at("length")), 1);
  EXPECT_EQ(Int(q.at("bytes")), static_cast<int64_t>(queued_body.size()));
  ASSERT_FALSE(q.at("oldest_wait_seconds").is_null());
  EXPECT_GE(Num(q.at("oldest_wait_seconds")), 0);
  EXPECT_LT(Num(q.at("oldest_wait_seconds")), 30);  // still waiting: under max_queue_wait
  EXPECT_EQ(Int(pool.at("in_flight")), 1);          // the holder; the queued one has no slot yet

  fakes[0]->HoldResponses(false);
  holding.join();
  waiting.join();
  EXPECT_EQ(holder.status(), 200) << holder.body();
  EXPECT_EQ(queued.status(), 200) << queued.body();
  pool = pool_named(StatusOf(admin->port()), "default");
  EXPECT_EQ(Int(pool.at("flow_control").at("queue").at("length")), 0);
  EXPECT_TRUE(pool.at("flow_control").at("queue").at("oldest_wait_seconds").is_null());
}

// The page is HTML that loads nothing from elsewhere; wrong methods get 405 with Allow and
// unknown paths 404, both with OpenAI-style bodies.
TEST(StatusPageTest, RoutesAndErrors) {
  testing::QuietLogs();
  Fakes fakes = StartFakes({"a"});
  auto g = StartGateway(ConfigFor(fakes));
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g);
  const uint16_t port = admin->port();

  const pt::ClientResponse page = Request(port, bhttp::verb::get, "/status");
  EXPECT_EQ(page.status(), 200);
  EXPECT_EQ(page.Header("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(page.Header("cache-control"), "no-store");
  EXPECT_NE(page.Header("content-security-policy").find("default-src 'none'"), std::string::npos);
  EXPECT_NE(page.body().find("<title>prefix-router status</title>"), std::string::npos);
  EXPECT_NE(page.body().find("fetch('status.json'"), std::string::npos);
  for (std::string_view external : {"<script src", "<link", "@import", "url(", "https://"}) {
    EXPECT_EQ(page.body().find(external), std::string::npos) << external;
  }
  EXPECT_EQ(Request(port, bhttp::verb::get, "/status?x=1").status(), 200);

  for (std::string_view path : {"/status", "/status.json"}) {
    for (bhttp::verb m : {bhttp::verb::head, bhttp::verb::post, bhttp::verb::delete_}) {
      const pt::ClientResponse r = Request(port, m, path);
      EXPECT_EQ(r.status(), 405) << path;
      EXPECT_EQ(r.Header("allow"), "GET");
      if (m != bhttp::verb::head) {
        EXPECT_EQ(testing::ErrorCode(r.body()), "method_not_allowed");
      }
    }
  }
  for (std::string_view path : {"/status/x", "/status.html", "/statusjson", "/"}) {
    const pt::ClientResponse r = Request(port, bhttp::verb::get, path);
    EXPECT_EQ(r.status(), 404) << path;
    EXPECT_EQ(testing::ErrorCode(r.body()), "not_found") << path;
  }
}

// With a token, the page and its data need it like every admin route: as a bearer token, or as
// the password of Basic authentication (what a browser sends after its login dialog, which the
// Basic challenge brings up).
TEST(StatusPageTest, SameAuthenticationAsTheAdminRoutes) {
  testing::QuietLogs();
  Fakes fakes = StartFakes({"a"});
  auto g = StartGateway(ConfigFor(fakes));
  ASSERT_NE(g, nullptr);
  auto admin = StartAdmin(*g, kToken);
  const uint16_t port = admin->port();
  auto basic = [](std::string_view user_password) {
    // base64 by hand for the two fixtures below, checked by the 200/401 they produce.
    return pt::Headers{{"Authorization", "Basic " + std::string(user_password)}};
  };
  // "admin:st4tus-T0ken-91c2" and "admin:wrong" in base64.
  const pt::Headers good = basic("YWRtaW46c3Q0dHVzLVQwa2VuLTkxYzI=");
  const pt::Headers wrong = basic("YWRtaW46d3Jvbmc=");
  for (std::string_view path : {"/status", "/status.json"}) {
    const pt::ClientResponse r = Request(port, bhttp::verb::get, path);
    EXPECT_EQ(r.status(), 401);
    std::vector<std::string> challenges;
    for (const auto& f : r.message) {
      if (f.name() == bhttp::field::www_authenticate) challenges.emplace_back(f.value());
    }
    EXPECT_EQ(challenges.size(), 2u);
    EXPECT_EQ(r.Header("www-authenticate"), "Bearer realm=\"prefix-router admin\"");
    EXPECT_EQ(Request(port, bhttp::verb::get, path, wrong).status(), 401);
    EXPECT_EQ(Request(port, bhttp::verb::get, path, basic("!!!")).status(), 401);
    EXPECT_EQ(Request(port, bhttp::verb::get, path, good).status(), 200);
    EXPECT_EQ(Request(port, bhttp::verb::get, path, {{"Authorization", "Bearer " + std::string(kToken)}}).status(),
              200);
  }
  // Basic works for the other admin routes too (it is the same check).
  EXPECT_EQ(Request(port, bhttp::verb::get, "/admin/instances", good).status(), 200);
}

}  // namespace
}  // namespace prefix_router::gateway
