// Eventually: polls a condition until it holds or a time limit passes, for tests that wait on
// servers running on other threads. Bounded, so a broken build fails instead of hanging.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace prefix_router::testing {

// Returns the condition's final value.
inline bool Eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(5000),
                       std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace prefix_router::testing
