// AllOf: runs `n` tasks concurrently on the calling coroutine's executor and resumes when every
// one has finished, for the gateway's rounds of requests to each instance (model discovery,
// engine metrics), where one slow instance must not delay the others' requests.
//
// Each task is fn(k) for k in [0, n). `fn` is taken by reference and must be a named object of
// the caller (not a temporary): a coroutine lambda's frame points at the lambda, so the lambda
// must stay where it is until every task has finished, which the call waits for. Tasks run on the same executor, so a
// strand-free executor (one I/O thread) serialises them between suspensions. A task that throws does not stop the
// others; once all have ended, the first exception is rethrown to the caller (and so reaches its loop's completion
// handler: gateway/background.h).
#pragma once

#include <cstddef>
#include <exception>
#include <memory>

#include "http/server.h"

namespace prefix_router::gateway {

template <typename Fn>
http::net::awaitable<void> AllOf(size_t n, const Fn& fn) {
  namespace net = http::net;
  if (n == 0) co_return;
  auto executor = co_await net::this_coro::executor;
  net::steady_timer all_done(executor, net::steady_timer::time_point::max());
  struct Progress {
    size_t left;
    std::exception_ptr error;  // the first task's exception, rethrown once all have ended
  };
  auto progress = std::make_shared<Progress>(Progress{n, nullptr});
  for (size_t k = 0; k < n; ++k) {
    net::co_spawn(
        executor, [&fn, k]() -> net::awaitable<void> { co_await fn(k); },
        [progress, &all_done](std::exception_ptr error) {
          if (error && !progress->error) progress->error = error;
          if (--progress->left == 0) all_done.cancel();
        });
  }
  while (progress->left > 0) {
    auto [ec] = co_await all_done.async_wait(http::kTuple);
    if (!ec) break;  // cannot happen: the deadline is time_point::max()
  }
  if (progress->error) std::rethrow_exception(progress->error);
}

}  // namespace prefix_router::gateway
