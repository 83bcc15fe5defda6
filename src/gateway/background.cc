#include "gateway/background.h"

#include <spdlog/spdlog.h>

#include <exception>

#include "gateway/log.h"

namespace prefix_router::gateway {

metrics::Family<metrics::Counter>& BackgroundFailuresFamily(metrics::Registry& registry) {
  return registry.AddCounter("prefix_router_background_task_failures_total",
                             "Background loops of the gateway (health, sample, discovery, "
                             "engine_metrics, resolve) that ended with an exception, by task; "
                             "each is logged at error level",
                             {"task"});
}

void ReportBackgroundEnd(std::string_view name, std::exception_ptr error, metrics::Counter& failures) {
  if (!error) return;
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {}
  failures.Inc();
  LogEvent(spdlog::level::err, "background task failed", {{"task", name}, {"error", what}});
}

void SpawnBackground(const http::net::any_io_executor& executor, std::string_view name, http::net::awaitable<void> task,
                     metrics::Counter& failures) {
  http::net::co_spawn(executor, std::move(task), [name = std::string(name), &failures](std::exception_ptr error) {
    ReportBackgroundEnd(name, error, failures);
  });
}

}  // namespace prefix_router::gateway
