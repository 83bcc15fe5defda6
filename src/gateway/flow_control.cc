#include "gateway/flow_control.h"

#include <algorithm>
#include <utility>

#include <boost/asio/post.hpp>

namespace prefix_router {

PoolFlow::PoolFlow(FlowQueueOptions options, uint32_t max_in_flight, std::shared_ptr<std::atomic<int64_t>> in_flight,
                   std::shared_ptr<const FleetSnapshot> fleet, std::string served_name, uint32_t threshold)
    : options_(options),
      max_in_flight_(max_in_flight),
      in_flight_(std::move(in_flight)),
      served_name_(std::move(served_name)),
      threshold_(threshold),
      fleet_(std::move(fleet)),
      queue_(options) {}

void PoolFlow::SetFleet(std::shared_ptr<const FleetSnapshot> fleet) {
  std::lock_guard lock(mu_);
  fleet_ = std::move(fleet);
  LetOut();
}

bool PoolFlow::Saturated() const {
  if (max_in_flight_ > 0 && in_flight_->load(std::memory_order_relaxed) >= max_in_flight_) return true;
  if (options_.saturation == FlowSaturation::kPool || !fleet_) return false;
  // Room for one more beyond those let out and still on their way.
  const uint64_t enough = granted_unplaced_ + 1;
  return FlowInstanceRoom(*fleet_, fleet_->Eligible(served_name_), options_.saturation, threshold_, enough) < enough;
}

void PoolFlow::LetOut() {
  while (queue_.ready() && !Saturated()) {
    std::optional<FlowItem> next = queue_.Pop(FlowSeconds(std::chrono::steady_clock::now()));
    if (!waiters_.contains(next->id)) continue;  // left already (cannot happen: Leave removes it)
    in_flight_->fetch_add(1, std::memory_order_relaxed);
    if (options_.saturation != FlowSaturation::kPool) ++granted_unplaced_;
    Wake(next->id, Waiter::State::kGranted);
  }
}

PoolFlow::Entry PoolFlow::Enter(FlowItem item, const boost::asio::any_io_executor* ex) {
  std::lock_guard lock(mu_);
  Entry e;
  // Not saturated, nobody waiting who could leave, and its tenant within its bound: a slot now
  // (a newcomer never overtakes the queue; it passes only those held at their tenant's bound).
  if (!queue_.ready() && !queue_.AtBound(item.tenant) && !Saturated()) {
    in_flight_->fetch_add(1, std::memory_order_relaxed);
    queue_.Started(item.tenant);
    e.outcome = Outcome::kAdmitted;
    return e;
  }
  if (!ex) {
    e.outcome = item.band < 0 ? Outcome::kShed : Outcome::kFull;
    return e;
  }
  item.id = ++next_id_;
  const uint64_t id = item.id;
  std::string tenant = bounds_tenants() ? item.tenant : std::string();
  FlowQueue::PushResult r = queue_.Push(std::move(item));
  for (uint64_t gone : r.displaced) Wake(gone, Waiter::State::kDisplaced);
  switch (r.verdict) {
    case FlowVerdict::kQueued: break;
    case FlowVerdict::kShed: e.outcome = Outcome::kShed; return e;
    case FlowVerdict::kFull: e.outcome = Outcome::kFull; return e;
    case FlowVerdict::kTooLarge: e.outcome = Outcome::kTooLarge; return e;
  }
  e.outcome = Outcome::kQueued;
  e.id = id;
  e.waiter = std::make_shared<Waiter>(*ex);
  e.waiter->tenant = std::move(tenant);
  waiters_.emplace(id, e.waiter);
  // Room that came without a request ending (in-flight saturation: an instance added or back in
  // rotation) lets out what waits, in the queue's order; this request may be among them.
  if (options_.saturation != FlowSaturation::kPool) LetOut();
  return e;
}

PoolFlow::Waiter::State PoolFlow::Leave(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return Waiter::State::kLeft;  // left already
  const Waiter::State state = it->second->state;
  if (state == Waiter::State::kGranted && options_.saturation != FlowSaturation::kPool) --granted_unplaced_;
  if (state == Waiter::State::kQueued) {
    queue_.Remove(id);
    it->second->state = Waiter::State::kLeft;
  }
  waiters_.erase(it);
  return state == Waiter::State::kQueued ? Waiter::State::kLeft : state;
}

void PoolFlow::Release(const std::string& tenant) {
  std::lock_guard lock(mu_);
  in_flight_->fetch_sub(1, std::memory_order_relaxed);
  queue_.Finished(tenant);
  LetOut();
}

bool PoolFlow::Pending(uint64_t id) const {
  std::lock_guard lock(mu_);
  auto it = waiters_.find(id);
  return it != waiters_.end() && it->second->state == Waiter::State::kQueued;
}

size_t PoolFlow::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

PoolFlow::Snapshot PoolFlow::TakeSnapshot(double now) const {
  std::lock_guard lock(mu_);
  Snapshot s{options_, queue_.size(), queue_.bytes(), queue_.OldestWaited(now), queue_.tenants_at_bound()};
  if (s.oldest_wait) s.oldest_wait = std::max(0.0, *s.oldest_wait);
  return s;
}

void PoolFlow::Wake(uint64_t id, Waiter::State state) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  it->second->state = state;
  // The timer belongs to the waiter's thread: cancel it there. The waiter object lives on in the
  // posted handler if the request has gone meanwhile.
  boost::asio::post(it->second->executor, [w = it->second] { w->timer.cancel(); });
}

}  // namespace prefix_router
