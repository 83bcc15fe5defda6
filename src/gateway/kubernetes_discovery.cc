#include "gateway/kubernetes_discovery.h"

#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "gateway/log.h"
#include "gateway/upstream.h"
#include "http/tls.h"

namespace prefix_router::gateway {
namespace {

namespace net = http::net;
namespace bhttp = http::bhttp;

constexpr KubernetesApiCall kCalls[] = {
    {"", "pods", "list"},
    {"", "pods", "watch"},
    {kInferencePoolGroup, "inferencepools", "list"},
    {kInferencePoolGroup, "inferencepools", "watch"},
};
constexpr KubernetesApiCall kPodsList = kCalls[0];
constexpr KubernetesApiCall kPodsWatch = kCalls[1];
constexpr KubernetesApiCall kPoolsList = kCalls[2];
constexpr KubernetesApiCall kPoolsWatch = kCalls[3];

// An error answer's own body is shown up to this many bytes.
constexpr size_t kMaxErrorBody = 64u << 10;

// The string at `key` of `e`, "" when `e` is an error, not an object, or has no such string.
// (simdjson_result, not element: converting a missing member to an element would throw.)
template <typename Element>
std::string_view StringOr(const Element& e, std::string_view key) {
  std::string_view out;
  if (e[key].get(out)) return {};
  return out;
}

Result<KubernetesPod> PodOf(simdjson::dom::element obj) {
  simdjson::dom::element meta;
  if (obj["metadata"].get(meta)) return Status::InvalidArgument("a pod without metadata");
  KubernetesPod pod;
  pod.name = std::string(StringOr(meta, "name"));
  if (pod.name.empty()) return Status::InvalidArgument("a pod without metadata.name");
  simdjson::dom::element ts;
  pod.deleting = !meta["deletionTimestamp"].get(ts) && !ts.is_null();
  simdjson::dom::element status;
  if (!obj["status"].get(status)) {
    pod.ip = std::string(StringOr(status, "podIP"));
    simdjson::dom::array conditions;
    if (!status["conditions"].get(conditions)) {
      for (simdjson::dom::element c : conditions) {
        if (StringOr(c, "type") == "Ready") pod.ready = StringOr(c, "status") == "True";
      }
    }
  }
  return pod;
}

Result<InferencePoolSpec> PoolOf(simdjson::dom::element obj) {
  InferencePoolSpec spec;
  simdjson::dom::element meta;
  if (!obj["metadata"].get(meta)) spec.name = std::string(StringOr(meta, "name"));
  simdjson::dom::object labels;
  if (obj["spec"]["selector"]["matchLabels"].get(labels)) {
    return Status::InvalidArgument("InferencePool '" + spec.name + "' has no spec.selector.matchLabels");
  }
  for (auto field : labels) {
    std::string_view value;
    if (field.value.get(value)) {
      return Status::InvalidArgument("InferencePool '" + spec.name + "': label '" + std::string(field.key) +
                                     "' is not a string");
    }
    spec.selector.emplace(std::string(field.key), std::string(value));
  }
  if (spec.selector.empty()) {
    return Status::InvalidArgument("InferencePool '" + spec.name + "' selects no label (it would pick every pod)");
  }
  simdjson::dom::array ports;
  int64_t number = 0;
  if (obj["spec"]["targetPorts"].get(ports) || ports.size() == 0 || ports.at(0)["number"].get(number) ||
      number < 1 || number > 65535) {
    return Status::InvalidArgument("InferencePool '" + spec.name + "' has no spec.targetPorts[0].number in 1..65535");
  }
  spec.target_port = static_cast<uint16_t>(number);
  return spec;
}

template <typename T>
Result<KubernetesList<T>> ListOf(std::string_view json, Result<T> (*item)(simdjson::dom::element), const char* kind) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc)) return Status::InvalidArgument(std::string(kind) + ": not JSON");
  KubernetesList<T> out;
  out.resource_version = std::string(StringOr(doc["metadata"], "resourceVersion"));
  simdjson::dom::array items;
  if (doc["items"].get(items)) {
    simdjson::dom::element null_items;
    // An empty list may come as "items": null.
    if (doc["items"].get(null_items) || !null_items.is_null()) {
      return Status::InvalidArgument(std::string(kind) + ": no items list");
    }
    return out;
  }
  for (simdjson::dom::element e : items) {
    Result<T> r = item(e);
    if (r.ok()) {
      out.items.push_back(std::move(*r));
    } else {
      ++out.invalid;
    }
  }
  return out;
}

template <typename T>
Result<T> One(std::string_view json, Result<T> (*item)(simdjson::dom::element)) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size()).get(doc)) return Status::InvalidArgument("not JSON");
  return item(doc);
}

std::string ReadSmallFile(const std::string& path, bool& ok) {
  ok = false;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return {};
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < (1u << 20)) text.append(buf, n);
  std::fclose(f);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  ok = true;
  return text;
}

}  // namespace

std::span<const KubernetesApiCall> KubernetesApiCalls() { return kCalls; }

std::string EncodeQueryValue(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string LabelSelectorText(const std::map<std::string, std::string>& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k + "=" + v;
  }
  return out;
}

std::string KubernetesApiTarget(const KubernetesApiCall& call, std::string_view ns, std::string_view query) {
  std::string out = call.api_group.empty() ? std::string("/api/v1") : "/apis/" + std::string(call.api_group) + "/v1";
  out += "/namespaces/" + EncodeQueryValue(ns) + "/" + std::string(call.resource);
  std::string q(query);
  if (call.verb == "watch") q += std::string(q.empty() ? "" : "&") + "watch=1";
  if (!q.empty()) out += "?" + q;
  return out;
}

Result<KubernetesPod> ParsePod(std::string_view json) { return One<KubernetesPod>(json, PodOf); }
Result<KubernetesList<KubernetesPod>> ParsePodList(std::string_view json) {
  return ListOf<KubernetesPod>(json, PodOf, "PodList");
}
Result<InferencePoolSpec> ParseInferencePool(std::string_view json) { return One<InferencePoolSpec>(json, PoolOf); }
Result<KubernetesList<InferencePoolSpec>> ParseInferencePoolList(std::string_view json) {
  return ListOf<InferencePoolSpec>(json, PoolOf, "InferencePoolList");
}

Result<KubernetesWatchEvent> ParseWatchEvent(std::string_view line, bool pools) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(line.data(), line.size()).get(doc)) return Status::InvalidArgument("a watch event that is not JSON");
  const std::string_view type = StringOr(doc, "type");
  simdjson::dom::element obj;
  if (doc["object"].get(obj)) return Status::InvalidArgument("a watch event without object");
  KubernetesWatchEvent ev;
  ev.resource_version = std::string(StringOr(obj["metadata"], "resourceVersion"));
  if (type == "ERROR") {
    ev.type = KubernetesWatchEvent::Type::kError;
    int64_t code = 0;
    if (!obj["code"].get(code)) ev.error_code = static_cast<int>(code);
    ev.error_message = std::string(StringOr(obj, "message"));
    return ev;
  }
  if (type == "BOOKMARK") {
    ev.type = KubernetesWatchEvent::Type::kBookmark;
    return ev;
  }
  if (type == "ADDED") {
    ev.type = KubernetesWatchEvent::Type::kAdded;
  } else if (type == "MODIFIED") {
    ev.type = KubernetesWatchEvent::Type::kModified;
  } else if (type == "DELETED") {
    ev.type = KubernetesWatchEvent::Type::kDeleted;
  } else {
    return Status::InvalidArgument("a watch event of unknown type '" + std::string(type) + "'");
  }
  if (pools) {
    Result<InferencePoolSpec> pool = PoolOf(obj);
    if (!pool.ok()) return pool.status();
    ev.pool = std::move(*pool);
  } else {
    Result<KubernetesPod> pod = PodOf(obj);
    if (!pod.ok()) return pod.status();
    ev.pod = std::move(*pod);
  }
  return ev;
}

// ------------------------------------------------------------------------------ the watcher

KubernetesWatcher::KubernetesWatcher(KubernetesWatcherOptions options, metrics::Family<metrics::Counter>* errors)
    : options_(std::move(options)), error_family_(errors) {
  const KubernetesDiscoveryConfig& c = options_.config;
  if (c.inference_pool.empty()) {
    selector_ = c.selector;
    port_ = static_cast<uint16_t>(c.target_port);
    have_selector_ = true;
  }
}

KubernetesWatcher::Snapshot KubernetesWatcher::snapshot() const {
  std::lock_guard lock(mu_);
  return snapshot_;
}

void KubernetesWatcher::Stop() {
  stop_.store(true);
  std::optional<net::any_io_executor> ex;
  {
    std::lock_guard lock(mu_);
    ex = executor_;
  }
  if (!ex) return;
  net::post(*ex, [self = shared_from_this()] {
    for (auto* s : {self->pods_stream_, self->pool_stream_}) {
      if (s) s->cancel();
    }
    for (auto* t : {self->pods_timer_, self->pool_timer_}) {
      if (t) t->cancel();
    }
  });
}

void KubernetesWatcher::CancelPods() {
  if (pods_stream_) pods_stream_->cancel();
  if (pods_timer_) pods_timer_->cancel();
}

void KubernetesWatcher::CountError(std::string_view reason, const Status& status, std::string_view what) {
  errors_total_.fetch_add(1);
  if (error_family_) error_family_->WithLabels({std::string(reason)}).Inc();
  if (reason == "gone") {
    // The API server's history was compacted past our resourceVersion: routine, and a list
    // follows at once.
    LogEvent(spdlog::level::info, "kubernetes watch expired (410 Gone); listing again",
             {{"request", what}, {"error", status.message()}});
    return;
  }
  if (!failing_) {
    const std::string backoff = fmt::format("{}s doubling to {}s, jittered", options_.initial_backoff.count() / 1000.0,
                                            options_.max_backoff.count() / 1000.0);
    LogEvent(spdlog::level::warn, "kubernetes discovery failed; the instances stay until the API server answers",
             {{"request", what}, {"reason", reason}, {"error", status.message()}, {"retry", backoff}});
  }
  failing_ = true;
}

std::chrono::milliseconds KubernetesWatcher::BackoffDelay(int failures) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  auto d = options_.initial_backoff;
  for (int i = 1; i < failures && d < options_.max_backoff; ++i) d *= 2;
  d = std::min(d, options_.max_backoff);
  // Jitter: [d/2, d), so that replicas that lost the server together do not return together.
  const auto half = d.count() / 2;
  return std::chrono::milliseconds(half + (half > 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(half)) : 0));
}

net::awaitable<void> KubernetesWatcher::Wait(std::chrono::milliseconds delay, bool pods) {
  if (stopping()) co_return;
  net::steady_timer timer(co_await net::this_coro::executor);
  timer.expires_after(delay);
  (pods ? pods_timer_ : pool_timer_) = &timer;
  co_await timer.async_wait(http::kTuple);
  (pods ? pods_timer_ : pool_timer_) = nullptr;
}

net::awaitable<Result<std::string>> KubernetesWatcher::Get(const KubernetesApiCall& call, std::string target,
                                                           const std::function<Status(std::string_view)>* on_line) {
  if (std::find(std::begin(kCalls), std::end(kCalls), call) == std::end(kCalls)) {
    co_return Status::Internal("a call missing from KubernetesApiCalls(): " + std::string(call.resource) + " " +
                               std::string(call.verb));
  }
  const KubernetesDiscoveryConfig& c = options_.config;
  UpstreamTarget t;
  t.host = c.api_host;
  t.port = c.api_port;
  t.https = c.api_https;
  const bool ipv6 = c.api_host.find(':') != std::string::npos;
  t.host_header = (ipv6 ? "[" + c.api_host + "]" : c.api_host) + ":" + std::to_string(c.api_port);
  t.key = "kubernetes-api";
  if (t.https) {
    // Read at each connect: a rotated CA bundle applies without a restart.
    auto tls = http::MakeClientTlsContext(c.ca_file, /*verify=*/true, "discovery.kubernetes.ca_file");
    if (!tls.ok()) co_return tls.status();
    t.tls = *tls;
    t.tls_config = UpstreamTlsConfig{c.ca_file, true};
  }
  Secret token;
  if (!c.token_file.empty()) {
    // Read at each connect: bound service-account tokens rotate (about hourly).
    bool ok = false;
    std::string text = ReadSmallFile(c.token_file, ok);
    if (!ok) {
      co_return Status::Unavailable("discovery.kubernetes.token_file: '" + c.token_file + "' cannot be read");
    }
    if (!text.empty()) token = Secret("Bearer " + text);
  }
  const bool pools = call.resource == kPoolsList.resource;
  // Stop and a selector change cancel the stream's pending operation; one whose completion was
  // already queued is not, so the request also checks before each operation whether it is
  // still wanted.
  const uint64_t generation = selector_generation_;
  const auto abandoned = [&] { return stopping() || (!pools && generation != selector_generation_); };
  auto [cec, lease] = co_await ConnectionPool::ForThisThread().Acquire(t, options_.connect_timeout, /*fresh=*/true);
  if (cec) {
    co_return Status::Unavailable("connecting to " + t.host_header + " failed: " +
                                  (lease.error.empty() ? cec.message() : lease.error));
  }
  UpstreamStream& stream = *lease.stream;
  if (abandoned()) co_return Status::Unavailable("cancelled");
  beast::tcp_stream*& slot = pools ? pool_stream_ : pods_stream_;
  slot = &stream.tcp();
  struct Clear {
    beast::tcp_stream*& slot;
    ~Clear() { slot = nullptr; }
  } clear{slot};

  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target, 11};
  req.set(bhttp::field::host, t.host_header);
  req.set(bhttp::field::user_agent, "prefix-router");
  req.set(bhttp::field::accept, "application/json");
  if (!token.empty()) token.SetHeaderOn(req, "Authorization");
  req.keep_alive(false);
  stream.tcp().expires_after(options_.request_timeout);
  auto [wec, wn] = co_await stream.On([&](auto& s) { return bhttp::async_write(s, req, http::kTuple); });
  if (wec) co_return Status::Unavailable("sending the request failed: " + wec.message());

  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(boost::none);  // bounded below: the list's size, the watch's line
  const auto watch_idle = options_.watch_timeout + options_.watch_timeout / 2 + std::chrono::seconds(30);
  stream.tcp().expires_after(on_line ? std::chrono::duration_cast<std::chrono::milliseconds>(watch_idle)
                                     : options_.request_timeout);
  if (abandoned()) co_return Status::Unavailable("cancelled");
  auto [hec, hn] = co_await stream.On([&](auto& s) { return bhttp::async_read_header(s, buffer, parser, http::kTuple); });
  if (hec) co_return Status::Unavailable("reading the answer failed: " + hec.message());
  const int status = parser.get().result_int();
  std::string body;
  std::string pending;  // a watch line not ended yet
  const size_t limit = status != 200 ? kMaxErrorBody : on_line ? kMaxWatchLineBytes : kMaxListBytes;
  char chunk[64 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    if (abandoned()) co_return Status::Unavailable("cancelled");
    if (on_line) stream.tcp().expires_after(std::chrono::duration_cast<std::chrono::milliseconds>(watch_idle));
    // read_some: a watch's events are handed on as they arrive, not when the buffer is full.
    auto [rec, rn] = co_await stream.On([&](auto& s) { return bhttp::async_read_some(s, buffer, parser, http::kTuple); });
    if (rec == bhttp::error::need_buffer) rec = {};
    const size_t got = sizeof(chunk) - parser.get().body().size;
    std::string& into = status == 200 && on_line ? pending : body;
    if (into.size() + got > limit) {
      if (status != 200) break;  // enough of an error message
      co_return Status::ResourceExhausted(std::string(on_line ? "a watch event" : "the list") + " is larger than " +
                                          std::to_string(limit >> 20) + " MiB");
    }
    into.append(chunk, got);
    if (status == 200 && on_line) {
      size_t start = 0;
      for (size_t nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n', start)) {
        std::string_view line(pending.data() + start, nl - start);
        start = nl + 1;
        if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
        if (Status s = (*on_line)(line); !s.ok()) co_return s;
      }
      pending.erase(0, start);
    }
    if (rec) {
      if (stopping()) co_return Status::Unavailable("stopping");
      co_return Status::Unavailable("reading the answer failed: " + rec.message());
    }
  }
  if (status == 410) co_return Status::FailedPrecondition("410 Gone: the resource version is too old");
  if (status != 200) {
    co_return Status::Unavailable("GET " + std::string(call.resource) + " answered " + std::to_string(status) + ": " +
                                  body.substr(0, 512));
  }
  if (on_line && pending.find_first_not_of(" \r\t\n") != std::string::npos) {
    if (Status s = (*on_line)(pending); !s.ok()) co_return s;
  }
  co_return body;
}

void KubernetesWatcher::ApplyPool(const InferencePoolSpec& spec) {
  if (pool_ && *pool_ == spec) return;
  const bool selector_changed = !have_selector_ || selector_ != spec.selector;
  LogEvent(spdlog::level::info, "inference pool read",
           {{"pool", spec.name},
            {"selector", LabelSelectorText(spec.selector)},
            {"target_port", static_cast<uint64_t>(spec.target_port)},
            {"relist", selector_changed ? "yes" : "no"}});
  pool_ = spec;
  port_ = spec.target_port;
  if (selector_changed) {
    selector_ = spec.selector;
    have_selector_ = true;
    ++selector_generation_;
    pods_rv_.clear();
    CancelPods();  // the pods loop lists again with the new selector
  }
  Publish();
}

void KubernetesWatcher::Publish() {
  std::vector<KubernetesEndpoint> now;
  if (port_ != 0) {
    for (const auto& [name, pod] : pods_) {
      if (pod.routable()) now.push_back({name, pod.ip, port_});
    }
  }
  std::sort(now.begin(), now.end());
  {
    std::lock_guard lock(mu_);
    if (snapshot_.synced == pods_synced_ && snapshot_.endpoints == now) return;
    snapshot_.synced = pods_synced_;
    snapshot_.endpoints = std::move(now);
    ++snapshot_.version;
  }
  if (on_change_) on_change_();
}

net::awaitable<Status> KubernetesWatcher::ListPool() {
  const KubernetesDiscoveryConfig& c = options_.config;
  lists_.fetch_add(1);
  Result<std::string> body = co_await Get(
      kPoolsList,
      KubernetesApiTarget(kPoolsList, c.resolved_namespace,
                          "fieldSelector=" + EncodeQueryValue("metadata.name=" + c.inference_pool)),
      nullptr);
  if (!body.ok()) {
    CountError("list", body.status(), "list inferencepools");
    co_return body.status();
  }
  auto list = ParseInferencePoolList(*body);
  if (!list.ok() || list->items.empty()) {
    Status s = list.ok() ? Status::NotFound("InferencePool '" + c.inference_pool + "' not found in namespace '" +
                                            c.resolved_namespace + "' (or it is not valid)")
                         : list.status();
    CountError("invalid", s, "list inferencepools");
    co_return s;
  }
  pool_rv_ = list->resource_version;
  ApplyPool(list->items.front());
  co_return Status::Ok();
}

net::awaitable<Status> KubernetesWatcher::ListPods() {
  const KubernetesDiscoveryConfig& c = options_.config;
  const uint64_t generation = selector_generation_;
  lists_.fetch_add(1);
  Result<std::string> body = co_await Get(
      kPodsList,
      KubernetesApiTarget(kPodsList, c.resolved_namespace, "labelSelector=" + EncodeQueryValue(LabelSelectorText(selector_))),
      nullptr);
  if (generation != selector_generation_) co_return Status::Unavailable("the selector changed");
  if (!body.ok()) {
    if (!stopping()) CountError("list", body.status(), "list pods");
    co_return body.status();
  }
  auto list = ParsePodList(*body);
  if (!list.ok()) {
    CountError("invalid", list.status(), "list pods");
    co_return list.status();
  }
  // A successful list is the truth: it replaces whatever was known.
  pods_.clear();
  for (KubernetesPod& pod : list->items) pods_[pod.name] = std::move(pod);
  pods_rv_ = list->resource_version;
  pods_synced_ = true;
  if (failing_) LogEvent(spdlog::level::info, "kubernetes discovery works again", {{"pods", pods_.size()}});
  failing_ = false;
  Publish();
  co_return Status::Ok();
}

net::awaitable<KubernetesWatcher::Outcome> KubernetesWatcher::WatchPods() {
  const KubernetesDiscoveryConfig& c = options_.config;
  const uint64_t generation = selector_generation_;
  watches_.fetch_add(1);
  thread_local std::mt19937_64 rng(std::random_device{}());
  const auto timeout = options_.watch_timeout.count() + static_cast<int64_t>(rng() % (options_.watch_timeout.count() / 2 + 1));
  bool gone = false;
  std::function<Status(std::string_view)> on_line = [&](std::string_view line) -> Status {
    if (generation != selector_generation_) return Status::Unavailable("the selector changed");
    auto ev = ParseWatchEvent(line, /*pools=*/false);
    if (!ev.ok()) return ev.status();
    using T = KubernetesWatchEvent::Type;
    if (ev->type == T::kError) {
      if (ev->error_code == 410) {
        gone = true;
        return Status::FailedPrecondition("ERROR event 410: " + ev->error_message);
      }
      return Status::Unavailable("ERROR event " + std::to_string(ev->error_code) + ": " + ev->error_message);
    }
    if (!ev->resource_version.empty()) pods_rv_ = ev->resource_version;
    if (ev->type == T::kBookmark) return Status::Ok();
    if (ev->type == T::kDeleted) {
      pods_.erase(ev->pod->name);
    } else {
      pods_[ev->pod->name] = *ev->pod;
    }
    if (failing_) LogEvent(spdlog::level::info, "kubernetes discovery works again", {{"pods", pods_.size()}});
    failing_ = false;
    Publish();
    return Status::Ok();
  };
  Result<std::string> r = co_await Get(
      kPodsWatch,
      KubernetesApiTarget(kPodsWatch, c.resolved_namespace,
                          "labelSelector=" + EncodeQueryValue(LabelSelectorText(selector_)) +
                              "&resourceVersion=" + EncodeQueryValue(pods_rv_) +
                              "&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(timeout)),
      &on_line);
  if (stopping() || generation != selector_generation_) co_return Outcome::kCancelled;
  if (r.ok()) co_return Outcome::kOk;
  if (gone || r.status().code() == StatusCode::kFailedPrecondition) {
    CountError("gone", r.status(), "watch pods");
    co_return Outcome::kGone;
  }
  CountError("watch", r.status(), "watch pods");
  co_return Outcome::kError;
}

net::awaitable<KubernetesWatcher::Outcome> KubernetesWatcher::WatchPool() {
  const KubernetesDiscoveryConfig& c = options_.config;
  watches_.fetch_add(1);
  bool gone = false;
  std::function<Status(std::string_view)> on_line = [&](std::string_view line) -> Status {
    auto ev = ParseWatchEvent(line, /*pools=*/true);
    if (!ev.ok()) return ev.status();
    using T = KubernetesWatchEvent::Type;
    if (ev->type == T::kError) {
      if (ev->error_code == 410) {
        gone = true;
        return Status::FailedPrecondition("ERROR event 410: " + ev->error_message);
      }
      return Status::Unavailable("ERROR event " + std::to_string(ev->error_code) + ": " + ev->error_message);
    }
    if (!ev->resource_version.empty()) pool_rv_ = ev->resource_version;
    if (ev->type == T::kBookmark) return Status::Ok();
    if (ev->type == T::kDeleted) {
      // The pods stay where they are: a deleted pool is logged, not obeyed by emptying the fleet.
      LogEvent(spdlog::level::warn, "inference pool deleted; the gateway keeps its last selector and pods",
               {{"pool", ev->pool->name}});
      return Status::Ok();
    }
    ApplyPool(*ev->pool);
    return Status::Ok();
  };
  Result<std::string> r = co_await Get(
      kPoolsWatch,
      KubernetesApiTarget(kPoolsWatch, c.resolved_namespace,
                          "fieldSelector=" + EncodeQueryValue("metadata.name=" + c.inference_pool) +
                              "&resourceVersion=" + EncodeQueryValue(pool_rv_) +
                              "&allowWatchBookmarks=true&timeoutSeconds=" +
                              std::to_string(options_.watch_timeout.count())),
      &on_line);
  if (stopping()) co_return Outcome::kCancelled;
  if (r.ok()) co_return Outcome::kOk;
  if (gone || r.status().code() == StatusCode::kFailedPrecondition) {
    CountError("gone", r.status(), "watch inferencepools");
    co_return Outcome::kGone;
  }
  CountError("watch", r.status(), "watch inferencepools");
  co_return Outcome::kError;
}

net::awaitable<Status> KubernetesWatcher::Sync() {
  if (!options_.config.inference_pool.empty()) {
    if (Status s = co_await ListPool(); !s.ok()) co_return s;
  }
  co_return co_await ListPods();
}

net::awaitable<void> KubernetesWatcher::PoolLoop() {
  int failures = 0;
  while (!stopping()) {
    if (pool_rv_.empty()) {
      if (Status s = co_await ListPool(); !s.ok()) {
        if (stopping()) break;
        co_await Wait(BackoffDelay(++failures), /*pods=*/false);
        continue;
      }
    }
    const Outcome o = co_await WatchPool();
    if (o == Outcome::kOk) {
      failures = 0;
    } else if (o == Outcome::kGone) {
      pool_rv_.clear();
    } else if (o == Outcome::kError) {
      co_await Wait(BackoffDelay(++failures), /*pods=*/false);
    }
  }
}

net::awaitable<void> KubernetesWatcher::PodsLoop() {
  int failures = 0;
  while (!stopping()) {
    if (!have_selector_) {
      co_await Wait(std::chrono::hours(1), /*pods=*/true);  // cancelled by ApplyPool
      continue;
    }
    if (pods_rv_.empty()) {
      const uint64_t generation = selector_generation_;
      if (Status s = co_await ListPods(); !s.ok()) {
        if (stopping()) break;
        if (generation != selector_generation_) continue;
        co_await Wait(BackoffDelay(++failures), /*pods=*/true);
        continue;
      }
      failures = 0;
    }
    const Outcome o = co_await WatchPods();
    if (o == Outcome::kOk) {
      failures = 0;  // resumes from the last resourceVersion seen
    } else if (o == Outcome::kGone) {
      pods_rv_.clear();  // lists again at once
    } else if (o == Outcome::kError) {
      co_await Wait(BackoffDelay(++failures), /*pods=*/true);
    }
  }
}

net::awaitable<void> KubernetesWatcher::Run(std::shared_ptr<KubernetesWatcher> self) {
  auto executor = co_await net::this_coro::executor;
  {
    std::lock_guard lock(self->mu_);
    self->executor_ = executor;
  }
  if (self->stopping()) co_return;
  if (!self->options_.config.inference_pool.empty()) {
    net::co_spawn(executor, self->PoolLoop(), [self](std::exception_ptr e) {
      if (e) spdlog::error("kubernetes discovery: the inference pool loop failed");
    });
  }
  co_await self->PodsLoop();
}

}  // namespace prefix_router::gateway
