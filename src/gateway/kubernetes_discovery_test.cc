// Pod discovery from the Kubernetes API (gateway/kubernetes_discovery.h) against an in-process
// fake API server on loopback (plain HTTP, or HTTPS with a test CA): lists, watch streams, Ready
// changes, 410 relists, the bearer token and the CA, an API server that goes away, InferencePool
// mode, and a gateway routing to a pod the fake announced.
//
// The fake keeps pods and one InferencePool with resourceVersions and an event history, answers
// list and watch (chunked JSON lines) as the API server does, and records every request, which
// must be one of KubernetesApiCalls(). A pod's instance is podIP:target_port, one port for all:
// the end-to-end test puts one Ready pod on 127.0.0.1 at the port of a FakeUpstream.
#include "gateway/kubernetes_discovery.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "gateway/gateway_test_util.h"
#include "http/tls.h"
#include "testing/fake_upstream.h"
#include "testing/http_client.h"
#include "testing/test_pki.h"
#include "testing/wait.h"

namespace prefix_router::gateway {
namespace {

namespace net = http::net;
namespace bhttp = http::bhttp;
namespace pt = prefix_router::testing;
using std::chrono::milliseconds;

// ------------------------------------------------------------------------------ the fake

struct FakePod {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string ip;
  bool ready = true;
  bool deleting = false;
};

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string LabelsJson(const std::map<std::string, std::string>& labels) {
  std::string out = "{";
  for (const auto& [k, v] : labels) out += (out.size() > 1 ? "," : "") + Quote(k) + ":" + Quote(v);
  return out + "}";
}

std::string PodJson(const FakePod& p, uint64_t rv) {
  std::string meta = "{\"name\":" + Quote(p.name) + ",\"namespace\":\"ns\",\"resourceVersion\":" +
                     Quote(std::to_string(rv)) + ",\"labels\":" + LabelsJson(p.labels);
  if (p.deleting) meta += ",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"";
  meta += "}";
  std::string status = "{\"phase\":\"Running\"";
  if (!p.ip.empty()) status += ",\"podIP\":" + Quote(p.ip);
  status += ",\"conditions\":[{\"type\":\"Initialized\",\"status\":\"True\"},{\"type\":\"Ready\",\"status\":" +
            Quote(p.ready ? "True" : "False") + "}]}";
  return "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":" + meta + ",\"spec\":{},\"status\":" + status + "}";
}

std::string PoolJson(const std::string& name, const std::map<std::string, std::string>& selector, int port,
                     uint64_t rv) {
  return "{\"kind\":\"InferencePool\",\"apiVersion\":\"inference.networking.k8s.io/v1\",\"metadata\":{\"name\":" +
         Quote(name) + ",\"resourceVersion\":" + Quote(std::to_string(rv)) +
         "},\"spec\":{\"selector\":{\"matchLabels\":" + LabelsJson(selector) + "},\"targetPorts\":[{\"number\":" +
         std::to_string(port) + "}],\"endpointPickerRef\":{\"name\":\"epp\",\"port\":{\"number\":9002}}}}";
}

// "a=b,c=d" (percent-decoded) against a pod's labels.
bool Matches(const std::string& selector, const std::map<std::string, std::string>& labels) {
  size_t start = 0;
  while (start < selector.size()) {
    size_t comma = selector.find(',', start);
    if (comma == std::string::npos) comma = selector.size();
    const std::string term = selector.substr(start, comma - start);
    const size_t eq = term.find('=');
    auto it = labels.find(term.substr(0, eq));
    if (eq == std::string::npos || it == labels.end() || it->second != term.substr(eq + 1)) return false;
    start = comma + 1;
  }
  return true;
}

std::string Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::map<std::string, std::string> Query(std::string_view target) {
  std::map<std::string, std::string> out;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    const size_t eq = kv.find('=');
    out[std::string(kv.substr(0, eq))] = eq == std::string_view::npos ? "" : Decode(kv.substr(eq + 1));
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
  }
  return out;
}

class FakeApiServer final : public http::Handler {
 public:
  struct Call {
    std::string group, resource, verb, target, authorization;
  };

  Status Start(uint16_t port = 0, std::shared_ptr<net::ssl::context> tls = nullptr) {
    http::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.io_threads = 1;
    o.tls = std::move(tls);
    server_ = std::make_unique<http::Server>(o, *this);
    Status s = server_->Start();
    if (s.ok()) port_ = server_->port();
    return s;
  }
  void Stop() {
    if (server_) {
      EndWatches();  // the streams end within a poll (2 ms)
      server_->Stop(milliseconds(500));
      server_.reset();
    }
  }
  ~FakeApiServer() override { Stop(); }
  uint16_t port() const { return port_; }

  void SetPod(FakePod pod) {
    std::lock_guard lock(mu_);
    const bool known = pods_.contains(pod.name);
    ++rv_;
    pods_[pod.name] = pod;
    events_.push_back({rv_, false, pod.labels, Line(known ? "MODIFIED" : "ADDED", PodJson(pod, rv_))});
  }
  void DeletePod(const std::string& name) {
    std::lock_guard lock(mu_);
    auto it = pods_.find(name);
    if (it == pods_.end()) return;
    ++rv_;
    events_.push_back({rv_, false, it->second.labels, Line("DELETED", PodJson(it->second, rv_))});
    pods_.erase(it);
  }
  // Changes a pod with no event in the history: only a list sees it (what a watcher that was
  // away, or told 410, must catch up with).
  void SetPodSilently(FakePod pod) {
    std::lock_guard lock(mu_);
    ++rv_;
    pods_[pod.name] = pod;
  }
  void DeletePodSilently(const std::string& name) {
    std::lock_guard lock(mu_);
    ++rv_;
    pods_.erase(name);
  }
  void SetPool(const std::string& name, std::map<std::string, std::string> selector, int port) {
    std::lock_guard lock(mu_);
    ++rv_;
    const bool known = pool_.has_value();
    pool_ = PoolJson(name, selector, port, rv_);
    pool_name_ = name;
    events_.push_back({rv_, true, {}, Line(known ? "MODIFIED" : "ADDED", *pool_)});
  }
  // The next `n` watches are answered 410 Gone: as the HTTP status, or as an ERROR event.
  void GoneNextWatches(int n, bool as_event) {
    std::lock_guard lock(mu_);
    (as_event ? gone_events_ : gone_statuses_) = n;
  }
  // Every request is answered `status` (0: served normally).
  void FailWith(int status) { fail_status_.store(status); }
  // Ends the watch streams open now, normally (the terminating chunk).
  void EndWatches() { watch_epoch_.fetch_add(1); }
  // Bookmarks every watch stream (an event that carries only a resourceVersion).
  void Bookmark() {
    std::lock_guard lock(mu_);
    ++rv_;
    events_.push_back({rv_, false, {}, Line("BOOKMARK", "{\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":" +
                                                            Quote(std::to_string(rv_)) + "}}"), true});
  }

  std::vector<Call> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  int count(std::string_view resource, std::string_view verb) const {
    int n = 0;
    for (const Call& c : calls()) n += c.resource == resource && c.verb == verb;
    return n;
  }
  int open_watches() const { return open_watches_.load(); }

  net::awaitable<void> Handle(http::Exchange& ex) override {
    const std::string target(ex.request().target());
    const std::string path = target.substr(0, target.find('?'));
    const auto query = Query(target);
    Call call;
    call.target = target;
    if (auto it = ex.request().find(bhttp::field::authorization); it != ex.request().end()) {
      call.authorization = std::string(it->value());
    }
    // /api/v1/namespaces/NS/RESOURCE or /apis/GROUP/v1/namespaces/NS/RESOURCE
    std::vector<std::string> parts;
    for (size_t s = 1; s <= path.size();) {
      size_t e = path.find('/', s);
      if (e == std::string::npos) e = path.size();
      parts.push_back(path.substr(s, e - s));
      s = e + 1;
    }
    if (parts.size() == 5 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces") {
      call.resource = parts[4];
    } else if (parts.size() == 6 && parts[0] == "apis" && parts[2] == "v1" && parts[3] == "namespaces") {
      call.group = parts[1];
      call.resource = parts[5];
    }
    call.verb = query.contains("watch") ? "watch" : "list";
    {
      std::lock_guard lock(mu_);
      calls_.push_back(call);
    }
    if (ex.request().method() != bhttp::verb::get || call.resource.empty()) {
      co_await ex.SendError(404, "no such path");
      co_return;
    }
    if (const int fail = fail_status_.load(); fail != 0) {
      co_await ex.SendError(fail, "failing on purpose");
      co_return;
    }
    const bool pools = call.resource == "inferencepools";
    if (call.verb == "list") {
      co_await ex.Send(List(pools, query));
      co_return;
    }
    co_await Watch(ex, pools, query);
  }

 private:
  struct Event {
    uint64_t rv;
    bool pools;
    std::map<std::string, std::string> labels;
    std::string line;
    bool bookmark = false;
  };
  static std::string Line(std::string_view type, const std::string& object) {
    return "{\"type\":\"" + std::string(type) + "\",\"object\":" + object + "}\n";
  }

  http::StringResponse List(bool pools, const std::map<std::string, std::string>& query) {
    std::lock_guard lock(mu_);
    std::string items;
    if (pools) {
      const auto fs = query.find("fieldSelector");
      if (pool_ && fs != query.end() && fs->second == "metadata.name=" + pool_name_) items = *pool_;
    } else {
      const auto sel = query.find("labelSelector");
      for (const auto& [name, pod] : pods_) {
        if (sel != query.end() && !Matches(sel->second, pod.labels)) continue;
        items += (items.empty() ? "" : ",") + PodJson(pod, rv_);
      }
    }
    http::StringResponse res{bhttp::status::ok, 11};
    res.set(bhttp::field::content_type, "application/json");
    res.body() = std::string("{\"kind\":\"") + (pools ? "InferencePoolList" : "PodList") +
                 "\",\"metadata\":{\"resourceVersion\":" + Quote(std::to_string(rv_)) + "},\"items\":[" + items + "]}";
    res.prepare_payload();
    return res;
  }

  net::awaitable<void> Watch(http::Exchange& ex, bool pools, std::map<std::string, std::string> query) {
    bool gone_event = false;
    {
      std::lock_guard lock(mu_);
      if (gone_statuses_ > 0) {
        --gone_statuses_;
        http::StringResponse res{bhttp::status::gone, 11};
        res.set(bhttp::field::content_type, "application/json");
        res.body() = R"({"kind":"Status","status":"Failure","reason":"Expired","code":410})";
        res.prepare_payload();
        co_await ex.Send(std::move(res));
        co_return;
      }
      if (gone_events_ > 0) {
        --gone_events_;
        gone_event = true;
      }
    }
    bhttp::response_header<> head;
    head.result(bhttp::status::ok);
    head.set(bhttp::field::content_type, "application/json");
    if (!co_await ex.SendHead(std::move(head))) co_return;
    if (gone_event) {
      const std::string line =
          "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"too old "
          "resource version\",\"reason\":\"Expired\",\"code\":410}}\n";
      co_await ex.SendBody(net::buffer(line));
      co_await ex.Finish();
      co_return;
    }
    uint64_t cursor = std::stoull(query["resourceVersion"].empty() ? "0" : query["resourceVersion"]);
    const std::string selector = pools ? "" : query["labelSelector"];
    const uint64_t epoch = watch_epoch_.load();
    open_watches_.fetch_add(1);
    net::steady_timer timer(ex.executor());
    bool ok = true;
    while (ok && epoch == watch_epoch_.load()) {
      std::string out;
      {
        std::lock_guard lock(mu_);
        for (const Event& e : events_) {
          if (e.rv <= cursor) continue;
          cursor = e.rv;
          if (e.bookmark ? pools : (e.pools != pools || (!pools && !Matches(selector, e.labels)))) continue;
          out += e.line;
        }
      }
      if (!out.empty()) ok = co_await ex.SendBody(net::buffer(out));
      timer.expires_after(milliseconds(2));
      co_await timer.async_wait(http::kTuple);
    }
    open_watches_.fetch_sub(1);
    if (ok) co_await ex.Finish();
  }

  std::unique_ptr<http::Server> server_;
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  uint64_t rv_ = 1000;
  std::map<std::string, FakePod> pods_;
  std::optional<std::string> pool_;
  std::string pool_name_;
  std::vector<Event> events_;
  std::vector<Call> calls_;
  int gone_statuses_ = 0;
  int gone_events_ = 0;
  std::atomic<int> fail_status_{0};
  std::atomic<uint64_t> watch_epoch_{0};
  std::atomic<int> open_watches_{0};
};

// Every request the client made is a call of KubernetesApiCalls() (the RBAC Role's rules).
void ExpectOnlyListedCalls(const FakeApiServer& api) {
  const auto allowed = KubernetesApiCalls();
  for (const auto& c : api.calls()) {
    const KubernetesApiCall made{c.group, c.resource, c.verb};
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), made), allowed.end())
        << "a request outside KubernetesApiCalls(): " << c.target;
  }
}

// ---------------------------------------------------------------------------- the harness

// A watcher on its own I/O thread.
class Running {
 public:
  explicit Running(KubernetesWatcherOptions options) {
    watcher_ = std::make_shared<KubernetesWatcher>(std::move(options));
    net::co_spawn(ctx_, KubernetesWatcher::Run(watcher_), net::detached);
    thread_ = std::thread([this] { ctx_.run(); });
  }
  ~Running() {
    watcher_->Stop();
    thread_.join();
  }
  KubernetesWatcher& operator*() { return *watcher_; }
  KubernetesWatcher* operator->() { return watcher_.get(); }

 private:
  net::io_context ctx_;
  std::shared_ptr<KubernetesWatcher> watcher_;
  std::thread thread_;
};

KubernetesWatcherOptions Options(const FakeApiServer& api, bool https = false) {
  KubernetesWatcherOptions o;
  o.config.enabled = true;
  o.config.api_host = "127.0.0.1";
  o.config.api_port = api.port();
  o.config.api_https = https;
  o.config.token_file = "";
  o.config.resolved_namespace = "ns";
  o.config.selector = {{"app", "vllm"}};
  o.config.target_port = 8000;
  o.connect_timeout = milliseconds(1000);
  o.request_timeout = milliseconds(2000);
  o.initial_backoff = milliseconds(20);
  o.max_backoff = milliseconds(100);
  return o;
}

FakePod Pod(std::string name, std::string ip, bool ready = true, std::string app = "vllm") {
  return FakePod{std::move(name), {{"app", std::move(app)}}, std::move(ip), ready};
}

// "pod=ip:port,..." of the watcher's current endpoints.
std::string Endpoints(KubernetesWatcher& w) {
  std::string out;
  for (const auto& e : w.snapshot().endpoints) {
    out += (out.empty() ? "" : ",") + e.pod + "=" + e.address + ":" + std::to_string(e.port);
  }
  return out;
}

bool EndpointsBecome(KubernetesWatcher& w, const std::string& want, milliseconds limit = milliseconds(5000)) {
  return pt::Eventually([&] { return Endpoints(w) == want; }, limit);
}

// ----------------------------------------------------------------------------- the parsers

// A pod's name, IP and readiness come from metadata, status.podIP and the Ready condition.
TEST(KubernetesParseTest, PodReadinessAndAddress) {
  auto ready = ParsePod(PodJson(Pod("a", "10.0.0.1"), 5));
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_EQ(ready->name, "a");
  EXPECT_EQ(ready->ip, "10.0.0.1");
  EXPECT_TRUE(ready->routable());
  EXPECT_FALSE(ParsePod(PodJson(Pod("b", "10.0.0.2", false), 5))->routable());
  EXPECT_FALSE(ParsePod(PodJson(Pod("c", ""), 5))->routable());  // no IP yet
  FakePod deleting = Pod("d", "10.0.0.4");
  deleting.deleting = true;
  EXPECT_FALSE(ParsePod(PodJson(deleting, 5))->routable());
  EXPECT_FALSE(ParsePod(R"({"metadata":{"name":"e"}})")->routable());  // no status at all
  EXPECT_FALSE(ParsePod(R"({"status":{}})").ok());                     // no name
  EXPECT_FALSE(ParsePod("not json").ok());
}

// A list gives its resourceVersion and items; a null items list is an empty one.
TEST(KubernetesParseTest, ListsAndResourceVersion) {
  auto list = ParsePodList(R"({"kind":"PodList","metadata":{"resourceVersion":"77"},"items":[)" +
                           PodJson(Pod("a", "10.0.0.1"), 70) + "," + R"({"metadata":{}})" + "]}");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->resource_version, "77");
  ASSERT_EQ(list->items.size(), 1u);
  EXPECT_EQ(list->invalid, 1u);
  auto empty = ParsePodList(R"({"metadata":{"resourceVersion":"3"},"items":null})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->items.empty());
  EXPECT_FALSE(ParsePodList(R"({"metadata":{}})").ok());
}

// An InferencePool gives matchLabels and the first targetPorts number; without them it is invalid.
TEST(KubernetesParseTest, InferencePool) {
  auto pool = ParseInferencePool(PoolJson("p", {{"app", "vllm"}, {"tier", "gpu"}}, 8000, 3));
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(pool->name, "p");
  EXPECT_EQ(LabelSelectorText(pool->selector), "app=vllm,tier=gpu");
  EXPECT_EQ(pool->target_port, 8000);
  EXPECT_FALSE(ParseInferencePool(R"({"metadata":{"name":"p"},"spec":{"selector":{"matchLabels":{"a":"b"}}}})").ok());
  EXPECT_FALSE(
      ParseInferencePool(R"({"metadata":{"name":"p"},"spec":{"targetPorts":[{"number":80}],"selector":{}}})").ok());
  auto list = ParseInferencePoolList(R"({"metadata":{"resourceVersion":"9"},"items":[)" +
                                     PoolJson("p", {{"a", "b"}}, 80, 9) + "]}");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->items.at(0).target_port, 80);
}

// Watch lines: each type, its object's resourceVersion, an ERROR's code.
TEST(KubernetesParseTest, WatchEvents) {
  using T = KubernetesWatchEvent::Type;
  auto added = ParseWatchEvent("{\"type\":\"ADDED\",\"object\":" + PodJson(Pod("a", "10.0.0.1"), 12) + "}", false);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_EQ(added->type, T::kAdded);
  EXPECT_EQ(added->resource_version, "12");
  EXPECT_EQ(added->pod->ip, "10.0.0.1");
  EXPECT_EQ(ParseWatchEvent("{\"type\":\"MODIFIED\",\"object\":" + PodJson(Pod("a", "1.2.3.4"), 1) + "}", false)->type,
            T::kModified);
  EXPECT_EQ(ParseWatchEvent("{\"type\":\"DELETED\",\"object\":" + PodJson(Pod("a", "1.2.3.4"), 1) + "}", false)->type,
            T::kDeleted);
  auto bookmark = ParseWatchEvent(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"99"}}})", false);
  EXPECT_EQ(bookmark->type, T::kBookmark);
  EXPECT_EQ(bookmark->resource_version, "99");
  auto error = ParseWatchEvent(R"({"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}})", false);
  EXPECT_EQ(error->type, T::kError);
  EXPECT_EQ(error->error_code, 410);
  auto pool = ParseWatchEvent("{\"type\":\"MODIFIED\",\"object\":" + PoolJson("p", {{"a", "b"}}, 81, 4) + "}", true);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(pool->pool->target_port, 81);
  EXPECT_FALSE(ParseWatchEvent(R"({"type":"SURPRISE","object":{}})", false).ok());
  EXPECT_FALSE(ParseWatchEvent("{", false).ok());
}

// Targets follow the API's paths; selectors are percent-encoded.
TEST(KubernetesParseTest, RequestTargets) {
  EXPECT_EQ(KubernetesApiTarget(KubernetesApiCalls()[0], "ns", "labelSelector=" + EncodeQueryValue("app=vllm")),
            "/api/v1/namespaces/ns/pods?labelSelector=app%3Dvllm");
  EXPECT_EQ(KubernetesApiTarget(KubernetesApiCalls()[3], "ns", "resourceVersion=5"),
            "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools?resourceVersion=5&watch=1");
  ASSERT_EQ(KubernetesApiCalls().size(), 4u);
}

// ----------------------------------------------------------------------------- the watcher

class KubernetesWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gateway::testing::QuietLogs();
    ASSERT_TRUE(api_.Start().ok());
  }
  void TearDown() override { ExpectOnlyListedCalls(api_); }
  FakeApiServer api_;
};

// The list gives the Ready pods that match the selector, at podIP:target_port; then the watch
// follows ADDED, MODIFIED (Ready changes both ways, deletion started) and DELETED events.
TEST_F(KubernetesWatchTest, ListThenWatchEventsAndReadyChanges) {
  api_.SetPod(Pod("a", "10.0.0.1"));
  api_.SetPod(Pod("b", "10.0.0.2", /*ready=*/false));
  api_.SetPod(Pod("other", "10.0.0.9", true, "other-app"));
  Running w(Options(api_));
  ASSERT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000"));
  EXPECT_TRUE(w->snapshot().synced);
  ASSERT_TRUE(pt::Eventually([&] { return api_.open_watches() == 1; }));

  api_.SetPod(Pod("c", "10.0.0.3"));  // ADDED
  EXPECT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000,c=10.0.0.3:8000"));
  api_.SetPod(Pod("b", "10.0.0.2", true));  // MODIFIED: now Ready
  EXPECT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000,b=10.0.0.2:8000,c=10.0.0.3:8000"));
  api_.SetPod(Pod("a", "10.0.0.1", false));  // MODIFIED: no longer Ready
  EXPECT_TRUE(EndpointsBecome(*w, "b=10.0.0.2:8000,c=10.0.0.3:8000"));
  FakePod deleting = Pod("c", "10.0.0.3");
  deleting.deleting = true;
  api_.SetPod(deleting);  // terminating: out of rotation before it goes
  EXPECT_TRUE(EndpointsBecome(*w, "b=10.0.0.2:8000"));
  api_.DeletePod("b");  // DELETED
  EXPECT_TRUE(EndpointsBecome(*w, ""));
  EXPECT_EQ(api_.count("pods", "list"), 1);
  EXPECT_EQ(w->errors(), 0u);
  // Every watch asks for bookmarks and starts from a resourceVersion.
  for (const auto& c : api_.calls()) {
    if (c.verb != "watch") continue;
    EXPECT_NE(c.target.find("allowWatchBookmarks=true"), std::string::npos) << c.target;
    EXPECT_NE(c.target.find("resourceVersion=1"), std::string::npos) << c.target;
    EXPECT_NE(c.target.find("labelSelector=app%3Dvllm"), std::string::npos) << c.target;
  }
}

// A watch that ends normally is resumed from the last resourceVersion seen (a bookmark's
// included), without a list: events in between are not lost.
TEST_F(KubernetesWatchTest, NormalEndResumesFromTheLastResourceVersion) {
  api_.SetPod(Pod("a", "10.0.0.1"));
  Running w(Options(api_));
  ASSERT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000"));
  ASSERT_TRUE(pt::Eventually([&] { return api_.open_watches() == 1; }));
  api_.Bookmark();
  api_.EndWatches();
  api_.SetPod(Pod("b", "10.0.0.2"));  // while no watch may be open
  EXPECT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000,b=10.0.0.2:8000"));
  EXPECT_EQ(api_.count("pods", "list"), 1);
  EXPECT_GE(api_.count("pods", "watch"), 2);
  EXPECT_EQ(w->errors(), 0u);
}

// 410 Gone, as the watch's HTTP status or as an ERROR event, makes the watcher list again, and
// the new list replaces what it knew (changes made without events are caught up).
TEST_F(KubernetesWatchTest, GoneRelistsAsStatusAndAsErrorEvent) {
  for (const bool as_event : {false, true}) {
    SCOPED_TRACE(as_event ? "ERROR event" : "HTTP 410");
    FakeApiServer api;
    ASSERT_TRUE(api.Start().ok());
    api.SetPod(Pod("a", "10.0.0.1"));
    Running w(Options(api));
    ASSERT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000"));
    ASSERT_TRUE(pt::Eventually([&] { return api.open_watches() == 1; }));
    api.GoneNextWatches(1, as_event);
    api.DeletePodSilently("a");
    api.SetPodSilently(Pod("b", "10.0.0.2"));
    api.EndWatches();
    EXPECT_TRUE(EndpointsBecome(*w, "b=10.0.0.2:8000"));
    EXPECT_EQ(api.count("pods", "list"), 2);
    ExpectOnlyListedCalls(api);
  }
}

// The bearer token is sent on every request, and read again at each connection (tokens rotate).
TEST_F(KubernetesWatchTest, BearerTokenIsSentAndReadAgain) {
  gateway::testing::TempFile token("k8s-token");
  token.Write("first-token\n");
  api_.SetPod(Pod("a", "10.0.0.1"));
  KubernetesWatcherOptions o = Options(api_);
  o.config.token_file = token.path();
  Running w(std::move(o));
  ASSERT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000"));
  ASSERT_TRUE(pt::Eventually([&] { return api_.open_watches() == 1; }));
  token.Write("second-token\n");
  api_.EndWatches();
  ASSERT_TRUE(pt::Eventually([&] { return api_.count("pods", "watch") >= 2; }));
  const auto calls = api_.calls();
  EXPECT_EQ(calls.at(0).authorization, "Bearer first-token");
  EXPECT_EQ(calls.back().authorization, "Bearer second-token");
}

// The API server answering errors, then going away: the pods stay; once it is back, the
// watcher reconnects (backing off meanwhile) and catches up.
TEST_F(KubernetesWatchTest, ApiServerDownKeepsInstancesAndReconnects) {
  api_.SetPod(Pod("a", "10.0.0.1"));
  api_.SetPod(Pod("b", "10.0.0.2"));
  Running w(Options(api_));
  ASSERT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000,b=10.0.0.2:8000"));
  ASSERT_TRUE(pt::Eventually([&] { return api_.open_watches() == 1; }));

  api_.FailWith(500);
  api_.EndWatches();
  ASSERT_TRUE(pt::Eventually([&] { return w->errors() >= 2; }));
  EXPECT_EQ(Endpoints(*w), "a=10.0.0.1:8000,b=10.0.0.2:8000");

  const uint16_t port = api_.port();
  api_.Stop();
  const uint64_t errors = w->errors();
  ASSERT_TRUE(pt::Eventually([&] { return w->errors() >= errors + 2; }));
  EXPECT_EQ(Endpoints(*w), "a=10.0.0.1:8000,b=10.0.0.2:8000");  // nothing dropped on errors alone

  api_.FailWith(0);
  api_.DeletePod("a");  // while the watcher could not see it
  ASSERT_TRUE(api_.Start(port).ok());
  EXPECT_TRUE(EndpointsBecome(*w, "b=10.0.0.2:8000"));
}

// Over HTTPS the API server is verified against ca_file: the right CA works; a wrong one fails
// the connection, keeps the instances, and is read again at the next connection.
TEST_F(KubernetesWatchTest, CaFileIsUsedAndAWrongCaKeepsInstances) {
  pt::TestPki right("k8s-api-ca");
  pt::TestPki wrong("someone-else");
  ASSERT_TRUE(right.ok() && wrong.ok());
  auto cert = right.Issue("kubernetes", 1);
  ASSERT_TRUE(cert.ok());
  auto tls = http::MakeServerTlsContext(cert->cert, cert->key);
  ASSERT_TRUE(tls.ok());
  FakeApiServer api;
  ASSERT_TRUE(api.Start(0, *tls).ok());
  api.SetPod(Pod("a", "10.0.0.1"));
  gateway::testing::TempFile ca("k8s-ca.pem");
  std::ifstream right_in(right.ca_file());
  std::ifstream wrong_in(wrong.ca_file());
  const std::string right_pem((std::istreambuf_iterator<char>(right_in)), {});
  const std::string wrong_pem((std::istreambuf_iterator<char>(wrong_in)), {});
  ca.Write(right_pem);
  KubernetesWatcherOptions o = Options(api, /*https=*/true);
  o.config.ca_file = ca.path();
  Running w(std::move(o));
  ASSERT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000"));
  ASSERT_TRUE(pt::Eventually([&] { return api.open_watches() == 1; }));

  ca.Write(wrong_pem);
  const int watches = api.count("pods", "watch");
  api.EndWatches();
  ASSERT_TRUE(pt::Eventually([&] { return w->errors() >= 2; }));
  EXPECT_EQ(api.count("pods", "watch"), watches);  // the handshake failed: no request got through
  EXPECT_EQ(Endpoints(*w), "a=10.0.0.1:8000");

  api.SetPod(Pod("b", "10.0.0.2"));
  ca.Write(right_pem);
  EXPECT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000,b=10.0.0.2:8000"));
  ExpectOnlyListedCalls(api);

  // A watcher that never had the right CA never syncs.
  gateway::testing::TempFile bad_ca("k8s-bad-ca.pem");
  bad_ca.Write(wrong_pem);
  KubernetesWatcherOptions bad = Options(api, /*https=*/true);
  bad.config.ca_file = bad_ca.path();
  Running never(std::move(bad));
  ASSERT_TRUE(pt::Eventually([&] { return never->errors() >= 2; }));
  EXPECT_FALSE(never->snapshot().synced);
}

// InferencePool mode: the selector and the port come from the pool, and follow it when it
// changes (the pods are listed again with the new selector).
TEST_F(KubernetesWatchTest, InferencePoolSelectorAndPortAreFollowed) {
  api_.SetPool("pool", {{"app", "vllm"}}, 8000);
  api_.SetPod(Pod("a", "10.0.0.1"));
  api_.SetPod(Pod("b", "10.0.0.2", true, "sglang"));
  KubernetesWatcherOptions o = Options(api_);
  o.config.selector.clear();
  o.config.target_port = 0;
  o.config.inference_pool = "pool";
  Running w(std::move(o));
  ASSERT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:8000"));
  ASSERT_TRUE(pt::Eventually([&] { return api_.open_watches() == 2; }));  // the pool's and the pods'

  api_.SetPool("pool", {{"app", "vllm"}}, 9000);  // the port alone
  EXPECT_TRUE(EndpointsBecome(*w, "a=10.0.0.1:9000"));
  api_.SetPool("pool", {{"app", "sglang"}}, 9001);  // another selector
  EXPECT_TRUE(EndpointsBecome(*w, "b=10.0.0.2:9001"));
  EXPECT_EQ(api_.count("inferencepools", "list"), 1);
  EXPECT_EQ(api_.count("pods", "list"), 2);
  for (const auto& c : api_.calls()) {
    if (c.resource == "inferencepools") {
      EXPECT_NE(c.target.find("fieldSelector=metadata.name%3Dpool"), std::string::npos) << c.target;
    }
  }
}

// ------------------------------------------------------------------------ the gateway

// A gateway with discovery.kubernetes (no configured instance) routes to the pod the fake API
// server announced as Ready, named NAME@POD, and stops when the pod stops being Ready.
TEST_F(KubernetesWatchTest, GatewayRoutesToAReadyPod) {
  auto fakes = gateway::testing::StartFakes({"pod-a"});
  fakes[0]->SetModels({"m1"});
  api_.SetPod(Pod("a", "127.0.0.1"));
  api_.SetPod(Pod("b", "127.0.0.2", /*ready=*/false));
  const std::string yaml = "listen: 127.0.0.1:0\nio_threads: 1\nhealth: {interval: 0}\ntimeouts: {drain: 1}\n"
                           "discovery:\n  kubernetes:\n    api_server: http://127.0.0.1:" +
                           std::to_string(api_.port()) +
                           "\n    token_file: ''\n    namespace: ns\n    selector: {app: vllm}\n"
                           "    target_port: " +
                           std::to_string(fakes[0]->port()) + "\n    instance: {name: vllm, weight: 2}\n";
  GatewayConfig config;
  ASSERT_TRUE(gateway::testing::ValidateYaml(yaml, &config).ok()) << gateway::testing::ValidateYaml(yaml).ToString();
  EXPECT_TRUE(config.instances.empty());
  auto g = gateway::testing::StartGateway(config);
  ASSERT_NE(g, nullptr);
  // Listed before the gateway started: the pod is an instance from the first request on.
  ASSERT_EQ(g->routing()->fleet->size(), 1u);
  EXPECT_EQ(g->routing()->fleet->spec(0).name, "vllm@a");
  EXPECT_EQ(g->routing()->fleet->spec(0).weight, 2u);

  const auto r = pt::Post(g->port(), gateway::testing::kChat, gateway::testing::ChatBody("m1", "hello"));
  EXPECT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(r.Header(gateway::testing::kInstance), "vllm@a");
  EXPECT_EQ(fakes[0]->requests(), 1);
  EXPECT_TRUE(pt::Eventually([&] { return fakes[0]->models_requests() > 0; }));  // served names polled

  api_.SetPod(Pod("a", "127.0.0.1", /*ready=*/false));
  ASSERT_TRUE(pt::Eventually([&] { return g->routing()->fleet->size() == 0; }));
  const auto gone = pt::Post(g->port(), gateway::testing::kChat, gateway::testing::ChatBody("m1", "hello"));
  EXPECT_NE(gone.status(), 200);
  EXPECT_EQ(fakes[0]->requests(), 1);

  api_.SetPod(Pod("a", "127.0.0.1"));
  ASSERT_TRUE(pt::Eventually([&] { return g->routing()->fleet->size() == 1; }));
  EXPECT_TRUE(pt::Eventually([&] {
    return pt::Post(g->port(), gateway::testing::kChat, gateway::testing::ChatBody("m1", "hello")).status() == 200;
  }));
  // A pod's instance is not removed by the admin API (it would come back): drain it instead.
  EXPECT_EQ(g->RemoveInstance("vllm@a").status().code(), StatusCode::kFailedPrecondition);

  // The API server failing: counted, and the pod stays an instance.
  api_.FailWith(500);
  api_.EndWatches();
  EXPECT_TRUE(pt::Eventually([&] {
    return pt::Metric(g->port(), "prefix_router_kubernetes_watch_errors_total{reason=\"watch\"}") >= 1;
  }));
  EXPECT_EQ(g->routing()->fleet->size(), 1u);
  EXPECT_EQ(pt::Post(g->port(), gateway::testing::kChat, gateway::testing::ChatBody("m1", "hello")).status(), 200);
  g->Stop();
  g->Wait();
}

// Configuration: one of inference_pool or selector + target_port; the template's name; an
// instance-free file is valid with kubernetes only.
TEST(KubernetesConfigTest, Validation) {
  const std::string base = "discovery:\n  kubernetes:\n    api_server: http://127.0.0.1:1\n    namespace: ns\n";
  GatewayConfig c;
  ASSERT_TRUE(gateway::testing::ValidateYaml(base + "    inference_pool: p\n", &c).ok());
  EXPECT_EQ(c.discovery.kubernetes.instance.name, "p");
  EXPECT_EQ(c.discovery.kubernetes.api_port, 1);
  EXPECT_FALSE(c.discovery.kubernetes.api_https);
  ASSERT_TRUE(
      gateway::testing::ValidateYaml(base + "    selector: {app: vllm}\n    target_port: 8000\n", &c).ok());
  EXPECT_EQ(c.discovery.kubernetes.instance.name, "kubernetes");
  auto message = [&](const std::string& extra) { return gateway::testing::ValidateYaml(base + extra).message(); };
  EXPECT_NE(message("").find("give inference_pool, or selector and target_port"), std::string::npos);
  EXPECT_NE(message("    inference_pool: p\n    target_port: 80\n").find("do not set"), std::string::npos);
  EXPECT_NE(message("    selector: {app: vllm}\n    target_port: 70000\n").find("discovery.kubernetes.target_port"),
            std::string::npos);
  EXPECT_NE(message("    inference_pool: p\n    instance: {url: http://x}\n").find("unknown field"), std::string::npos);
  EXPECT_NE(message("    inference_pool: p\n    instance: {name: 'a@b'}\n").find("instance.name"), std::string::npos);
  EXPECT_FALSE(gateway::testing::ValidateYaml("discovery: {models: true}\n").ok());  // no instance at all
}

}  // namespace
}  // namespace prefix_router::gateway
