// Gateway: `prefix-router serve`. An HTTP server whose handler routes each request with the
// core's policies and relays it to the chosen instance, streaming the response back.
//
// A request's path: the Server reads it; the api layer turns its bytes into routing values
// (served name, routing group, prefix key) or a 400; the pool's Policy picks an instance from
// the current RoutingState; an InFlightGuard counts it there until the exchange ends, however it
// ends; the body goes upstream unchanged on a pooled keep-alive connection and the response
// streams back as it arrives. Before any byte reached the client, a failed connect, a reset or
// an upstream 500, 502 or 503 moves on to the next instance in the key's preference order
// (max_retries); a first-byte timeout (504) does not, since the instance may still be working,
// unless timeouts.per_try_first_byte is set: an attempt past it, or one whose instance is
// ejected while it waits for its first byte, is cancelled upstream and retried (Envoy's
// per_try_timeout). prefix_router_retries_total counts each retry by its reason. A connect
// that fails for want of a local resource (EMFILE, ENOBUFS, ...) answers 503 and never counts
// against the instance, nor does such a failed health check.
//
// Routes: chat and text completions, /v1/responses and the native /invocations carry a prefix
// key; /v1/embeddings and vLLM's /tokenize and /detokenize are routed by model alone (the
// pool's balancing; least-outstanding-requests in a prefix-aware pool, since there is no prefix
// to keep together). Any other path gets unknown_path_status, a known one with another method
// 405. Every request carries an x-request-id (the client's, or a generated UUIDv4) to the
// instance and back on every response, and a valid W3C traceparent/tracestate passes through
// (an invalid one is dropped); both are logged with failures, and the decision at debug level.
//
// Health: active checks (GET health.path) eject an instance after unhealthy_threshold failures
// and readmit it after healthy_threshold successes; connect failures of real traffic eject it
// at once (passive_failures). An ejected instance leaves the placement (its keys go to their
// next preferred instance) and gets them back when it returns.
//
// Overload: a pool with max_in_flight answers 429 (Retry-After: 1) to a request that would
// exceed it, before any instance is picked; limits.max_connections makes the server refuse
// connections beyond it with 503. Both are counted in /metrics.
//
// Clients and limits (docs/limits.md): with `clients` configured, the API routes and
// /v1/models need a client key (Authorization: Bearer, or x-api-key) before anything else is
// read, else 401; the key names the request's tenant and is not forwarded upstream. Per-tenant
// rate limits (RateLimiter) admit a request after it is parsed (its tenant may be its routing
// group, its prompt tokens are estimated from its body) and before its pool's ceiling and any
// instance; a refusal is a 429 with Retry-After (413 for a request that can never fit).
//
// Run-time changes (gateway/operations.cc; the admin API and SIGHUP call them): adding,
// removing, draining instances and reloading the configuration build a new RoutingState from
// the current one and swap it in. Requests in flight finish on the state they started with;
// per-instance state (in-flight counts, health, drain) carries over by name, and each pool's
// Policy, with what it learned, carries over while the pool's routing options are unchanged.
//
// Discovery (gateway/discovery.h, docs/discovery.md): a loop on the first I/O thread polls the
// /v1/models of instances with discover_models (every instance by default) and resolves the
// names of `resolve: all` instances, and applies what changed like any other run-time change.
// With discovery.kubernetes, a KubernetesWatcher (gateway/kubernetes_discovery.h) on the same
// thread follows the Ready pods and asks that loop for a round when they change.
//
// The endpoint picker (src/epp/, docs/epp.md) decides through the same steps: Admit (parse,
// pool, tenant limits, max_in_flight) and the pool's Policy, counted in the same metrics; it is
// attached to the gateway (Attach) so that Stop shuts it down first.
//
// Thread-safety: the RoutingState and the client key set are immutable and shared; per-instance live state is atomic;
// connection pools are per I/O thread; run-time changes are serialised by ops_mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "api/key_normalisation.h"
#include "api/request.h"
#include "api/response_usage.h"
#include "core/fleet.h"
#include "core/policy.h"
#include "gateway/clock.h"
#include "gateway/config.h"
#include "gateway/discovery.h"
#include "gateway/ejection_signal.h"
#include "gateway/flow_control.h"
#include "gateway/kubernetes_discovery.h"
#include "gateway/kv_events.h"
#include "gateway/operations.h"
#include "gateway/rate_limiter.h"
#include "gateway/status.h"
#include "gateway/upstream.h"
#include "http/server.h"
#include "metrics/metrics.h"

namespace prefix_router::gateway {

// Live, per-instance state the gateway keeps beside the core's InstanceState.
struct InstanceRuntime {
  UpstreamTarget target;
  std::atomic<uint32_t> consecutive_failures{0};   // active checks and passive connect failures
  std::atomic<uint32_t> consecutive_successes{0};  // active checks while ejected
  // Metric children resolved once (label lookups stay off the request path).
  metrics::Histogram* first_byte = nullptr;         // stream="false": a whole response's first byte
  metrics::Histogram* first_byte_stream = nullptr;  // stream="true": an SSE stream's first byte (TTFT)
  metrics::Histogram* duration = nullptr;
  // The last /tokenize asked of it failed (tokenizer: engine; logged once per streak).
  std::atomic<bool> tokenize_failing{false};
  // Requests waiting for this instance's first response byte; fired when it is ejected.
  EjectionSignal ejection;
  // The status page's counters; carried over to a new runtime when only the url changes.
  std::shared_ptr<InstanceStats> stats = std::make_shared<InstanceStats>();
};

struct Pool {
  RoutingOptions options;
  std::shared_ptr<Policy> policy;  // shared with the next RoutingState while options are unchanged
  // Requests of this pool from admission to their end (retries included), for
  // options.max_in_flight. Counted by an RAII guard in the request's coroutine; shared with
  // the next RoutingState along with the policy.
  std::shared_ptr<std::atomic<int64_t>> in_flight = std::make_shared<std::atomic<int64_t>>(0);
  // options.flow_control's queue over that count; null without flow control (max_queue 0 or no
  // max_in_flight). Kept by the next RoutingState while the pool's count, ceiling and flow
  // options are the same, so requests waiting in it are let out as before.
  std::shared_ptr<PoolFlow> flow;
  // options.key_normalisation compiled (patterns, paths); null when it is off.
  std::shared_ptr<const api::KeyNormaliser> normaliser;
};

// Everything a request needs to be routed, swapped as one immutable unit.
struct RoutingState {
  std::shared_ptr<const FleetSnapshot> fleet;
  std::vector<std::shared_ptr<InstanceRuntime>> instances;  // parallel to fleet indices; kept
                                                            // across changes by name and address
  Pool default_pool;
  std::map<std::string, Pool, std::less<>> pools;  // by served name
  // Per instance (parallel to fleet indices): whether discovery polls its /v1/models, and
  // what its last list answered (null: no list yet, or not polled), for GET /v1/models.
  struct Discovery {
    bool polled = false;
    std::shared_ptr<const ModelEntries> entries;
  };
  std::vector<Discovery> discovery;

  const Pool& PoolFor(std::string_view served_name) const;
  // The `model` label of a request for `served_name`: the name itself when it is known (an
  // instance declares it, configured or discovered, or a pool is named after it), else "other".
  // A client can send any name to instances that serve every name; labels from raw client
  // input would grow the metric series without bound.
  std::string_view ModelLabel(std::string_view served_name) const;
};

// A request's place in its pool's ceiling (Pool::in_flight, for max_in_flight), taken at
// admission and given back when the slot is destroyed (RAII, movable), however the request ends.
// The count is taken before the ceiling is checked, so concurrent requests cannot overshoot.
class PoolSlot {
 public:
  PoolSlot() = default;
  explicit PoolSlot(std::shared_ptr<std::atomic<int64_t>> count)
      : count_(std::move(count)), before_(count_->fetch_add(1, std::memory_order_relaxed)) {}
  // A slot a flow-controlled pool gave (PoolFlow::Enter admitted it, or its queue let it out):
  // already counted; its end goes through the flow, which hands it to the next waiting request.
  // `tenant`: the request's, when the flow bounds tenants (PoolFlow::Release).
  static PoolSlot FromFlow(std::shared_ptr<PoolFlow> flow, std::string tenant = {}) {
    PoolSlot s;
    s.flow_ = std::move(flow);
    s.tenant_ = std::move(tenant);
    return s;
  }
  PoolSlot(PoolSlot&& other) noexcept
      : count_(std::move(other.count_)),
        flow_(std::move(other.flow_)),
        tenant_(std::move(other.tenant_)),
        before_(other.before_) {}
  PoolSlot& operator=(PoolSlot&& other) noexcept {
    if (this != &other) {
      Release();
      count_ = std::move(other.count_);
      flow_ = std::move(other.flow_);
      tenant_ = std::move(other.tenant_);
      before_ = other.before_;
    }
    return *this;
  }
  PoolSlot(const PoolSlot&) = delete;
  PoolSlot& operator=(const PoolSlot&) = delete;
  ~PoolSlot() { Release(); }
  void Release() {
    if (count_) count_->fetch_sub(1, std::memory_order_relaxed);
    count_.reset();
    if (flow_) flow_->Release(tenant_);
    flow_.reset();
  }
  // Requests of the pool admitted before this one and not yet ended.
  int64_t admitted_before() const { return before_; }

 private:
  std::shared_ptr<std::atomic<int64_t>> count_;
  std::shared_ptr<PoolFlow> flow_;
  std::string tenant_;
  int64_t before_ = 0;
};

class Gateway final : public http::Handler {
 public:
  // REQUIRES: ValidateConfig(config).ok(). `resolver` resolves the names of `resolve: all`
  // instances; null = discovery.hosts_file's when set, else the system's. Those names are
  // resolved once here, before the gateway starts. `rate_limit_clock` (default: the steady
  // clock) drives the rate limits' buckets; tests pass a ManualClock's.
  static Result<std::unique_ptr<Gateway>> Create(GatewayConfig config, std::shared_ptr<Resolver> resolver = nullptr,
                                                 RateLimiter::Now rate_limit_clock = {});
  static Result<std::unique_ptr<Gateway>> Create(GatewayConfig config, RateLimiter::Now rate_limit_clock) {
    return Create(std::move(config), nullptr, std::move(rate_limit_clock));
  }
  ~Gateway() override;

  Status Start();
  uint16_t port() const { return server_->port(); }
  // SIGTERM behaviour: stop accepting, let in-flight requests finish up to timeouts.drain.
  void Stop();
  void Wait() { server_->Wait(); }

  net::awaitable<void> Handle(http::Exchange& exchange) override;

  // Run-time changes; each logs one info line saying what changed. Errors: InvalidArgument
  // (the instance's fields, with the field named), NotFound (no such instance),
  // FailedPrecondition (the name is taken; the change would leave no instance, or a pool with
  // no instance serving it).
  Result<InstanceView> AddInstance(InstanceConfig instance);
  // Returns the requests still in flight on it (they finish there; new ones go elsewhere).
  Result<int32_t> RemoveInstance(std::string_view name);
  // A drained instance takes no new requests; those in flight finish. Idempotent.
  Result<InstanceView> SetDrained(std::string_view name, bool drained);
  // Applies `next`'s instances, routing, pools, clients and rate limits and reports every other field that differs
  // from the running configuration as needing a restart. `trigger` names the cause in the log.
  // REQUIRES: ValidateConfig(next).ok()
  ReloadReport Reload(GatewayConfig next, std::string_view trigger);
  std::vector<InstanceView> Instances() const;

  // Asks the discovery loop for a full round (every resolution and every poll) now and returns
  // its ticket: once discovery_rounds_done() >= the ticket, a round that started after this
  // call has been applied. For tests and operators; the loop runs on its own otherwise.
  uint64_t RequestDiscovery();
  uint64_t discovery_rounds_done() const { return discovery_done_.load(); }
  // Turns the engine-metrics loop has taken (each: a round when scraping is on, else nothing),
  // for tests that step GatewayClock and need to know the loop looked.
  uint64_t engine_metrics_turns() const { return engine_metrics_turns_.load(); }

  // ---- The routing decision, shared by the HTTP proxy (request_path.cc) and the endpoint
  // picker (src/epp/): one parse, pool, admission and pick path, one set of metrics.

  // What the dispatch routes by, owned: the parser's views do not survive an await.
  struct Dispatch {
    std::string served_name;
    PrefixKey key;
    uint32_t work_tokens = 0;
    std::vector<uint64_t> chain;          // cache-aware: the keyed text's block chain
    std::vector<uint32_t> prompt_tokens;  // kv-aware
    Policy* policy = nullptr;             // the pool's, or the unkeyed one (owned by `rs` below, or static)
    // flow_control.saturation in-flight: not picked where this many are in flight while another
    // instance has room (core AppendFullInstances); 0 = anywhere.
    uint32_t full_at = 0;
  };
  using Headers = std::vector<std::pair<std::string, std::string>>;
  // A request parsed, pooled and admitted: what to pick by, and its pool slot (held until the
  // request ends: the caller keeps the Admission alive that long).
  struct Admission {
    std::shared_ptr<const RoutingState> rs;  // the state it was admitted on; picks use its fleet
    Dispatch d;
    std::string model_label;  // RoutingState::ModelLabel of the served name
    PoolSlot slot;
    bool count_usage = false;    // a generation route: its responses' usage is counted
    bool engine_tokens = false;  // tokenizer: engine: d.prompt_tokens still to ask (/tokenize)
    Headers headers;             // for the answer (a limited tenant's x-ratelimit-*)
    // Queued by the pool's flow control: wait (WaitInQueue) for `slot` before routing.
    std::shared_ptr<PoolFlow> flow;
    std::shared_ptr<PoolFlow::Waiter> waiter;
    uint64_t ticket = 0;
    int32_t priority = 0;
  };
  // The OpenAI-style error to answer instead (already counted in prefix_router_responses_total
  // and, for 429/413, prefix_router_rejected_requests_total).
  struct Refusal {
    int status = 500;
    std::string message;
    std::string code;  // "" -> null
    Headers headers;   // Retry-After, x-ratelimit-*
  };
  // Steps 1-3 of a routed request: bytes -> routing values (400 on bad JSON or a bad routing
  // header), the pool by served name (404 when no instance serves it), tenant rate limits
  // (`tenant`: the client key's, empty when keys are off) and the pool's max_in_flight (429).
  // Does not suspend; `model` (when not null) receives the served name once parsed.
  // `wait_on`: the request's thread, where it may wait in a flow-controlled pool's queue (the
  // picker passes a QueueExecutor); null = no waiting: a full pool refuses at once.
  std::variant<Admission, Refusal> Admit(api::ApiKind api_kind, const http::Request& req, std::string_view tenant,
                                         std::string* model, const boost::asio::any_io_executor* wait_on = nullptr);
  // Waits in the pool's queue for `a`'s slot (Admission::waiter). True: it has its slot. False:
  // it was refused, and the refusal answered here (its wait ran out, or a higher priority took
  // its place), or the client went away meanwhile and gets nothing. (Apart from HandleRouted,
  // like SendRefusal, so that HandleRouted's coroutine frame stays within the 1,020 bytes that
  // asio recycles.)
  net::awaitable<bool> WaitInQueue(http::Exchange& ex, Admission& a);
  // The same wait for a caller that cannot suspend (the endpoint picker, on gRPC's threads).
  // StartQueueWait runs it on the thread Admit queued `a` on (`a.waiter->executor`) and calls
  // `done` there exactly once when it ends: with `a` back, holding its slot unless `refusal` is
  // set or `gone` is. It is also called (gone) if that thread's loop is torn down first. Cancel
  // (any thread, any number of times) says the requester went away: the wait ends at once, as
  // WaitInQueue's does when its client goes (client_disconnects{stage="queued"}).
  class QueueWait : public std::enable_shared_from_this<QueueWait> {
   public:
    explicit QueueWait(std::shared_ptr<PoolFlow::Waiter> waiter) : waiter_(std::move(waiter)) {}
    void Cancel();

   private:
    friend class Gateway;
    const std::shared_ptr<PoolFlow::Waiter> waiter_;
    bool gone_ = false;  // touched on waiter_->executor only
  };
  struct QueueWaitEnd {
    Admission admission;
    std::optional<Refusal> refusal;
    bool gone = false;
  };
  // REQUIRES: `a` was queued (a.waiter set) by Admit.
  std::shared_ptr<QueueWait> StartQueueWait(Admission a, std::function<void(QueueWaitEnd)> done);
  // One of the I/O threads, in turn, for a caller that has none of its own to pass to Admit as
  // `wait_on` (the picker). Nullopt before Start has returned.
  std::optional<net::any_io_executor> QueueExecutor();
  // The 429 pool_overloaded of a pool at its ceiling (`reason`: pool_in_flight, or a queue_*
  // reason of flow control), counted in both metrics; the message is "too many requests in
  // flight for '<served name>'" + `detail` + "; retry later". Takes `a.headers` (a limited
  // tenant's x-ratelimit-*) and adds Retry-After: 1.
  Refusal PoolOverloaded(Admission& a, std::string_view reason, std::string_view detail);
  // The routing request of `a`'s next pick, excluding `tried`; named with a fresh request id.
  RouteRequest RouteRequestFor(const Dispatch& d, std::span<const uint32_t> tried);
  // The generator picks use: this thread's, or the seeded one of SeedPicksForTest.
  Rng& PickRng();
  // Tests that compare two gateways' choices: every pick draws from one generator seeded with
  // `seed`. REQUIRES: called before Start; picks then made one at a time.
  void SeedPicksForTest(uint64_t seed) { test_rng_ = std::make_unique<Rng>(seed); }
  // The routing metrics of the `n`th decision of a request (0: the first; `retry_reason`: why
  // the one before failed): requests, overflows, retries, the status page's tallies.
  void CountDecision(const RoutingState& rs, const Decision& decision, std::string_view model_label, uint32_t n,
                     std::string_view retry_reason);
  // prefix_router_routing_decision_seconds.
  void ObserveDecisionSeconds(double seconds);
  // prefix_router_responses_total{code, origin="gateway"}: an answer the gateway made itself.
  void CountGatewayResponse(int status);
  // The first discovery round has ended (AwaitFirstDiscovery no longer waits).
  bool first_discovery_done() const { return first_discovery_done_.load(); }
  // Services run beside the HTTP listener on this gateway's routing (the endpoint picker):
  // Stop and the destructor shut them down before the HTTP server. Not thread-safe: attach
  // from the thread that later calls Stop, before it does.
  class Attachment {
   public:
    virtual ~Attachment() = default;
    virtual void Shutdown() = 0;
  };
  void Attach(std::unique_ptr<Attachment> attachment) { attachments_.push_back(std::move(attachment)); }

  // For tests and the status page.
  std::shared_ptr<const RoutingState> routing() const { return routing_.load(); }
  metrics::Registry& metrics() { return registry_; }
  // GET /metrics's answer (the client listener's, or the admin listener's: metrics.listener).
  http::StringResponse MetricsResponse() const;
  const RateLimiter& rate_limiter() const { return *limiter_; }
  const GatewayConfig& config() const { return config_; }  // as started
  // The configuration in force: the start's, with what reloads and membership changes applied.
  GatewayConfig running_config() const;
  StatusClock::time_point started_at() const { return started_at_; }
  const RequestSeries& request_series() const { return request_series_; }
  // Tokens and first-byte times per model label, and their series (the status page's).
  const ModelStats& model_stats() const { return model_stats_; }
  const RequestSeries& model_series() const { return model_series_; }
  // Records every instance's request count in request_series(); a timer calls it every
  // RequestSeries::kInterval while the gateway runs (status.cc).
  void SampleRequests(StatusClock::time_point now);

 private:
  Gateway(GatewayConfig config, RateLimiter::Now rate_limit_clock);
  struct Metrics;
  struct Attempt;
  struct RequestRecord;

  // How one forwarding attempt ended.
  enum class AttemptOutcome {
    kDone,   // answered (or the client is gone)
    kRetry,  // failed before any byte reached the client; another instance may try
    kFail,   // failed in a way a retry must not repeat (the instance may be working on it)
  };

  // The wait of WaitInQueue and StartQueueWait: `requester_gone` is set (and the waiter's timer
  // cancelled) on the waiter's thread when the requester goes; `gone` says it went.
  net::awaitable<std::optional<Refusal>> AwaitQueueSlot(Admission& a, const bool& requester_gone, bool& gone);
  struct PendingQueueWait;
  net::awaitable<void> RunQueueWait(std::shared_ptr<QueueWait> wait, PendingQueueWait pending);
  // The request path (request_path.cc): parse, admit, dispatch with retries.
  net::awaitable<void> HandleRouted(http::Exchange& ex, api::ApiKind api_kind, RequestRecord& record);
  // Sends a Refusal as the proxy's answer.
  // REQUIRES: `refusal` lives until the awaitable completes.
  net::awaitable<void> SendRefusal(http::Exchange& ex, const Refusal& refusal);
  // Picks, forwards and, on a retryable failure, picks again without the instances tried, up
  // to max_retries; answers the client's error when no attempt succeeds.
  net::awaitable<void> DispatchWithRetries(http::Exchange& ex, const RoutingState& rs, const Dispatch& d,
                                           Attempt& attempt, RequestRecord& record);
  // The log record and the routing metrics of the `n`th decision (0: the first).
  void RecordDecision(const RoutingState& rs, const Decision& decision, uint32_t n, const Attempt& attempt,
                      RequestRecord& record);
  // A successful generation's usage: token counters and the status page's tallies.
  void CountUsage(const std::string& instance, InstanceRuntime& rt, const Attempt& attempt,
                  const api::ResponseUsage& usage);
  // A response that broke after its head went out: logged, an SSE error event for a stream,
  // and the connection closed so that the client sees the truncation.
  net::awaitable<void> EndBrokenStream(http::Exchange& ex, const std::string& instance, const Attempt& attempt,
                                       bool sse);
  // Checks the client key of a request to a route that needs one; false once it answered 401.
  net::awaitable<bool> Authenticate(http::Exchange& ex, const ClientKeySet& keys, RequestRecord& record);
  // Takes the request from its tenant's buckets and sets the x-ratelimit-* headers; the 429
  // (or 413) to answer when it is refused. Does not suspend (`tenant` may view the parser).
  std::optional<Refusal> AdmitTenant(size_t body_bytes, std::string_view tenant, const std::string& model,
                                     Headers& headers);
  // Swaps in `next`'s client keys and rate limits; one line per difference from `previous`.
  // REQUIRES: ops_mu_ held (or the gateway not started).
  void ApplyClientsAndLimits(const GatewayConfig& next, const GatewayConfig* previous,
                             std::vector<std::string>* changes);
  void LogAccess(const http::Exchange& ex, std::string_view path, const RequestRecord& record) const;
  net::awaitable<void> HandleHealth(http::Exchange& ex);
  net::awaitable<void> HandleModels(http::Exchange& ex);
  net::awaitable<void> HandleMetrics(http::Exchange& ex);
  // Calls policy.OnFirstToken(decision) at the response's first body byte when it streams
  // (text/event-stream), else once the whole response has arrived; not when the attempt fails
  // before either.
  net::awaitable<AttemptOutcome> Forward(http::Exchange& ex, const RoutingState& rs, uint32_t index,
                                         const Decision& decision, bool last_attempt, Attempt& attempt, Policy& policy);
  // Forward's second half, once the instance's head has come and a body follows: relays it to
  // the client, and gives the connection back to the pool when it may be reused.
  // `client_gone` and `instance_ejected` are Forward's watch flags; `ejection` its subscription.
  struct AttemptContext;
  net::awaitable<AttemptOutcome> RelayBody(AttemptContext& c, Lease& lease,
                                           beast::http::response_parser<beast::http::buffer_body>& parser,
                                           EjectionSignal::Subscription& ejection, const bool& client_gone,
                                           const bool& instance_ejected, int status, bool sse);
  // Starts a background loop on `ctx` through SpawnBackground (gateway/background.h): an
  // exception that escapes it is logged with `task` and counted.
  void SpawnLoop(net::io_context& ctx, std::string_view task, net::awaitable<void> loop);
  net::awaitable<void> HealthLoop(std::shared_ptr<const RoutingState> rs, uint32_t index);
  net::awaitable<void> SampleLoop();
  enum class CheckResult { kPass, kFail, kLocalError };
  // kLocalError: the check could not be made for want of a local resource (descriptors,
  // buffers, ports): it says nothing about the instance.
  net::awaitable<CheckResult> CheckOnce(const UpstreamTarget& target);
  void ReportConnectFailure(const RoutingState& rs, uint32_t index);
  void SetAvailable(const RoutingState& rs, uint32_t index, bool available, std::string_view why);
  std::shared_ptr<InstanceRuntime> NewRuntime(const InstanceConfig& instance);
  // A RoutingState for `config`'s instances and pools, carrying over from `previous` what the
  // class comment says; `changes` (when not null) receives one line per difference.
  Result<std::shared_ptr<RoutingState>> BuildRouting(const GatewayConfig& config, const RoutingState* previous,
                                                     std::vector<std::string>* changes, bool reread_files = false);
  // Validates `candidate` (the running configuration with a changed fleet), swaps in its
  // RoutingState and starts its health checks. `reread_files` (a reload): https instances get
  // new TLS contexts, so that a changed CA file is read again. REQUIRES: ops_mu_ held.
  Result<std::vector<std::string>> ApplyLocked(GatewayConfig candidate, bool reread_files = false);
  // The instances `running` stands for once discovery is applied: each `resolve: all` instance
  // replaced by one per known address, and discovered served names in place of configured
  // ones. REQUIRES: ops_mu_ held (or no other thread yet).
  GatewayConfig EffectiveLocked(const GatewayConfig& running) const;
  // Builds and swaps in the RoutingState of `effective` (an EffectiveLocked result) and starts
  // its health checks; `reread_files` as for ApplyLocked. REQUIRES: ops_mu_ held.
  Result<std::vector<std::string>> SwapLocked(const GatewayConfig& effective, bool reread_files = false);
  // Points the KV event subscriber at the `kv_events` streams of `effective`'s instances, each
  // feeding the policies of the pools it serves in `rs`; starts it on the first stream.
  void UpdateKvSources(const GatewayConfig& effective, const RoutingState& rs);
  // Discovery (discovery_loop.cc).
  net::awaitable<void> DiscoveryLoop();
  // Resolves every template; applies what changed when `apply` (else only records it: Create).
  net::awaitable<void> ResolveRound(bool apply);
  // Takes the Kubernetes watcher's endpoints when they changed; applies them when `apply`.
  void KubernetesRound(bool apply);
  net::awaitable<void> PollRound();
  net::awaitable<Result<ModelList>> PollModels(UpstreamTarget target);
  void WakeDiscovery();
  // Returns once the first poll round has ended, or after health.timeout (a poll's own bound),
  // or when the gateway stops: a request arriving just after start is routed by the names the
  // engines answer, not by the names known before (every name, for a bare instance).
  net::awaitable<void> AwaitFirstDiscovery();
  // GET `path` from one instance on a fresh connection, bounded by health.timeout and
  // `body_limit`: the body of a 200 answer, else why not (discovery_loop.cc).
  net::awaitable<Result<std::string>> GetFromInstance(UpstreamTarget target, std::string path, size_t body_limit,
                                                      const char* user_agent, const char* accept);
  // POST `body` (JSON) to `path` of one instance on a pooled keep-alive connection, the whole
  // exchange bounded by `timeout` and the answer by `answer_limit` bytes: the body of a 200
  // answer, else why not (tokenize.cc).
  net::awaitable<Result<std::string>> PostToInstance(const UpstreamTarget& target, std::string_view path,
                                                     std::string_view body, size_t answer_limit,
                                                     std::chrono::milliseconds timeout);
  // tokenizer: engine: the prompt's tokens from /tokenize on a routable instance serving
  // `served_name`; empty when the body gives no prompt or the instance fails (tokenize.cc).
  net::awaitable<std::vector<uint32_t>> EngineTokens(const RoutingState& rs, const std::string& served_name,
                                                     api::ApiKind api_kind, std::string_view body);
  // Engine metrics (engine_metrics_loop.cc): scrapes every instance's /metrics each
  // engine_metrics.interval into its InstanceState's engine_* fields.
  net::awaitable<void> EngineMetricsLoop();
  net::awaitable<void> EngineMetricsRound();

  GatewayConfig config_;
  const StatusClock::time_point started_at_ = StatusClock::now();
  RequestSeries request_series_;  // outlives server_, whose timer fills it
  ModelStats model_stats_;        // the request path adds to it
  RequestSeries model_series_;    // sampled with request_series_, keyed by model label
  metrics::Registry registry_;
  std::unique_ptr<Metrics> metrics_;
  std::atomic<std::shared_ptr<const RoutingState>> routing_;
  std::atomic<std::shared_ptr<const ClientKeySet>> client_keys_;  // null: no key asked
  std::unique_ptr<RateLimiter> limiter_;
  std::unique_ptr<http::Server> server_;
  mutable std::mutex ops_mu_;  // serialises run-time changes
  // The configuration in effect: config_ with the run-time changes to instances, routing and
  // pools (admin off: its token is not re-read when a change is validated). Guarded by ops_mu_.
  // Its instances are the configured ones, templates of what discovery derives: the
  // RoutingState holds EffectiveLocked(running_).
  GatewayConfig running_;
  std::vector<std::unique_ptr<Attachment>> attachments_;  // shut down by Stop and ~Gateway
  std::unique_ptr<Rng> test_rng_;                         // SeedPicksForTest
  // Declared last: stopped and destroyed first (it holds metric children of registry_).
  std::unique_ptr<KvEventSubscriber> kv_subscriber_;

  // What discovery learned; guarded by ops_mu_.
  struct ResolvedName {
    std::string host;  // the template's host and port when resolved
    uint16_t port = 0;
    std::vector<ResolvedAddress> addresses;  // sorted, unique; the last non-empty answer
    bool failing = false;                    // the last resolution failed or was empty
  };
  std::map<std::string, ResolvedName, std::less<>> resolved_;  // by template name
  // How the last poll of an instance went, when it gave no list (each logged once per streak).
  enum class FailingState {
    kNo,
    kFailing,  // no answer, an error status, or a list too large: the last list stands
    kNoList,   // left to the default and never listed: no /v1/models (404, 405, 501) or not
               // the list shape; the instance serves what it would without discovery
  };
  struct DiscoveredModels {
    std::string url;                                // of the instance polled
    std::optional<std::vector<std::string>> names;  // the last successful poll's
    std::shared_ptr<const ModelEntries> entries;    // with names: their entries
    FailingState failing = FailingState::kNo;
  };
  std::map<std::string, DiscoveredModels, std::less<>> discovered_;  // by instance name
  std::shared_ptr<Resolver> resolver_;
  // discovery.kubernetes: the watcher (null when off) and the endpoints last applied (guarded
  // by ops_mu_), which EffectiveLocked turns into instances.
  std::shared_ptr<KubernetesWatcher> kubernetes_;
  uint64_t kubernetes_version_ = 0;
  std::vector<KubernetesEndpoint> kubernetes_endpoints_;
  metrics::Family<metrics::Counter>* kubernetes_errors_ = nullptr;
  std::atomic<uint64_t> discovery_requested_{0};
  std::atomic<uint64_t> discovery_done_{0};
  std::atomic<bool> discovery_stop_{false};
  // The discovery loop's first poll round has ended (or the loop has): until then requests
  // that depend on served names wait for it (AwaitFirstDiscovery).
  std::atomic<bool> first_discovery_done_{false};
  // Start has returned (QueueExecutor may hand out the I/O threads); the next one it hands out.
  std::atomic<bool> started_{false};
  std::atomic<uint32_t> queue_executor_turn_{0};
  GatewayTimer* discovery_timer_ = nullptr;  // the loop's; touched on context(0) only
  // Instances whose last engine-metrics scrape failed (logged once per streak); touched by the
  // engine-metrics loop only, on context(0).
  std::set<std::string, std::less<>> engine_metrics_failing_;
  std::atomic<uint64_t> engine_metrics_turns_{0};
  // Which instance the next /tokenize asks, in rotation, and its metrics (tokenize.cc;
  // registered by Create).
  std::atomic<uint64_t> tokenize_rotation_{0};
  // Names each dispatch for the policies (RouteRequest::request_id): 1, 2, ... (0 = unnamed).
  std::atomic<uint64_t> dispatch_ids_{0};
  metrics::Family<metrics::Counter>* tokenize_requests_ = nullptr;
  metrics::Family<metrics::Histogram>* tokenize_seconds_ = nullptr;
};

}  // namespace prefix_router::gateway
