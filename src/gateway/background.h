// SpawnBackground: how the gateway starts its long-running coroutines (health checks, the
// status page's sampling, discovery, engine-metrics scrapes, the start's resolve round).
//
// net::detached drops whatever a coroutine throws: a loop that died that way would leave its
// job undone without a word. Following Beast's examples, the loops are spawned with a
// completion handler instead; an exception that escapes one is logged at error level with the
// task's name ("background task failed", task=NAME error=WHAT) and counted in
// prefix_router_background_task_failures_total{task=NAME}. The loop is not restarted: what
// it failed on would most likely fail again, and the log and the counter are for a person.
//
// Thread-safety: call from any thread; the handler runs on `executor`.
#pragma once

#include <string>
#include <string_view>

#include "http/server.h"
#include "metrics/metrics.h"

namespace prefix_router::gateway {

// The counter family every gateway registers (labels: task).
metrics::Family<metrics::Counter>& BackgroundFailuresFamily(metrics::Registry& registry);

// Runs `task` on `executor`; `failures` counts its escaped exception, if any. `failures` must
// outlive the coroutine (a child of the gateway's registry does).
void SpawnBackground(const http::net::any_io_executor& executor, std::string_view name, http::net::awaitable<void> task,
                     metrics::Counter& failures);

// The completion handler itself, for tests: logs and counts `error` when it is not null.
void ReportBackgroundEnd(std::string_view name, std::exception_ptr error, metrics::Counter& failures);

}  // namespace prefix_router::gateway
