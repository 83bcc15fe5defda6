// Fleet membership and live per-instance state.
//
// A FleetSnapshot is an immutable picture of the instances behind the router: their names,
// addresses, weights and the model and adapter names each one serves. The gateway builds a new
// snapshot when membership changes and swaps it in atomically (FleetState); readers keep using
// the snapshot they hold, so a pick never sees a half-updated fleet.
//
// Live state that changes per request (in-flight count, availability, drain) lives in InstanceState
// objects that snapshots share: a new snapshot built from a previous one keeps the state of the
// instances it retains (matched by name), so in-flight counts survive membership changes and
// InFlightGuards taken on an old snapshot release into the same counters.
//
// Thread-safety: snapshots are immutable and safe to share; InstanceState fields are atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace prefix_router {

inline constexpr uint32_t kMaxInstanceWeight = 10000;

struct InstanceSpec {
  std::string name;                 // unique, stable: placement is keyed on it
  std::string url;                  // where the gateway sends requests (unused by the core)
  uint32_t weight = 1;              // relative share of keys and random picks, 1..10000
  std::vector<std::string> serves;  // model and adapter names; empty = serves every name
  // `serves` is the whole list even when it is empty: an instance whose names are discovered
  // (gateway/discovery.h) and not known yet, or that lists none, serves no name at all.
  bool serves_only_listed = false;
};

struct LiveTotals;

// What decisions read of every candidate on each request: in-flight requests, availability,
// drain and outstanding prompt tokens. FleetSnapshot::Create keeps those of the instances it
// adds in one dense array, apart from the rest of their state: a decision over 10,000 instances
// then reads 240 KB in index order instead of a 64-byte line per instance (640 KB, which took as
// long as all the rest of a prefix-aware decision). The array also keeps totals (LiveTotals),
// updated by every change here, so that a decision over every instance of such an array can
// read the in-flight sum instead of adding 10,000 counts. Neighbours share a cache line, and
// every change of an array's in-flight counts updates its one total: request threads contend
// for those lines, one transfer per change, far less than what a decision no longer reads.
class LiveLoad {
 public:
  LiveLoad() = default;
  explicit LiveLoad(LiveTotals* totals) : totals_(totals) {}
  LiveLoad(const LiveLoad&) = delete;
  LiveLoad& operator=(const LiveLoad&) = delete;

  int32_t in_flight(std::memory_order o = std::memory_order_seq_cst) const { return in_flight_.load(o); }
  bool available(std::memory_order o = std::memory_order_seq_cst) const { return !(flags_.load(o) & kUnavailable); }
  bool drained(std::memory_order o = std::memory_order_seq_cst) const { return flags_.load(o) & kDrained; }
  // May take new requests: healthy and not drained.
  bool routable() const { return flags_.load(std::memory_order_relaxed) == 0; }
  std::atomic<int64_t>& outstanding_tokens() { return outstanding_tokens_; }
  // The totals of the array this LiveLoad is in; null for one made alone.
  const LiveTotals* totals() const { return totals_; }
  const std::atomic<int64_t>& outstanding_tokens() const { return outstanding_tokens_; }

  // The changes, each also applied to the array's totals. Return the previous value.
  int32_t AddInFlight(int32_t delta, std::memory_order o);
  int32_t ExchangeInFlight(int32_t value, std::memory_order o);
  bool SetAvailable(bool available, std::memory_order o) { return !SetFlag(kUnavailable, !available, o); }
  bool SetDrained(bool drained, std::memory_order o) { return SetFlag(kDrained, drained, o); }

 private:
  static constexpr uint8_t kUnavailable = 1, kDrained = 2;
  bool SetFlag(uint8_t flag, bool on, std::memory_order o);
  void CountInFlight(int32_t before, int32_t after);

  std::atomic<int32_t> in_flight_{0};
  std::atomic<uint8_t> flags_{0};  // kUnavailable | kDrained; 0 = routable
  std::atomic<int64_t> outstanding_tokens_{0};
  LiveTotals* totals_ = nullptr;  // the array's; none for a LiveLoad made alone
};

// The totals of one array of LiveLoads. Every change is one atomic read-modify-write of the
// LiveLoad, which returns the exact previous value, so each total moves by exactly what that
// change did, whatever runs concurrently.
struct LiveTotals {
  uint32_t size = 0;                  // LiveLoads in the array
  std::atomic<int64_t> in_flight{0};  // the sum of the in-flight counts
  std::atomic<int32_t> negative{0};   // in-flight counts below 0 (decisions count those as 0)
  std::atomic<int32_t> unroutable{0};
};

// InstanceState's names for its LiveLoad's fields, with std::atomic's interface (load, store,
// exchange, fetch_add, fetch_sub), so that callers written against atomics are unchanged while
// every change reaches the totals.
class InFlightRef {
 public:
  explicit InFlightRef(LiveLoad& live) : live_(live) {}
  int32_t load(std::memory_order o = std::memory_order_seq_cst) const { return live_.in_flight(o); }
  void store(int32_t v, std::memory_order o = std::memory_order_seq_cst) { live_.ExchangeInFlight(v, o); }
  int32_t exchange(int32_t v, std::memory_order o = std::memory_order_seq_cst) { return live_.ExchangeInFlight(v, o); }
  int32_t fetch_add(int32_t d, std::memory_order o = std::memory_order_seq_cst) { return live_.AddInFlight(d, o); }
  int32_t fetch_sub(int32_t d, std::memory_order o = std::memory_order_seq_cst) { return live_.AddInFlight(-d, o); }
  InFlightRef& operator=(int32_t v) {
    store(v);
    return *this;
  }
  operator int32_t() const { return load(); }

 private:
  LiveLoad& live_;
};
// A flag of a LiveLoad (its getter and setter) as a std::atomic<bool>.
template <bool (LiveLoad::*kGet)(std::memory_order) const, bool (LiveLoad::*kSet)(bool, std::memory_order)>
class FlagRef {
 public:
  explicit FlagRef(LiveLoad& live) : live_(live) {}
  bool load(std::memory_order o = std::memory_order_seq_cst) const { return (live_.*kGet)(o); }
  void store(bool v, std::memory_order o = std::memory_order_seq_cst) { (live_.*kSet)(v, o); }
  bool exchange(bool v, std::memory_order o = std::memory_order_seq_cst) { return (live_.*kSet)(v, o); }
  FlagRef& operator=(bool v) {
    store(v);
    return *this;
  }
  operator bool() const { return load(); }

 private:
  LiveLoad& live_;
};
using AvailableRef = FlagRef<&LiveLoad::available, &LiveLoad::SetAvailable>;
using DrainedRef = FlagRef<&LiveLoad::drained, &LiveLoad::SetDrained>;

// Live state of one instance, shared by every snapshot that contains it. Aligned to a cache line:
// request threads update different instances' counters (dispatched, the engine's reports), so
// FleetSnapshot::Create allocates the states of the instances it adds in one contiguous array
// (whole lines each, no false sharing between neighbours). The fields decisions read of every
// candidate live in a LiveLoad, reached here by their old names: the snapshot's array for the
// instances it creates, the state's own for one made alone (tests).
struct alignas(64) InstanceState {
  InstanceState() : InstanceState(own_live_) {}
  explicit InstanceState(LiveLoad& live)
      : live(live), in_flight(live), available(live), drained(live), outstanding_tokens(live.outstanding_tokens()) {}
  InstanceState(const InstanceState&) = delete;
  InstanceState& operator=(const InstanceState&) = delete;

 private:
  LiveLoad own_live_;  // used only by a state made alone; declared first: the references bind to it

 public:
  LiveLoad& live;
  InFlightRef in_flight;  // requests dispatched and not yet finished
  AvailableRef available;  // false while ejected by health checks
  // Set by an operator (admin drain): no new requests, in-flight ones finish. Kept apart from
  // `available` so that passing health checks never undo a drain.
  DrainedRef drained;
  // Estimated prompt tokens of the requests in flight (LoadMeasure::kPromptTokens).
  std::atomic<int64_t>& outstanding_tokens;
  std::atomic<uint64_t> dispatched{0};  // requests ever dispatched (for shares)
  // What the engine itself last reported (scraped vllm:num_requests_running, ..._waiting and
  // kv_cache_usage_perc, or the simulator's engine model): -1 / NaN = not known. Several gateway
  // replicas share this view of load, where each one's in_flight counts only its own requests.
  std::atomic<int32_t> engine_running{-1};
  std::atomic<int32_t> engine_waiting{-1};
  std::atomic<double> engine_kv_usage{std::numeric_limits<double>::quiet_NaN()};  // 0..1
  // `dispatched` when the engine's report above was read: requests sent since then are not in
  // it yet (LoadMeasure::kEngine adds them).
  std::atomic<uint64_t> engine_report_dispatched{0};

  // Records an engine's report (running/waiting -1 = not reported, usage NaN = not reported).
  void SetEngineReport(int32_t running, int32_t waiting, double kv_usage) {
    engine_report_dispatched.store(dispatched.load(std::memory_order_relaxed), std::memory_order_relaxed);
    engine_running.store(running, std::memory_order_relaxed);
    engine_waiting.store(waiting, std::memory_order_relaxed);
    engine_kv_usage.store(kv_usage, std::memory_order_relaxed);
  }

  // May take new requests: healthy and not drained.
  bool routable() const { return live.routable(); }
};

class FleetSnapshot {
 public:
  // Validates the specs (non-empty unique names, weights in range) and builds the name index.
  // State objects of instances also present in `previous` (same name) are carried over.
  static Result<std::shared_ptr<const FleetSnapshot>> Create(std::vector<InstanceSpec> specs,
                                                             const FleetSnapshot* previous = nullptr);

  FleetSnapshot(const FleetSnapshot&) = delete;
  FleetSnapshot& operator=(const FleetSnapshot&) = delete;

  uint32_t size() const { return static_cast<uint32_t>(specs_.size()); }
  const InstanceSpec& spec(uint32_t i) const { return specs_[i]; }
  // spec(i).weight, kept contiguous: decisions read every candidate's weight.
  uint32_t weight(uint32_t i) const { return weights_[i]; }
  // A 64-bit identity derived from the name only (no per-process seed).
  uint64_t placement_seed(uint32_t i) const { return seeds_[i]; }
  // Every instance's placement_seed, by index (for scans over many candidates).
  const uint64_t* placement_seeds() const { return seeds_.data(); }
  InstanceState& state(uint32_t i) const { return *states_[i]; }
  // state(i).live, read without going through the state (decisions read every candidate's).
  const LiveLoad& live(uint32_t i) const { return *live_[i]; }
  // The LiveLoads of every instance as one array in index order (&live(i) == dense_live() + i),
  // when they are: a fleet whose instances all came with one snapshot, in the order it listed
  // them. Null otherwise.
  const LiveLoad* dense_live() const { return dense_live_; }
  // That array's totals when it holds nothing else (no instance of it has left the fleet): the
  // totals are then the fleet's. Null otherwise.
  const LiveTotals* dense_totals() const { return dense_totals_; }
  const std::shared_ptr<InstanceState>& shared_state(uint32_t i) const { return states_[i]; }
  bool uniform_weights() const { return uniform_weights_; }
  // The sum of every instance's weight.
  int64_t total_weight() const { return total_weight_; }
  // A number no other snapshot of this process has had (a process-wide count of snapshots
  // created, from 1): a cache kept per snapshot compares it, where an address may be reused by a
  // later snapshot and comparing the instances one by one is linear in the fleet.
  uint64_t generation() const { return generation_; }

  // Indices of the instances that serve `name` (in index order). The empty name selects every
  // instance (the default pool). Instances with an empty `serves` list serve every name
  // (unless serves_only_listed).
  // Returns an empty span when no instance serves `name`.
  std::span<const uint32_t> Eligible(std::string_view name) const;
  std::optional<uint32_t> Find(std::string_view name) const;
  // The instance whose placement_seed is `seed`.
  std::optional<uint32_t> FindSeed(uint64_t seed) const {
    auto it = by_seed_.find(seed);
    if (it == by_seed_.end()) return std::nullopt;
    return it->second;
  }
  // True when some instance declares `name` in its serves list (configured or discovered); an
  // instance that serves every name declares none.
  bool Declares(std::string_view name) const { return by_served_name_.find(name) != by_served_name_.end(); }
  // Every name some instance declares, sorted (for /v1/models).
  std::vector<std::string> ServedNames() const;

 private:
  FleetSnapshot() = default;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using NameIndex = std::unordered_map<std::string, std::vector<uint32_t>, StringHash, std::equal_to<>>;

  std::vector<InstanceSpec> specs_;
  std::vector<uint64_t> seeds_;
  std::vector<uint32_t> weights_;
  std::vector<std::shared_ptr<InstanceState>> states_;
  std::vector<const LiveLoad*> live_;  // &states_[i]->live
  const LiveLoad* dense_live_ = nullptr;
  const LiveTotals* dense_totals_ = nullptr;
  std::vector<uint32_t> all_;       // 0..size-1
  std::vector<uint32_t> wildcard_;  // instances with an empty serves list
  NameIndex by_served_name_;        // served name -> eligible instances (wildcards merged in)
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> by_instance_name_;
  std::unordered_map<uint64_t, uint32_t> by_seed_;  // placement seed -> index
  bool uniform_weights_ = true;
  int64_t total_weight_ = 0;
  uint64_t generation_ = 0;
};

// Holds the current snapshot; writers swap, readers load. Safe across threads.
class FleetState {
 public:
  explicit FleetState(std::shared_ptr<const FleetSnapshot> initial) : current_(std::move(initial)) {}
  std::shared_ptr<const FleetSnapshot> Load() const { return current_.load(std::memory_order_acquire); }
  void Store(std::shared_ptr<const FleetSnapshot> next) { current_.store(std::move(next), std::memory_order_release); }

 private:
  std::atomic<std::shared_ptr<const FleetSnapshot>> current_;
};

// Counts one request (and its estimated prompt tokens) in flight on an instance for as long as
// it lives (RAII). Moving transfers the count; destruction or Release() gives it back exactly
// once, however the request ends.
class InFlightGuard {
 public:
  InFlightGuard() = default;
  explicit InFlightGuard(std::shared_ptr<InstanceState> state, uint32_t work_tokens = 0)
      : state_(std::move(state)), work_tokens_(work_tokens) {
    state_->in_flight.fetch_add(1, std::memory_order_relaxed);
    state_->dispatched.fetch_add(1, std::memory_order_relaxed);
    if (work_tokens_ != 0) state_->outstanding_tokens.fetch_add(work_tokens_, std::memory_order_relaxed);
  }
  InFlightGuard(InFlightGuard&& other) noexcept : state_(std::move(other.state_)), work_tokens_(other.work_tokens_) {}
  InFlightGuard& operator=(InFlightGuard&& other) noexcept {
    if (this != &other) {
      Release();
      state_ = std::move(other.state_);
      work_tokens_ = other.work_tokens_;
    }
    return *this;
  }
  InFlightGuard(const InFlightGuard&) = delete;
  InFlightGuard& operator=(const InFlightGuard&) = delete;
  ~InFlightGuard() { Release(); }

  void Release() {
    if (state_) {
      state_->in_flight.fetch_sub(1, std::memory_order_relaxed);
      if (work_tokens_ != 0) state_->outstanding_tokens.fetch_sub(work_tokens_, std::memory_order_relaxed);
      state_.reset();
    }
  }
  bool active() const { return state_ != nullptr; }

 private:
  std::shared_ptr<InstanceState> state_;
  uint32_t work_tokens_ = 0;
};

}  // namespace prefix_router
