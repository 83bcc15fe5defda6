// EjectionSignal: wakes the requests that wait for an instance's first response byte when the
// instance is ejected, so that each can be cancelled and retried elsewhere (timeouts.
// per_try_first_byte's companion: a stopped instance is ejected by health checks long before a
// generous first-byte timeout would end the wait).
//
// A waiting request registers a Waiter (a timer on its own I/O thread that never expires by
// itself) and awaits Wait() in a race with its upstream read; Fire(), called from whichever
// thread ejects the instance, posts to each waiter's executor to cancel its timer. The Waiter
// is shared, so a post that arrives after its request moved on touches a live, idle timer.
//
// Thread-safety: Fire and the waiters' registration may run on any threads; a Waiter's timer
// and `fired` are touched only on its own executor.
#pragma once

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace prefix_router::gateway {

class EjectionSignal {
 public:
  // Completes when Fire() is called or `available` reads false (checked after registering, so
  // an ejection between the caller's dispatch and this wait is not missed: the ejecting side
  // clears `available` before it fires), or when the race it is part of cancels it (the other
  // branch won). REQUIRES: the signal and `available` outlive the wait.
  boost::asio::awaitable<void> Wait(const std::atomic<bool>& available) {
    namespace net = boost::asio;
    auto waiter = std::make_shared<Waiter>(co_await net::this_coro::executor);
    {
      std::lock_guard lock(mu_);
      waiters_.emplace(waiter.get(), waiter);
    }
    struct Unregister {
      EjectionSignal& signal;
      const Waiter* waiter;
      ~Unregister() { signal.Remove(waiter); }
    } unregister{*this, waiter.get()};
    if (!available.load()) co_return;
    while (!waiter->fired) {
      auto [ec] = co_await waiter->timer.async_wait(net::as_tuple(net::use_awaitable));
      if (ec == net::error::operation_aborted && !waiter->fired) {
        // Cancelled by the race (per-operation cancellation): the caller has its answer.
        // A cancellation of the timer itself without `fired` cannot happen otherwise.
        co_return;
      }
    }
  }

  // Wakes every current waiter.
  void Fire() {
    std::vector<std::shared_ptr<Waiter>> waiters;
    {
      std::lock_guard lock(mu_);
      waiters.reserve(waiters_.size());
      for (const auto& [key, w] : waiters_) waiters.push_back(w);
    }
    for (auto& w : waiters) {
      boost::asio::post(w->timer.get_executor(), [w] {
        w->fired = true;
        w->timer.cancel();
      });
    }
  }

  size_t waiting() const {
    std::lock_guard lock(mu_);
    return waiters_.size();
  }

 private:
  struct Waiter {
    explicit Waiter(boost::asio::any_io_executor ex)
        : timer(std::move(ex), boost::asio::steady_timer::time_point::max()) {}
    boost::asio::steady_timer timer;
    bool fired = false;
  };

  void Remove(const Waiter* w) {
    std::lock_guard lock(mu_);
    waiters_.erase(w);
  }

  mutable std::mutex mu_;
  std::unordered_map<const Waiter*, std::shared_ptr<Waiter>> waiters_;  // guarded by mu_
};

}  // namespace prefix_router::gateway
