// The gateway's engine-metrics loop (gateway/engine_metrics.h): every engine_metrics.interval,
// GET each instance's /metrics in parallel and record the load it reports in its InstanceState
// (engine_running, engine_waiting, engine_kv_usage), which routing.load_measure: engine reads,
// and its prefix-cache counters in its InstanceStats, which the status page reads.
//
// One coroutine on the first I/O thread; a round waits for all its scrapes (each bounded by
// health.timeout), so rounds never overlap. A failed scrape forgets that instance's report (the
// policy then counts the gateway's own in-flight requests for it) and is logged once per
// failing streak. Scraping runs while engine_metrics is configured or some pool measures load
// by the engines' reports; otherwise the loop only sleeps.
#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <set>

#include "gateway/all_of.h"
#include "gateway/engine_metrics.h"
#include "gateway/gateway.h"
#include "gateway/log.h"

namespace prefix_router::gateway {
namespace {

bool PoolsWantEngineLoad(const RoutingState& rs) {
  if (rs.default_pool.options.load_measure == LoadMeasure::kEngine) return true;
  for (const auto& [name, pool] : rs.pools) {
    if (pool.options.load_measure == LoadMeasure::kEngine) return true;
  }
  return false;
}

}  // namespace

net::awaitable<void> Gateway::EngineMetricsLoop() {
  GatewayTimer timer(co_await net::this_coro::executor);
  const auto every = std::chrono::milliseconds(static_cast<int64_t>(config_.engine_metrics.interval * 1000.0));
  while (!discovery_stop_.load() && !server_->stopping()) {
    const auto next = GatewayClock::now() + every;
    if (config_.engine_metrics.enabled || PoolsWantEngineLoad(*routing_.load())) co_await EngineMetricsRound();
    engine_metrics_turns_.fetch_add(1);
    // Stop() cancels nothing here: the loop notices within one interval (at most 1 s by
    // default; Stop's drain is longer).
    timer.expires_at(next);
    co_await timer.async_wait(http::kTuple);
  }
}

net::awaitable<void> Gateway::EngineMetricsRound() {
  struct Scrape {
    std::string name;
    std::shared_ptr<const FleetSnapshot> fleet;  // keeps the InstanceState alive
    uint32_t index = 0;
    std::shared_ptr<InstanceStats> stats;  // where the engine's prefix-cache counters go
    UpstreamTarget target;
    Result<EngineLoad> result = Status::Internal("not scraped");
  };
  auto scrapes = std::make_shared<std::vector<Scrape>>();
  {
    auto rs = routing_.load();
    for (uint32_t i = 0; i < rs->fleet->size(); ++i) {
      scrapes->push_back({rs->fleet->spec(i).name, rs->fleet, i, rs->instances[i]->stats, rs->instances[i]->target});
    }
  }
  if (scrapes->empty()) co_return;
  const auto scrape = [this, scrapes](size_t k) -> net::awaitable<void> {
    Scrape& s = (*scrapes)[k];
    Result<std::string> body = co_await GetFromInstance(s.target, config_.engine_metrics.path, kMaxEngineMetricsBytes,
                                                        "prefix-router-metrics", "text/plain");
    s.result = body.ok() ? ParseEngineMetrics(*body) : Result<EngineLoad>(body.status());
  };
  co_await AllOf(scrapes->size(), scrape);
  for (const Scrape& s : *scrapes) {
    InstanceState& st = s.fleet->state(s.index);
    const bool was_failing = engine_metrics_failing_.count(s.name) > 0;
    if (s.result.ok()) {
      st.SetEngineReport(s.result->running, s.result->waiting, s.result->kv_usage);
      s.stats->engine_prefix_hits.store(s.result->prefix_cache_hits, std::memory_order_relaxed);
      s.stats->engine_prefix_queries.store(s.result->prefix_cache_queries, std::memory_order_relaxed);
      if (std::isnan(s.stats->engine_prefix_queries_first.load(std::memory_order_relaxed))) {
        s.stats->engine_prefix_hits_first.store(s.result->prefix_cache_hits, std::memory_order_relaxed);
        s.stats->engine_prefix_queries_first.store(s.result->prefix_cache_queries, std::memory_order_relaxed);
      }
      if (was_failing) {
        engine_metrics_failing_.erase(s.name);
        LogEvent(spdlog::level::info, "engine metrics readable again", {{"instance", s.name}});
      }
      continue;
    }
    st.SetEngineReport(-1, -1, std::numeric_limits<double>::quiet_NaN());
    s.stats->engine_prefix_hits.store(std::numeric_limits<double>::quiet_NaN(), std::memory_order_relaxed);
    s.stats->engine_prefix_queries.store(std::numeric_limits<double>::quiet_NaN(), std::memory_order_relaxed);
    if (!was_failing) {
      engine_metrics_failing_.insert(s.name);
      LogEvent(spdlog::level::warn, "engine metrics scrape failed; its load is the gateway's count",
               {{"instance", s.name}, {"path", config_.engine_metrics.path}, {"error", s.result.status().message()}});
    }
  }
  // Instances that left are forgotten (bounded memory).
  if (engine_metrics_failing_.size() > scrapes->size()) {
    std::set<std::string, std::less<>> present;
    for (const Scrape& s : *scrapes) present.insert(s.name);
    std::erase_if(engine_metrics_failing_, [&](const std::string& n) { return !present.count(n); });
  }
}

}  // namespace prefix_router::gateway
