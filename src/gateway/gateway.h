// Gateway: `prefix-router serve`. An HTTP server whose handler routes each request with the
// core's policies and relays it to the chosen instance, streaming the response back.
//
// A request's path: the Server reads it; the api layer turns its bytes into routing values
// (served name, routing group, prefix key) or a 400; the pool's Policy picks an instance from
// the current RoutingState; an InFlightGuard counts it there until the exchange ends, however it
// ends; the body goes upstream unchanged on a pooled keep-alive connection and the response
// streams back as it arrives. Before any byte reached the client, a failed connect, a reset or
// an upstream 500, 502 or 503 moves on to the next instance in the key's preference order
// (max_retries); a first-byte timeout (504) does not, since the instance may still be working.
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
// Run-time changes (gateway/operations.cc; the admin API and SIGHUP call them): adding,
// removing, draining instances and reloading the configuration build a new RoutingState from
// the current one and swap it in. Requests in flight finish on the state they started with;
// per-instance state (in-flight counts, health, drain) carries over by name, and each pool's
// Policy, with what it learned, carries over while the pool's routing options are unchanged.
//
// Thread-safety: the RoutingState is immutable and shared; per-instance live state is atomic;
// connection pools are per I/O thread; run-time changes are serialised by ops_mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/fleet.h"
#include "api/key_normalisation.h"
#include "core/policy.h"
#include "gateway/config.h"
#include "gateway/metrics.h"
#include "gateway/operations.h"
#include "gateway/status.h"
#include "gateway/upstream.h"
#include "http/server.h"

namespace prefix_router::gateway {

// Live, per-instance state the gateway keeps beside the core's InstanceState.
struct InstanceRuntime {
  UpstreamTarget target;
  std::atomic<uint32_t> consecutive_failures{0};   // active checks and passive connect failures
  std::atomic<uint32_t> consecutive_successes{0};  // active checks while ejected
  // Metric children resolved once (label lookups stay off the request path).
  Histogram* first_byte = nullptr;
  Histogram* duration = nullptr;
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
  // options.key_normalisation compiled (patterns, paths); null when it is off.
  std::shared_ptr<const api::KeyNormaliser> normaliser;
};

// Everything a request needs to be routed, swapped as one immutable unit.
struct RoutingState {
  std::shared_ptr<const FleetSnapshot> fleet;
  std::vector<std::shared_ptr<InstanceRuntime>> instances;  // parallel to fleet indices; kept
                                                            // across changes by name and address
  Pool default_pool;
  std::map<std::string, Pool, std::less<>> pools;           // by served name

  const Pool& PoolFor(std::string_view served_name) const;
};

class Gateway final : public http::Handler {
 public:
  // REQUIRES: ValidateConfig(config).ok()
  static Result<std::unique_ptr<Gateway>> Create(GatewayConfig config);
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
  // Applies `next`'s instances, routing and pools and reports every other field that differs
  // from the running configuration as needing a restart. `trigger` names the cause in the log.
  // REQUIRES: ValidateConfig(next).ok()
  ReloadReport Reload(GatewayConfig next, std::string_view trigger);
  std::vector<InstanceView> Instances() const;

  // For tests and the status page.
  std::shared_ptr<const RoutingState> routing() const { return routing_.load(); }
  Registry& metrics() { return registry_; }
  const GatewayConfig& config() const { return config_; }
  StatusClock::time_point started_at() const { return started_at_; }
  const RequestSeries& request_series() const { return request_series_; }
  // Records every instance's request count in request_series(); a timer calls it every
  // RequestSeries::kInterval while the gateway runs (status.cc).
  void SampleRequests(StatusClock::time_point now);

 private:
  explicit Gateway(GatewayConfig config);
  struct Metrics;
  struct Attempt;
  struct RequestRecord;

  net::awaitable<void> HandleRouted(http::Exchange& ex, int api_kind, RequestRecord& record);
  void LogAccess(const http::Exchange& ex, std::string_view path, const RequestRecord& record) const;
  net::awaitable<void> HandleHealth(http::Exchange& ex);
  net::awaitable<void> HandleModels(http::Exchange& ex);
  net::awaitable<void> HandleMetrics(http::Exchange& ex);
  net::awaitable<int> Forward(http::Exchange& ex, const RoutingState& rs, uint32_t index,
                              const Decision& decision, bool last_attempt, Attempt& attempt);
  net::awaitable<void> HealthLoop(std::shared_ptr<const RoutingState> rs, uint32_t index);
  net::awaitable<void> SampleLoop();
  net::awaitable<bool> CheckOnce(const UpstreamTarget& target);
  void ReportConnectFailure(const RoutingState& rs, uint32_t index);
  void SetAvailable(const RoutingState& rs, uint32_t index, bool available, std::string_view why);
  std::shared_ptr<InstanceRuntime> NewRuntime(const InstanceConfig& instance);
  // A RoutingState for `config`'s instances and pools, carrying over from `previous` what the
  // class comment says; `changes` (when not null) receives one line per difference.
  Result<std::shared_ptr<RoutingState>> BuildRouting(const GatewayConfig& config,
                                                     const RoutingState* previous,
                                                     std::vector<std::string>* changes,
                                                     bool reread_files = false);
  // Validates `candidate` (the running configuration with a changed fleet), swaps in its
  // RoutingState and starts its health checks. `reread_files` (a reload): https instances get
  // new TLS contexts, so that a changed CA file is read again. REQUIRES: ops_mu_ held.
  Result<std::vector<std::string>> ApplyLocked(GatewayConfig candidate, bool reread_files = false);

  GatewayConfig config_;
  const StatusClock::time_point started_at_ = StatusClock::now();
  RequestSeries request_series_;  // outlives server_, whose timer fills it
  Registry registry_;
  std::unique_ptr<Metrics> metrics_;
  std::atomic<std::shared_ptr<const RoutingState>> routing_;
  std::unique_ptr<http::Server> server_;
  mutable std::mutex ops_mu_;  // serialises run-time changes
  // The configuration in effect: config_ with the run-time changes to instances, routing and
  // pools (admin off: its token is not re-read when a change is validated). Guarded by ops_mu_.
  GatewayConfig running_;
};

}  // namespace prefix_router::gateway
