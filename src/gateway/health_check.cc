// Health checking (gateway.h's class comment): a loop per instance GETs health.path every
// health.interval on the loops' clock (gateway/clock.h) and ejects or readmits the instance by
// its streaks; connect failures of live traffic count too (passive_failures). Ejection fires the
// instance's EjectionSignal, so that requests waiting for its first byte move on.
#include <spdlog/spdlog.h>

#include "gateway/gateway_internal.h"
#include "gateway/log.h"

namespace prefix_router::gateway {

using namespace gateway_internal;

void Gateway::SetAvailable(const RoutingState& rs, uint32_t index, bool available, std::string_view why) {
  auto& state = rs.fleet->state(index);
  if (state.available.exchange(available) != available) {
    // Always logged: info and warn pass at every level the gateway runs with.
    const std::string& name = rs.fleet->spec(index).name;
    if (available) {
      LogEvent(spdlog::level::info, "instance readmitted", {{"instance", name}, {"reason", why}});
    } else {
      LogEvent(spdlog::level::warn, "instance ejected", {{"instance", name}, {"reason", why}});
      rs.instances[index]->ejection.Fire();  // requests waiting for its first byte move on
    }
  }
}

void Gateway::ReportConnectFailure(const RoutingState& rs, uint32_t index) {
  // Passive ejection needs active checks to bring the instance back.
  if (config_.health.passive_failures == 0 || config_.health.interval <= 0) return;
  auto& rt = *rs.instances[index];
  rt.consecutive_successes.store(0);
  if (rt.consecutive_failures.fetch_add(1) + 1 >= config_.health.passive_failures) {
    SetAvailable(rs, index, false, "connect failures on live traffic");
  }
}

net::awaitable<Gateway::CheckResult> Gateway::CheckOnce(const UpstreamTarget& target) {
  auto& pool = ConnectionPool::ForThisThread();
  auto [cec, lease] = co_await pool.Acquire(target, Ms(config_.health.timeout), /*fresh=*/true);
  if (IsLocalResourceError(cec)) co_return CheckResult::kLocalError;
  if (cec) co_return CheckResult::kFail;
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target.base_path + config_.health.path, 11};
  req.set(bhttp::field::host, target.host_header);
  req.set(bhttp::field::user_agent, "prefix-router-health");
  if (!target.authorization.empty()) target.authorization.SetHeaderOn(req, "Authorization");
  req.keep_alive(false);
  UpstreamStream& stream = *lease.stream;
  stream.tcp().expires_after(Ms(config_.health.timeout));
  auto [wec, wn] = co_await stream.On([&](auto& s) { return bhttp::async_write(s, req, http::kTuple); });
  if (IsLocalResourceError(wec)) co_return CheckResult::kLocalError;
  if (wec) co_return CheckResult::kFail;
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 * 1024);
  auto [rec, rn] = co_await stream.On([&](auto& s) { return bhttp::async_read(s, buffer, parser, http::kTuple); });
  if (IsLocalResourceError(rec)) co_return CheckResult::kLocalError;
  if (rec) co_return CheckResult::kFail;
  const int status = parser.get().result_int();
  co_return status >= 200 && status < 300 ? CheckResult::kPass : CheckResult::kFail;
}

net::awaitable<void> Gateway::HealthLoop(std::shared_ptr<const RoutingState> rs, uint32_t index) {
  GatewayTimer timer(co_await net::this_coro::executor);
  auto& rt = *rs->instances[index];
  while (!server_->stopping() && routing_.load() == rs) {
    const CheckResult result = co_await CheckOnce(rt.target);
    const bool available = rs->fleet->state(index).available.load();
    if (result == CheckResult::kLocalError) {
      // Says nothing about the instance: neither streak moves.
      metrics_->local_errors.WithLabels({"health_check"}).Inc();
    } else if (result == CheckResult::kPass) {
      rt.consecutive_failures.store(0);
      if (!available && rt.consecutive_successes.fetch_add(1) + 1 >= config_.health.healthy_threshold) {
        SetAvailable(*rs, index, true, "health checks pass");
      }
    } else {
      rt.consecutive_successes.store(0);
      if (available && rt.consecutive_failures.fetch_add(1) + 1 >= config_.health.unhealthy_threshold) {
        SetAvailable(*rs, index, false, "health checks fail");
      }
    }
    timer.expires_after(Ms(config_.health.interval));
    auto [ec] = co_await timer.async_wait(http::kTuple);
    if (ec) break;
  }
}

}  // namespace prefix_router::gateway
