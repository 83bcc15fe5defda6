// EjectionSignal: wakes the requests that wait for an instance's first response byte when the
// instance is ejected, so that each can be cancelled and retried elsewhere (timeouts.
// per_try_first_byte's companion: a stopped instance is ejected by health checks long before a
// generous first-byte timeout would end the wait).
//
// A waiting request subscribes a callback, to run on its own I/O thread; Fire(), called from
// whichever thread ejects the instance, posts the callback to each subscriber's executor. The
// subscriber's record is shared, so a post that arrives after its request moved on (and
// cancelled the subscription) finds it inactive and does nothing.
//
// Thread-safety: Fire and subscription may run on any threads; a subscription is cancelled, and
// its callback runs, only on its own executor.
#pragma once

#include <boost/asio.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace prefix_router::gateway {

class EjectionSignal {
 private:
  struct Waiter {
    Waiter(boost::asio::any_io_executor ex, std::function<void()> f) : executor(std::move(ex)), on_fire(std::move(f)) {}
    boost::asio::any_io_executor executor;
    std::function<void()> on_fire;
    bool active = true;  // touched on `executor` only
  };

 public:
  // A registration; cancelled by Cancel or its destructor, on the subscriber's thread.
  class Subscription {
   public:
    Subscription() = default;
    Subscription(EjectionSignal* signal, std::shared_ptr<Waiter> waiter)
        : signal_(signal), waiter_(std::move(waiter)) {}
    Subscription(Subscription&& other) noexcept
        : signal_(std::exchange(other.signal_, nullptr)), waiter_(std::move(other.waiter_)) {}
    Subscription& operator=(Subscription&& other) noexcept {
      if (this != &other) {
        Cancel();
        signal_ = std::exchange(other.signal_, nullptr);
        waiter_ = std::move(other.waiter_);
      }
      return *this;
    }
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;
    ~Subscription() { Cancel(); }

    void Cancel() {
      if (!signal_) return;
      waiter_->active = false;
      signal_->Remove(waiter_.get());
      signal_ = nullptr;
      waiter_.reset();
    }

   private:
    EjectionSignal* signal_ = nullptr;
    std::shared_ptr<Waiter> waiter_;
  };

  // `on_fire` runs on `executor` at the next Fire(), unless the subscription was cancelled
  // first. An instance already ejected is not signalled again: the caller checks its
  // `available` flag after subscribing (the ejecting side clears it before it fires, so an
  // ejection between the caller's dispatch and its subscription is not missed).
  // REQUIRES: the signal outlives the subscription.
  Subscription Subscribe(boost::asio::any_io_executor executor, std::function<void()> on_fire) {
    auto waiter = std::make_shared<Waiter>(std::move(executor), std::move(on_fire));
    {
      std::lock_guard lock(mu_);
      waiters_.emplace(waiter.get(), waiter);
    }
    return Subscription(this, std::move(waiter));
  }

  // Wakes every current subscriber.
  void Fire() {
    std::vector<std::shared_ptr<Waiter>> waiters;
    {
      std::lock_guard lock(mu_);
      waiters.reserve(waiters_.size());
      for (const auto& [key, w] : waiters_) waiters.push_back(w);
    }
    for (auto& w : waiters) {
      boost::asio::post(w->executor, [w] {
        if (!w->active) return;
        w->active = false;
        w->on_fire();
      });
    }
  }

  size_t waiting() const {
    std::lock_guard lock(mu_);
    return waiters_.size();
  }

 private:
  void Remove(const Waiter* w) {
    std::lock_guard lock(mu_);
    waiters_.erase(w);
  }

  mutable std::mutex mu_;
  std::unordered_map<const Waiter*, std::shared_ptr<Waiter>> waiters_;  // guarded by mu_
};

}  // namespace prefix_router::gateway
