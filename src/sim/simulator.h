// The fleet simulator: a discrete-event model of a gateway in front of N inference engines,
// with no sockets and no sleeping.
//
// What runs is what ships: requests come from workload/ (the same generators `bench` sends),
// their routing key from api/ (the parser the gateway runs, on the same JSON body), the
// decision from core/ (the same Policy objects, FleetSnapshot and in-flight counts), and each
// instance is an engine_model::StepScheduler (the same cache and step model the `engine`
// emulator runs), fed the prompt tokens the emulator would compute.
//
// A request's life, in model seconds:
//   sent at t           routed; the instance's in-flight count goes up (as the gateway's does)
//   t + overhead        submitted to the instance's scheduler (the profile's request_overhead:
//                       the emulator waits the same before submitting)
//   step ends           first token (TTFT = its time - t), later tokens, finish
//   finish              in-flight count goes down; a multi-turn session builds its next turn
//                       from the reply text the emulator would have streamed
// Each instance runs steps back to back while it has work; a step's events happen at its end.
//
// Arrivals: closed loop (C users running sessions back to back) or open loop (sessions start
// at Poisson times; a trace's own times when it has them). New requests stop at `duration_s`
// (or after `max_requests`); requests in flight then finish and are recorded.
//
// Scale events change the fleet during a run: `add` a cold instance, `remove` one (it stops
// receiving requests; those in flight finish; its cache is gone), `replace` one (same name, so
// the same keys, but a cold cache: a restart).
//
// KV events (kv-aware, dynamo-kv): each engine publishes what its cache stores and evicts
// (engine_model::KvEventListener -> KvEventBatch, as vLLM's publisher does), one batch per engine
// step with events by default (vLLM drains its events every step), numbered from 0 per engine.
// A batch reaches the policy's OnKvEvents `delay_s` model seconds after the step that produced it
// ends, or is lost with probability `loss` (seeded: the same run loses the same batches), so
// kv-aware is not an oracle. With `batch_interval_s` > 0 a batch is published once that long has
// passed since its first event's step (or when the engine goes idle). A removed instance's
// events stop reaching the router (it unsubscribed); a replaced one is a new engine whose stream
// starts again at sequence 0 (a restart).
//
// Gateways: `gateways` K > 1 models K gateway replicas behind a load balancer, over one fleet
// (docs/gateways.md). The i-th request sent (each turn of a session counts: a client's
// keep-alive connections to the balancer do not pin its requests to one replica) goes to
// gateway i mod K. Each gateway has its own Policy (its own learned index, key homes and share
// meter) and its own FleetSnapshot, whose in-flight, dispatched and outstanding-token counts
// hold only the requests it sent, as a replica's do; OnDispatched, OnFirstToken and OnCompleted
// go to the gateway that sent the request. The engines, their caches and what they report of
// their own load are shared. Every gateway subscribes to every engine's KV events: each batch
// reaches each gateway after the same delay, and is lost for each gateway independently (a
// subscriber's queue overflows or its connection drops, not the publisher). Scale events change
// every gateway's fleet at once. The gateways share one seeded random stream, drawn in the order
// the picks happen: random routing picks alike for any K, and K = 1 is the single gateway.
//
// Flow control (docs/flow-control.md): with routing.max_in_flight, each gateway admits at most
// that many requests in flight (dispatched, not yet finished), counted per gateway as a
// replica's pool counts its own. A request that finds its gateway at the ceiling is refused (429)
// or, with routing.flow_control.max_queue > 0, waits in that gateway's FlowQueue (core/
// flow_queue.h, the gateway's own queue: bands, fairness between tenants, bounds, displacement),
// and is routed when a request of that gateway finishes and frees its slot, with the load seen
// then. Its TTFT counts the wait. A queued request whose wait reaches max_queue_wait is refused.
// A refused request is not retried: its session goes on after a pause, as after an error.
// Tenants: with `tenants`, each session belongs to one class, drawn by share from its own seeded
// stream; its requests carry the class's priority band and name (the fairness key). Without
// classes, the fairness key is the request's routing group, as in the gateway.
//
// Bounds: the hit rate of one LRU cache with the fleet's total KV capacity, and of an infinite
// cache, seeing every request in dispatch order (prompt, then its output, as the engines cache
// them): what no router could beat with this fleet's memory, and with unbounded memory.
//
// Thread-safety: Simulate is a pure function of its options (deterministic for a seed); runs
// may execute concurrently on different threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/policy.h"
#include "core/status.h"
#include "engine_model/profiles.h"
#include "report/results.h"
#include "workload/tenants.h"
#include "workload/workload.h"

namespace prefix_router::sim {

struct ScaleEvent {
  enum class Kind { kAdd, kRemove, kReplace };
  Kind kind = Kind::kAdd;
  double at_s = 0;
  std::string instance;  // kRemove / kReplace: an existing name; kAdd: "" = next free name
};

// "add@600", "add:instance-9@600", "remove:instance-3@1200", "replace:instance-2@1800".
Result<ScaleEvent> ParseScaleEvent(std::string_view text);

// A strategy as named on the command line: a name of core's strategy registry
// (StrategyRegistry()), prefix-aware-next-preferred or prefix-aware-least-loaded (prefix-aware
// alone spills next-preferred), or a peer's name (core/peer_policies.h); a prefix-aware name may
// end in -bF (balance factor F), cache-aware in -wF (load weight F), any name in +tokens (load
// measured in outstanding prompt tokens). Fills strategy, spill, balance_factor, load_measure and
// cache_aware.load_weight of `base`; an unknown name is refused with the list StrategyNames() gives.
Result<RoutingOptions> ParseStrategyName(std::string_view name, RoutingOptions base);
// The registry's names, prefix-aware's spill-mode labels after prefix-aware, then the peers'.
std::vector<std::string_view> StrategyNames();
// The strategies `simulate` and `demo` compare when given none: random and
// least-outstanding-requests, the managed service's prefix-aware (prefix-aware-least-loaded-b0),
// ours (prefix-aware) and the gateway's default (cache-aware).
std::vector<std::string> DefaultComparison();

enum class Arrivals { kClosed, kOpen };

// How KV events reach the router (see the file comment); used by strategies that read them.
struct KvEventFeed {
  double delay_s = 0.05;        // model seconds from the end of the step to the router
  double batch_interval_s = 0;  // 0 = one batch per engine step
  double loss = 0;              // probability that a batch is lost, 0..1
};

inline constexpr uint32_t kMaxGateways = 64;

struct SimOptions {
  std::string workload = "long-context";
  workload::ParamMap params;
  // When set, makes the workload instead of workload::MakeWorkload(workload, params, seed);
  // `workload` is then only the name recorded in results (tests use it for hand-made traffic).
  std::function<Result<std::unique_ptr<workload::Workload>>(uint64_t seed)> make_workload;
  uint64_t seed = 1;
  uint32_t instances = 7;
  uint32_t gateways = 1;          // gateway replicas, 1..kMaxGateways (see the file comment)
  engine_model::Profile profile;  // REQUIRES: profile.config.Validate().ok()
  RoutingOptions routing;         // key_normalisation applies as in a gateway pool
  // A peer's routing policy, re-implemented (core/peer_policies.h), instead of routing.strategy;
  // "" = none. The sweep sets it from a strategy name IsPeerStrategy accepts.
  std::string peer;
  std::string strategy_label;  // the name recorded in results ("" = from routing)
  Arrivals arrivals = Arrivals::kOpen;
  uint32_t concurrency = 64;       // closed loop: users
  bool ignore_think_time = false;  // sessions' think times taken as 0 (saturation runs)
  double rate_rps = 1;             // open loop: requests per second (sessions at rate / turns)
  double trace_speed = 1;          // open loop over a timed trace
  double duration_s = 3600;        // no request is sent at or after this time
  uint64_t max_requests = 0;       // 0 = no limit
  double warmup_s = 0;             // requests sent before are recorded with counted = false
  double series_window_s = 60;     // 0 = no time series
  std::vector<ScaleEvent> events;
  bool bounds = false;  // compute the LRU and infinite-cache bounds
  std::string default_model = "default";
  KvEventFeed kv_events;
  std::vector<workload::TenantClass> tenants;  // empty = one class of clients (see the file comment)
};

struct SimRun {
  report::RunResult result;  // source "simulate", ttft_kind "modelled"
  std::vector<report::RequestRecord> records;
  std::vector<std::string> instance_names;  // share index -> name (added ones appended)
  uint64_t events_processed = 0;
};

// InvalidArgument for bad options (unknown workload or parameter, no instances, ...).
Result<SimRun> Simulate(const SimOptions& options);

// The labels of tenant classes in the results' per-class figures (report::AddFlowFigures and
// FlowLines), for the simulator and for bench, which sends the same classes.
std::vector<report::TenantLabel> TenantLabels(const std::vector<workload::TenantClass>& classes);

// Random routing's saturation throughput (requests per second) on this fleet and workload: a
// closed loop with `users_per_instance` users per instance and no think time for `duration_s`,
// the first `warmup_s` excluded. Offered loads are stated as a percentage of it.
Result<double> SaturationThroughput(SimOptions options, uint32_t users_per_instance = 32, double duration_s = 900,
                                    double warmup_s = 300);

}  // namespace prefix_router::sim
