// The gateway's own answers: GET /health (the fleet, or one model with ?model=), GET /v1/models
// (every served name with the instances that serve it), GET /metrics, and the loop that samples
// request counts for the status page. Bodies are built with Boost.JSON, like admin.cc's.
#include <boost/json.hpp>

#include "gateway/gateway_internal.h"

namespace prefix_router::gateway {

using namespace gateway_internal;
namespace json = boost::json;

// ------------------------------------------------------------------------------------ /health

net::awaitable<void> Gateway::HandleHealth(http::Exchange& ex) {
  co_await AwaitFirstDiscovery();
  auto rs = routing_.load();
  const FleetSnapshot& f = *rs->fleet;
  std::string_view target(ex.request().target().data(), ex.request().target().size());
  std::optional<std::string> only;
  if (auto q = target.find("?model="); q != std::string_view::npos) {
    only = std::string(target.substr(q + 7, target.find('&', q + 7) - (q + 7)));
  }
  auto available_in = [&](std::span<const uint32_t> list) {
    uint32_t n = 0;
    for (uint32_t i : list) n += f.state(i).routable();
    return n;
  };
  if (only) {
    auto list = f.Eligible(*only);
    if (list.empty()) {
      co_await ex.SendError(404, "no instance serves '" + *only + "'", "model_not_found");
      co_return;
    }
    const uint32_t up = available_in(list);
    json::object body;
    body["model"] = *only;
    body["status"] = up ? "ok" : "unavailable";
    body["available"] = up;
    body["instances"] = list.size();
    co_await ex.Send(JsonResponse(up ? 200 : 503, json::serialize(body)));
    co_return;
  }
  const uint32_t up_all = available_in(f.Eligible(""));
  json::object models;
  for (const auto& name : f.ServedNames()) {
    auto list = f.Eligible(name);
    json::object model;
    model["available"] = available_in(list);
    model["instances"] = list.size();
    models[name] = std::move(model);
  }
  json::object instances;
  for (uint32_t i = 0; i < f.size(); ++i) {
    const auto& st = f.state(i);
    instances[f.spec(i).name] = st.drained.load() ? "drained" : st.available.load() ? "up" : "ejected";
  }
  json::object body;
  body["status"] = up_all ? "ok" : "unavailable";
  body["models"] = std::move(models);
  body["instances"] = std::move(instances);
  co_await ex.Send(JsonResponse(up_all ? 200 : 503, json::serialize(body)));
}

// ---------------------------------------------------------------------------------- /v1/models

// Every served name once. A discovered name carries its engine's entry as the engine sent it
// (max_model_len, parent, root, ...): from the first instance, in configuration order, whose
// /v1/models lists it, so that the answer does not change with the order polls complete in. A
// name known from configuration only gets a synthesized entry. Each entry adds `instances`: the
// instances a request naming it may go to (those serving every name included).
//
// The engine's entry is spliced in as the text it sent (minified, gateway/discovery.h):
// reading it into a json::value and writing it out again would reformat its numbers (0.5 as
// 5E-1), and clients see what their engine said. What the gateway adds is built as JSON values.
net::awaitable<void> Gateway::HandleModels(http::Exchange& ex) {
  co_await AwaitFirstDiscovery();
  auto rs = routing_.load();
  const FleetSnapshot& f = *rs->fleet;
  std::string body = R"({"object":"list","data":[)";
  bool first = true;
  for (const auto& name : f.ServedNames()) {
    json::array instances;
    const std::string* entry = nullptr;
    for (uint32_t i : f.Eligible(name)) {  // index order: configuration order
      instances.emplace_back(f.spec(i).name);
      if (const auto& entries = rs->discovery[i].entries; entries && entry == nullptr) {
        if (auto it = entries->find(name); it != entries->end()) entry = &it->second;
      }
    }
    if (!first) body += ',';
    first = false;
    if (entry != nullptr) {
      body.append(*entry, 0, entry->size() - 1);  // the engine's object without its closing brace
      body += R"(,"instances":)" + json::serialize(instances) + "}";
    } else {
      json::object synthesized;
      synthesized["id"] = name;
      synthesized["object"] = "model";
      synthesized["created"] = 0;
      synthesized["owned_by"] = "prefix-router";
      synthesized["instances"] = std::move(instances);
      body += json::serialize(synthesized);
    }
  }
  body += "]}";
  co_await ex.Send(JsonResponse(200, std::move(body)));
}

// ------------------------------------------------------------------------------------ /metrics

http::StringResponse Gateway::MetricsResponse() const {
  http::StringResponse res{bhttp::status::ok, 11};
  res.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.body() = registry_.Render();
  return res;
}

net::awaitable<void> Gateway::HandleMetrics(http::Exchange& ex) { co_await ex.Send(MetricsResponse()); }

// ------------------------------------------------------------------------------ status sampling

// The status page's request series: one sample every RequestSeries::kInterval of the loops'
// clock (gateway/clock.h).
net::awaitable<void> Gateway::SampleLoop() {
  GatewayTimer timer(co_await net::this_coro::executor);
  auto next = GatewayClock::now();
  while (!server_->stopping()) {
    next += RequestSeries::kInterval;
    timer.expires_at(next);
    auto [ec] = co_await timer.async_wait(http::kTuple);
    if (ec || server_->stopping()) break;
    SampleRequests(StatusClock::now());
  }
}

}  // namespace prefix_router::gateway
