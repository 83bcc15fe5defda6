// Flow control at a pool's ceiling (routing.flow_control, issue #16): the pool's in-flight count
// for max_in_flight and, in front of it, the pool's FlowQueue (core/flow_queue.h).
//
// A request of the pool enters: while the pool is not saturated and nobody waits, it takes a slot
// at once; else it waits in the queue (or is refused: sheddable, queue full, body too large).
// Saturated: at max_in_flight (when set) or, with flow_control.saturation in-flight, when every
// routable instance the pool can use holds concurrency_threshold requests (core/flow_queue.h).
// A slot that ends is given back and lets out the next requests while the pool is not saturated.
// With flow_control.max_in_flight_per_tenant, a request whose tenant holds that many slots waits
// (or is refused, without a queue) even when the pool has room, and the queue passes over it
// (core/flow_queue.h); the slot's end names its tenant so that the tenant's count goes down.
// In-flight saturation also counts the requests let out that have not reached an instance yet
// (they are on their way to their own threads), so that one free place is not granted twice;
// and an arriving request lets out what waits when room came without an ending (an instance
// added or back in rotation). A waiting request sleeps on a timer on its own connection's thread
// (an endpoint picker stream: on an I/O thread given to it) until its wait runs out; the thread
// that lets it out marks it and posts the timer's cancellation to that thread, so the request
// never touches another thread's objects.
// The queue decides when; the request is routed after it leaves, on the load of that moment.
//
// Thread-safety: every method may be called from any thread (one mutex). A Waiter's timer is
// touched only on its executor's thread (connections stay on one I/O thread for life).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/flow_queue.h"

namespace prefix_router {

// The queue's clock in the gateway (FlowItem::arrival, Snapshot's `now`): steady time in seconds.
inline double FlowSeconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

class PoolFlow : public std::enable_shared_from_this<PoolFlow> {
 public:
  // `in_flight`: the pool's count (Pool::in_flight), shared with slots taken without the queue.
  // `fleet`, `served_name`, `threshold`: what in-flight saturation reads (the instances eligible
  // for `served_name`, "" = all; full at `threshold` in flight); see SetFleet.
  PoolFlow(FlowQueueOptions options, uint32_t max_in_flight, std::shared_ptr<std::atomic<int64_t>> in_flight,
           std::shared_ptr<const FleetSnapshot> fleet = nullptr, std::string served_name = "", uint32_t threshold = 0);
  // The fleet in-flight saturation reads from now on (the gateway's new routing state); then
  // lets out what the new fleet has room for.
  void SetFleet(std::shared_ptr<const FleetSnapshot> fleet);

  // One waiting request. `state` is written under the flow's mutex; the timer only on its thread.
  struct Waiter {
    explicit Waiter(const boost::asio::any_io_executor& ex) : executor(ex), timer(ex) {}
    const boost::asio::any_io_executor executor;  // the request's thread (read from any thread)
    boost::asio::steady_timer timer;
    enum class State { kQueued, kGranted, kDisplaced, kLeft };
    State state = State::kQueued;
    std::string tenant;  // with a per-tenant bound: the request's tenant (for Release)
  };

  enum class Outcome {
    kAdmitted,  // a slot now
    kQueued,    // wait on `waiter` (Await's caller)
    kShed,      // sheddable priority while the pool is full
    kFull,      // the queue has no room
    kTooLarge,  // the body alone is over max_queue_bytes
  };
  struct Entry {
    Outcome outcome = Outcome::kAdmitted;
    uint64_t id = 0;                 // kQueued: the ticket's id
    std::shared_ptr<Waiter> waiter;  // kQueued
  };
  // `item.id` is assigned here. kAdmitted and a later kGranted each hold one slot of the count,
  // given back (or handed on) by Release. `ex`: the thread the request would wait on; null = it
  // cannot wait (a full pool answers kFull).
  Entry Enter(FlowItem item, const boost::asio::any_io_executor* ex);
  // Whether `id` still waits (nothing let it out or displaced it yet).
  bool Pending(uint64_t id) const;
  // The end of a wait (its timer fired or was cancelled): the waiter's final state. kGranted: the
  // caller holds a slot. kQueued (its wait ran out, or its client went): it is taken out of the
  // queue here and becomes kLeft. kDisplaced: a higher priority took its place.
  Waiter::State Leave(uint64_t id);
  // A slot's end: handed to the next request the queue lets out, or given back. `tenant`: the
  // request's FlowItem::tenant when the pool bounds tenants (bounds_tenants(); a Waiter's
  // `tenant`), else ignored.
  void Release(const std::string& tenant = {});
  bool bounds_tenants() const { return options_.max_in_flight_per_tenant > 0; }

  size_t queued() const;
  // The queue as the status page shows it, read at one moment under the lock.
  struct Snapshot {
    FlowQueueOptions options;
    size_t queued = 0;                  // requests waiting
    uint64_t queued_bytes = 0;          // their bodies
    std::optional<double> oldest_wait;  // seconds the oldest has waited; nullopt when none waits
    size_t tenants_at_bound = 0;        // tenants holding max_in_flight_per_tenant slots
  };
  // `now`: FlowSeconds of the moment; a request that arrived after it counts as waiting 0 s.
  Snapshot TakeSnapshot(double now) const;
  const FlowQueueOptions& options() const { return options_; }
  uint32_t max_in_flight() const { return max_in_flight_; }

 private:
  // Marks `id` and posts its timer's cancellation. REQUIRES: mu_ held
  void Wake(uint64_t id, Waiter::State state);
  // Whether an arriving request would wait. REQUIRES: mu_ held
  bool Saturated() const;
  // Lets out queued requests (of tenants within their bound) while the pool is not saturated.
  // REQUIRES: mu_ held
  void LetOut();

  const FlowQueueOptions options_;
  const uint32_t max_in_flight_;
  const std::shared_ptr<std::atomic<int64_t>> in_flight_;
  const std::string served_name_;
  const uint32_t threshold_;
  mutable std::mutex mu_;
  std::shared_ptr<const FleetSnapshot> fleet_;  // null: no in-flight saturation
  uint64_t granted_unplaced_ = 0;              // let out, not yet through Leave (in-flight saturation)
  FlowQueue queue_;
  std::unordered_map<uint64_t, std::shared_ptr<Waiter>> waiters_;  // the queued
  uint64_t next_id_ = 0;
};

}  // namespace prefix_router
