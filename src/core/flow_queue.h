// Flow control's queue (issue #16): the requests of one pool that wait, while the pool is
// saturated, for capacity to free, and the order in which they leave.
//
// Order: priority band first (higher first); within a band, fairness between tenants by virtual
// token counters (VTC: Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024):
// each tenant of the band has a counter charged with the prompt tokens of each of its requests
// that leaves the queue, and the next request is the oldest of the backlogged tenant with the
// lowest counter, ties to the tenant whose oldest request arrived first. A tenant that becomes
// backlogged starts at least at the lowest counter among those already backlogged, so time spent
// idle is not saved up as credit to flood with later. Without fairness, the band is one flow.
// A tenant that floods therefore waits behind its own requests while another tenant's
// requests leave at the same rate in tokens, whatever the two send.
//
// Within a tenant (the whole band without fairness), deadlines first: a request may carry a
// deadline (its arrival plus its time-to-first-token objective, header x-slo-ttft-ms as the
// Gateway API Inference Extension's SLO routing names it); the next request is the one with the
// earliest deadline not yet passed, else the oldest (requests without a deadline, and those whose
// deadline passed, in arrival order). Earliest-deadline-first meets every objective that any order
// can meet when the requests can be served in time, and serving first a request that can no longer
// meet its objective helps no objective, so it waits with those that have none (deadlines: false
// ignores them: arrival order). This orders a
// tenant's own requests, as GIE's flow ordering does; it does not move one tenant ahead of another
// (a tight objective is not a way past fairness).
//
// Bounds: at most max_queue requests and max_queue_bytes of their bodies. A request that does not
// fit displaces the most recent requests of lower bands (each leaves with a refusal, returned to
// the caller) or, when only its own band and higher ones are queued, is refused itself. Requests
// of a sheddable band (negative) are never queued: a saturated pool refuses them first. A request
// that waits longer than max_queue_wait leaves through Expire (the caller answers 429); one whose
// client went away leaves through Remove, with no charge to its tenant.
//
// Memory: the queued requests, plus one counter for each tenant that is not backlogged but has
// been charged more than the lowest backlogged counter (the others are forgotten: joining again
// lifts them to that counter anyway); at most kMaxIdleTenants of those per band (beyond it the
// lowest are forgotten, which only lets them rejoin at the lowest counter). A band that empties
// forgets its counters: fairness is between tenants that wait at the same time. With a per-tenant
// bound, also one count for each tenant with requests in flight.
//
// Per-tenant bound (max_in_flight_per_tenant > 0): a tenant holds at most that many requests in
// flight in the pool. The caller reports each request that goes in flight without the queue
// (Started) and each that ends (Finished); Pop counts those it lets out. A tenant at its bound is
// *blocked*: its queued requests stay (and wait out their max_queue_wait) while Pop passes over
// it to the next tenant in fairness order, and an arriving request of it waits even when the pool
// has room (the caller asks AtBound). When one of its requests ends it rejoins the order, at least
// at the lowest counter of those waiting, as a tenant that starts waiting does (time spent at its
// own bound is not service the queue denied it). The bound reserves room: a tenant within its
// bound never waits for one that floods, which the fair order alone cannot give (a fair order is
// not a free slot). It is not work-conserving: a flood waits while the engines could take more,
// which is the operator's choice of the bound (docs/flow-control.md measures the trade). Flows
// are tenants whenever the bound is set (the configuration requires fairness with it).
//
// The queue decides when, not where: the caller routes a request that leaves with the load it
// sees then. Time is the caller's clock in seconds (steady time in the gateway, model time in the
// simulator). Not thread-safe: one owner (the pool) calls it under its own lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/fleet.h"
#include "core/status.h"

namespace prefix_router {

inline constexpr uint32_t kMaxFlowQueue = 1000000;
inline constexpr uint64_t kMaxFlowQueueBytes = 64ull << 30;
inline constexpr double kMaxFlowQueueWait = 3600;
inline constexpr int32_t kMinFlowBand = -10, kMaxFlowBand = 10;

// When a pool is saturated, so that an arriving request waits (or is refused) instead of being
// routed. Always at max_in_flight, when the pool has one; beyond it:
//   kPool      nothing more (the default);
//   kInFlight  also when every routable instance the pool can use has concurrency_threshold
//              requests in flight: the routing policy's own notion of an instance being full
//              (prefix-aware spills there; the managed service's threshold). The counts are the
//              gateway's own (the requests it sent), read live from the fleet's states.
// kInFlight bounds every engine's batch, but a request let out goes where there is room, cache
// or not: docs/flow-control.md measures what that costs prefix-heavy traffic.
enum class FlowSaturation { kPool, kInFlight };
std::string_view FlowSaturationName(FlowSaturation s);  // "pool" | "in-flight"
Result<FlowSaturation> ParseFlowSaturation(std::string_view name);

struct FlowQueueOptions {
  uint32_t max_queue = 0;        // requests waiting; 0 = no queue (refuse at once)
  uint64_t max_queue_bytes = 0;  // bytes of the bodies waiting; 0 = bounded by max_queue only
  double max_queue_wait = 10;    // seconds a request may wait; > 0
  bool fairness = true;          // VTC between tenants within a band; false = arrival order
  bool deadlines = true;         // FlowItem::deadline orders a flow (earliest first); false = ignored
  // Priority bands by objective name (the header x-gateway-inference-objective, as the Gateway
  // API Inference Extension's InferenceObjective names a request's priority): "name=band,...";
  // "" = none. The gateway reads it when classifying a request; the queue does not.
  std::string objectives;
  FlowSaturation saturation = FlowSaturation::kPool;
  uint32_t max_in_flight_per_tenant = 0;  // requests one tenant may hold in flight; 0 = no bound
  bool operator==(const FlowQueueOptions&) const = default;
};

inline constexpr size_t kMaxFlowObjectives = 64;
inline constexpr size_t kMaxFlowObjectiveName = 253;  // a Kubernetes object name's length
// Whether `name` is 1..max_size of [A-Za-z0-9._-]: the names flow control reads from
// configuration (objectives here, tenant classes in workload/tenants.h).
bool FlowNameOk(std::string_view name, size_t max_size);
// InvalidArgument unless `objectives` is "" or comma-separated name=band pairs: names 1..253 of
// [A-Za-z0-9._-] (a Kubernetes object name's characters), each once, bands kMinFlowBand..
// kMaxFlowBand, at most kMaxFlowObjectives pairs.
Status ValidateFlowObjectives(std::string_view objectives);
// The band that `objectives` (valid) gives `name`; nullopt when it names no such objective.
// Allocation-free: a scan of the short configured string per request.
std::optional<int32_t> FlowObjectiveBand(std::string_view objectives, std::string_view name);

// How many more requests the instances `eligible` of `fleet` can take before each is full in
// `mode` (kInFlight: `limit` requests in flight), summed over the routable ones, at most `enough`
// (the scan stops there: O(instances up to the room found)). kPool: `enough`. With no routable
// eligible instance at all, also `enough`: nothing will free there, so a request is not held to
// wait for it but routed, and answered at once (503, no instance available).
uint64_t FlowInstanceRoom(const FleetSnapshot& fleet, std::span<const uint32_t> eligible, FlowSaturation mode,
                          uint32_t limit, uint64_t enough);

// In-flight saturation routes a request only where there is room: the instances of `eligible`
// that are routable and hold `limit` or more requests, appended to `out` (for RouteRequest::
// exclude) unless that would exclude every routable one (then nothing is appended: the request
// was admitted in a race, or with no room anywhere, and routes as usual).
void AppendFullInstances(const FleetSnapshot& fleet, std::span<const uint32_t> eligible, uint32_t limit,
                         std::vector<uint32_t>& out);

inline constexpr double kNoFlowDeadline = std::numeric_limits<double>::infinity();
// The longest time-to-first-token objective a request may carry (x-slo-ttft-ms): a day.
inline constexpr uint32_t kMaxTtftObjectiveMs = 86'400'000;

struct FlowItem {
  uint64_t id = 0;      // the caller's, unique among the queued
  int32_t band = 0;     // higher leaves first; negative = sheddable (never queued)
  std::string tenant;   // the fairness key ("" is a tenant like any other)
  uint64_t tokens = 0;  // charged to the tenant when it leaves (prompt tokens; at least 1 is charged)
  uint64_t bytes = 0;   // counted against max_queue_bytes
  double arrival = 0;   // caller's clock, seconds
  double deadline = kNoFlowDeadline;  // caller's clock: when its TTFT objective runs out; none = infinity
};

enum class FlowVerdict {
  kQueued,
  kShed,      // a sheddable band while saturated
  kFull,      // no room, and nothing of a lower band to displace
  kTooLarge,  // its body alone is over max_queue_bytes
};

class FlowQueue {
 public:
  static constexpr size_t kMaxIdleTenants = 4096;

  explicit FlowQueue(FlowQueueOptions options) : options_(options) {}

  struct PushResult {
    FlowVerdict verdict = FlowVerdict::kQueued;
    std::vector<uint64_t> displaced;  // ids of lower-band requests that left to make room
  };
  // REQUIRES: item.id is not queued
  PushResult Push(FlowItem item);
  // The next request to leave at `now` (the caller's clock: which deadlines have passed), charged
  // to its tenant; nullopt when the queue is empty. Without `now`, no deadline has passed.
  std::optional<FlowItem> Pop(double now = -std::numeric_limits<double>::infinity());
  // Takes `id` out without charging its tenant (its client went away); false when not queued.
  bool Remove(uint64_t id);
  // Takes out, oldest first, the requests that have waited max_queue_wait or longer at `now`.
  std::vector<uint64_t> Expire(double now);
  // When the oldest request's wait runs out; nullopt when the queue is empty.
  std::optional<double> NextExpiry() const;
  // How long `id` has waited at `now`; nullopt when it is not queued.
  std::optional<double> Waited(uint64_t id, double now) const;
  // How long the oldest queued request has waited at `now`; nullopt when the queue is empty.
  std::optional<double> OldestWaited(double now) const;
  // Whether Pop would let a request out: one is queued whose tenant is within its bound.
  bool ready() const;

  // The per-tenant bound (no-ops without one). Pop counts the requests it lets out itself.
  // Whether `tenant` holds max_in_flight_per_tenant requests in flight (false without a bound).
  bool AtBound(std::string_view tenant) const;
  // A request of `tenant` went in flight without the queue.
  void Started(const std::string& tenant);
  // A request of `tenant` that went in flight (Started, or let out by Pop) ended. A tenant this
  // queue does not count (its requests went in flight before a new queue replaced an old one)
  // is ignored.
  void Finished(const std::string& tenant);
  // Requests in flight of `tenant`, as counted here (0 without a bound).
  uint32_t in_flight(std::string_view tenant) const;
  // Tenants at their bound.
  size_t tenants_at_bound() const { return at_bound_; }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  uint64_t bytes() const { return bytes_; }
  size_t size(int32_t band) const;
  // Tenants with a counter kept, backlogged or not (for tests of the memory bound).
  size_t tenants_tracked() const;
  const FlowQueueOptions& options() const { return options_; }

 private:
  struct Tenant {
    std::list<uint64_t> queue;  // ids, oldest first
    std::set<std::pair<double, uint64_t>> deadlines;  // (deadline, id) of those that have one
    double counter = 0;
    bool blocked = false;  // queued, at its in-flight bound: out of `backlogged` until one ends
  };
  struct Band {
    std::unordered_map<std::string, Tenant> tenants;
    // (counter, head's seq, tenant) of those with requests queued and not blocked
    std::set<std::tuple<double, uint64_t, std::string>> backlogged;
    std::set<std::pair<double, std::string>> idle;                   // (counter, tenant): charged above the lowest
    std::list<uint64_t> arrivals;  // ids, oldest first (displacement takes the newest)
    uint64_t bytes = 0;            // of its queued bodies
  };
  struct Node {
    FlowItem item;
    uint64_t seq;  // arrival order
    std::list<uint64_t>::iterator in_tenant, in_band, in_all;
  };

  // Takes `id` out of every structure; `charge`: add its tokens to its tenant's counter.
  FlowItem Take(uint64_t id, bool charge);
  // The flow `item` is ordered in: its tenant, or the band's one flow without fairness.
  const std::string& FlowOf(const FlowItem& item) const {
    return options_.fairness || options_.max_in_flight_per_tenant > 0 ? item.tenant : kOneFlow;
  }
  static inline const std::string kOneFlow;  // every request's flow without fairness
  double LowestBacklogged(const Band& b) const;
  void Prune(Band& b);
  // `tenant` reached its bound: out of the order of every band it waits in.
  void Block(const std::string& tenant);
  // `tenant` fell below its bound: back in the order, at least at the lowest waiting counter.
  void Unblock(const std::string& tenant);

  FlowQueueOptions options_;
  std::map<int32_t, Band, std::greater<>> bands_;  // highest first
  std::unordered_map<uint64_t, Node> items_;
  std::list<uint64_t> all_;  // ids in arrival order (expiry)
  uint64_t bytes_ = 0;
  uint64_t next_seq_ = 0;
  std::unordered_map<std::string, uint32_t> tenant_in_flight_;  // with a bound: those with any in flight
  size_t at_bound_ = 0;
};

}  // namespace prefix_router
