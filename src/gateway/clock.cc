#include "gateway/clock.h"

#include <cassert>

namespace prefix_router::gateway {
namespace {

// The manual time in steady_clock ticks; kReal while no ManualGatewayClock is installed. One
// relaxed load is all production pays.
constexpr GatewayClock::rep kReal = -1;
std::atomic<GatewayClock::rep> manual_ticks{kReal};

}  // namespace

GatewayClock::time_point GatewayClock::now() noexcept {
  const rep ticks = manual_ticks.load(std::memory_order_acquire);
  if (ticks != kReal) return time_point(duration(ticks));
  return time_point(std::chrono::steady_clock::now().time_since_epoch());
}

bool GatewayClock::manual() noexcept { return manual_ticks.load(std::memory_order_relaxed) != kReal; }

GatewayClock::duration GatewayWaitTraits::to_wait_duration(const GatewayClock::duration& d) {
  if (GatewayClock::manual() && d > kManualRecheck) return kManualRecheck;
  return d;
}

GatewayClock::duration GatewayWaitTraits::to_wait_duration(const GatewayClock::time_point& t) {
  // As Asio's default: the time left, saturated rather than overflowing.
  const GatewayClock::time_point now = GatewayClock::now();
  if (now + GatewayClock::duration::max() < t) return to_wait_duration(GatewayClock::duration::max());
  if (now + GatewayClock::duration::min() > t) return to_wait_duration(GatewayClock::duration::min());
  return to_wait_duration(t - now);
}

ManualGatewayClock::ManualGatewayClock() {
  const GatewayClock::rep start = std::chrono::duration_cast<GatewayClock::duration>(std::chrono::hours(1000)).count();
  [[maybe_unused]] GatewayClock::rep was = kReal;
  [[maybe_unused]] const bool installed = manual_ticks.compare_exchange_strong(was, start);
  assert(installed && "only one ManualGatewayClock at a time");
}

ManualGatewayClock::~ManualGatewayClock() { manual_ticks.store(kReal, std::memory_order_release); }

GatewayClock::time_point ManualGatewayClock::Now() const { return GatewayClock::now(); }

void ManualGatewayClock::Advance(GatewayClock::duration d) {
  manual_ticks.fetch_add(d.count(), std::memory_order_acq_rel);
}

}  // namespace prefix_router::gateway
