// GatewayClock: the time of the gateway's background loops (health checks, discovery rounds,
// engine-metrics scrapes, the status page's sampling, the KV event stream's silence timer), and
// the seam through which tests step that time instead of sleeping (leveldb's Env idea, shaped
// for Asio).
//
// It is an Asio-compatible clock: the loops arm `GatewayTimer`s, a
// net::basic_waitable_timer<GatewayClock, GatewayWaitTraits>, and read GatewayClock::now().
// In production now() is std::chrono::steady_clock's reading and the wait traits are Asio's
// defaults, so the loops behave exactly as they did on net::steady_timer. A test constructs a
// ManualGatewayClock: while it lives, now() is a time that moves only by Advance(), and the
// wait traits cap every reactor wait at kManualRecheck of real time, so that a pending timer
// sees an advance within about a millisecond (the pattern of Asio's own "time_t_timer"
// example). Asio timers need a clock with a static now(), which is why the manual time is
// installed process-wide rather than passed to each Gateway; at most one ManualGatewayClock
// may live at a time.
//
// The request path (connect, first-byte, idle and drain deadlines) keeps the real steady
// clock: those deadlines bound real I/O, and a test that freezes the loops' time must not
// freeze its requests. Rate limits have their own injected clock (RateLimiter::Now).
//
// Thread-safety: now() and ManualGatewayClock::Advance() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/wait_traits.hpp>

namespace prefix_router::gateway {

struct GatewayClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<GatewayClock>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept;
  // True while a ManualGatewayClock is installed.
  static bool manual() noexcept;
};

// Asio's default traits, but with a manual clock installed a wait lasts at most
// kManualRecheck of real time before the timer queue reads now() again.
struct GatewayWaitTraits {
  static constexpr std::chrono::milliseconds kManualRecheck{1};
  static GatewayClock::duration to_wait_duration(const GatewayClock::duration& d);
  static GatewayClock::duration to_wait_duration(const GatewayClock::time_point& t);
};

using GatewayTimer = boost::asio::basic_waitable_timer<GatewayClock, GatewayWaitTraits>;

// A test's hand on GatewayClock: installed for its lifetime, starting far from the epoch as a
// steady clock would. REQUIRES: no other ManualGatewayClock alive; every gateway whose loops
// it drives is destroyed before it (the usual order of locals declared first).
class ManualGatewayClock {
 public:
  ManualGatewayClock();
  ~ManualGatewayClock();
  ManualGatewayClock(const ManualGatewayClock&) = delete;
  ManualGatewayClock& operator=(const ManualGatewayClock&) = delete;

  GatewayClock::time_point Now() const;
  void Advance(GatewayClock::duration d);
};

}  // namespace prefix_router::gateway
