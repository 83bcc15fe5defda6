// Pod discovery from the Kubernetes API (discovery.kubernetes; docs/discovery.md).
//
// The gateway's instances are the Ready pods that a label selector picks in one namespace, each
// at podIP:target_port. The selector and port are configured, or read from an InferencePool
// (inference.networking.k8s.io/v1: spec.selector.matchLabels, spec.targetPorts[0].number) that is
// watched too, so that they follow the pool.
//
// How: list, then watch from the list's resourceVersion (allowWatchBookmarks), resume from the
// last resourceVersion seen when a watch ends normally, relist on 410 Gone (the HTTP status or
// an ERROR event with code 410), back off exponentially with jitter on any other error. The pod
// set changes only by what the API server says: a successful list replaces it, watch events
// edit it; a failed request, a dropped connection or an unreachable server leave it as it was.
// A pod is routable when its Ready condition is True, it has a podIP and no deletionTimestamp.
//
// Plugging into the gateway: KubernetesWatcher keeps the routable set and calls its change
// callback, which asks the gateway's discovery loop for a round (Gateway::RequestDiscovery). The
// round reads snapshot() and, when it differs from what was applied, rebuilds the routing state
// from EffectiveLocked, which adds one instance per endpoint from the `instance` template, named
// TEMPLATE@POD (discovery_loop.cc, operations.cc): the same door `resolve: all` uses, so stable
// placement, health checks, /v1/models polling and the admin view work unchanged.
//
// The HTTP client: one fresh connection per request (Beast; TLS through http/tls.h against
// ca_file for https, re-read at each connect like the token, which rotates), connect and read
// deadlines, a list body of at most kMaxListBytes and a watch line of at most kMaxWatchLineBytes.
// Every request is built from a KubernetesApiCall of KubernetesApiCalls(), the list the RBAC
// Role in deploy/kubernetes/ must grant.
//
// Thread-safety: the parsers are pure. A KubernetesWatcher's coroutines (Sync, Run) run on one
// single-threaded executor; snapshot(), Stop() and the counters may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gateway/config.h"
#include "http/server.h"
#include "metrics/metrics.h"

namespace prefix_router::gateway {

// One kind of request to the API server.
struct KubernetesApiCall {
  std::string_view api_group;  // "" = the core group (/api/v1)
  std::string_view resource;
  std::string_view verb;
  bool operator==(const KubernetesApiCall&) const = default;
};

// Every call discovery makes, for the RBAC Role in deploy/kubernetes/ (a test compares them):
// {"", "pods", "list"}, {"", "pods", "watch"}, {"inference.networking.k8s.io", "inferencepools",
// "list"}, {"inference.networking.k8s.io", "inferencepools", "watch"}.
std::span<const KubernetesApiCall> KubernetesApiCalls();

inline constexpr std::string_view kInferencePoolGroup = "inference.networking.k8s.io";
inline constexpr size_t kMaxListBytes = 64u << 20;       // one list answer
inline constexpr size_t kMaxWatchLineBytes = 16u << 20;  // one watch event

// The request target of `call` in `ns` with `query` (already encoded, without '?'): GET
// /api/v1/namespaces/NS/pods?..., /apis/GROUP/v1/namespaces/NS/RESOURCE?...; a watch gets watch=1.
// REQUIRES: `call` is one of KubernetesApiCalls().
std::string KubernetesApiTarget(const KubernetesApiCall& call, std::string_view ns, std::string_view query);

// "a=b,c=d" (keys in order), for labelSelector.
std::string LabelSelectorText(const std::map<std::string, std::string>& labels);
// Percent-encodes everything but unreserved characters (RFC 3986), for a query value.
std::string EncodeQueryValue(std::string_view value);

// ------------------------------------------------------------------------ parsing (pure)

struct KubernetesPod {
  std::string name;
  std::string ip;          // status.podIP; "" before one is assigned
  bool ready = false;      // status.conditions[type=Ready].status == "True"
  bool deleting = false;   // metadata.deletionTimestamp set
  bool routable() const { return ready && !deleting && !ip.empty(); }
  bool operator==(const KubernetesPod&) const = default;
};

struct InferencePoolSpec {
  std::string name;
  std::map<std::string, std::string> selector;  // spec.selector.matchLabels
  uint16_t target_port = 0;                     // spec.targetPorts[0].number
  bool operator==(const InferencePoolSpec&) const = default;
};

template <typename T>
struct KubernetesList {
  std::string resource_version;  // metadata.resourceVersion, where the watch starts
  std::vector<T> items;          // items that parse; others are counted
  size_t invalid = 0;
};

// A pod object / a PodList / an InferencePool / an InferencePoolList. Errors (InvalidArgument)
// say what is missing.
Result<KubernetesPod> ParsePod(std::string_view json);
Result<KubernetesList<KubernetesPod>> ParsePodList(std::string_view json);
Result<InferencePoolSpec> ParseInferencePool(std::string_view json);
Result<KubernetesList<InferencePoolSpec>> ParseInferencePoolList(std::string_view json);

struct KubernetesWatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kError;
  std::string resource_version;  // the object's metadata.resourceVersion
  int error_code = 0;            // kError: the Status object's code (410 = relist)
  std::string error_message;
  std::optional<KubernetesPod> pod;         // ADDED/MODIFIED/DELETED of a pod watch
  std::optional<InferencePoolSpec> pool;    // ... of an inferencepools watch
};

// One line of a watch stream: {"type":"ADDED","object":{...}}. `pools` says which resource was
// watched.
Result<KubernetesWatchEvent> ParseWatchEvent(std::string_view line, bool pools);

// ----------------------------------------------------------------------------- the watcher

// A routable pod: where its instance is.
struct KubernetesEndpoint {
  std::string pod;
  std::string address;  // podIP
  uint16_t port = 0;    // target_port
  auto operator<=>(const KubernetesEndpoint&) const = default;
};

struct KubernetesWatcherOptions {
  KubernetesDiscoveryConfig config;  // validated (api_host, api_port, api_https, resolved_namespace)
  std::chrono::milliseconds connect_timeout{5000};   // TCP connect and TLS handshake
  std::chrono::milliseconds request_timeout{30000};  // a whole list answer
  std::chrono::seconds watch_timeout{300};           // asked of the server (timeoutSeconds, +0..50% jitter)
  std::chrono::milliseconds initial_backoff{500};    // after an error; doubles per failure
  std::chrono::milliseconds max_backoff{30000};
};

class KubernetesWatcher : public std::enable_shared_from_this<KubernetesWatcher> {
 public:
  // REQUIRES: made by std::make_shared (Stop posts with shared_from_this).
  // `errors` (may be null): prefix_router_kubernetes_watch_errors_total, labelled by reason.
  explicit KubernetesWatcher(KubernetesWatcherOptions options,
                             metrics::Family<metrics::Counter>* errors = nullptr);
  KubernetesWatcher(const KubernetesWatcher&) = delete;
  KubernetesWatcher& operator=(const KubernetesWatcher&) = delete;

  // One list of everything (the pool first, in pool mode), as at start; later, Run watches
  // from there. Its error says what failed.
  http::net::awaitable<Status> Sync();
  // Lists what is not known, watches, relists and backs off until Stop(). `self` keeps the
  // watcher alive while it runs.
  static http::net::awaitable<void> Run(std::shared_ptr<KubernetesWatcher> self);
  // Ends Run (its requests are cancelled). From any thread.
  void Stop();

  struct Snapshot {
    uint64_t version = 0;  // +1 per change of `endpoints`
    bool synced = false;   // a list of pods has succeeded
    std::vector<KubernetesEndpoint> endpoints;  // sorted
  };
  Snapshot snapshot() const;
  // Called on the watcher's executor after each change of the endpoints.
  void SetOnChange(std::function<void()> on_change) { on_change_ = std::move(on_change); }

  // For tests: lists and watches started, and requests that failed.
  uint64_t lists() const { return lists_.load(); }
  uint64_t watches() const { return watches_.load(); }
  uint64_t errors() const { return errors_total_.load(); }

 private:
  enum class Outcome { kOk, kGone, kCancelled, kError };
  struct Request;

  http::net::awaitable<Status> ListPool();
  http::net::awaitable<Status> ListPods();
  http::net::awaitable<Outcome> WatchPool();
  http::net::awaitable<Outcome> WatchPods();
  http::net::awaitable<void> PoolLoop();
  http::net::awaitable<void> PodsLoop();
  // GET `target` for `call`: the whole body (list) or each line to `on_line` (watch).
  http::net::awaitable<Result<std::string>> Get(const KubernetesApiCall& call, std::string target,
                                                const std::function<Status(std::string_view)>* on_line);
  http::net::awaitable<void> Wait(std::chrono::milliseconds delay, bool pods);
  std::chrono::milliseconds BackoffDelay(int failures);
  void CancelPods();
  void CountError(std::string_view reason, const Status& status, std::string_view what);
  void ApplyPool(const InferencePoolSpec& spec);
  void Publish();
  bool stopping() const { return stop_.load(); }

  KubernetesWatcherOptions options_;
  metrics::Family<metrics::Counter>* error_family_;
  std::function<void()> on_change_;
  std::atomic<bool> stop_{false};

  // The watcher's executor state (no lock: one thread).
  std::optional<InferencePoolSpec> pool_;  // pool mode: the last one read
  std::map<std::string, std::string> selector_;
  uint16_t port_ = 0;
  bool have_selector_ = false;
  uint64_t selector_generation_ = 0;  // +1 when selector_ changes: the pods are listed again
  std::string pool_rv_;
  std::string pods_rv_;
  std::map<std::string, KubernetesPod> pods_;  // by name: every pod the selector picks
  bool pods_synced_ = false;
  bool failing_ = false;  // logged once per streak
  // The open request and the pending wait of each loop, to cancel them on Stop (both) or a
  // selector change (the pods loop's).
  http::beast::tcp_stream* pods_stream_ = nullptr;
  http::beast::tcp_stream* pool_stream_ = nullptr;
  http::net::steady_timer* pods_timer_ = nullptr;
  http::net::steady_timer* pool_timer_ = nullptr;
  std::optional<http::net::any_io_executor> executor_;

  mutable std::mutex mu_;  // guards snapshot_
  Snapshot snapshot_;

  std::atomic<uint64_t> lists_{0};
  std::atomic<uint64_t> watches_{0};
  std::atomic<uint64_t> errors_total_{0};
};

}  // namespace prefix_router::gateway
