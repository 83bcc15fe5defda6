// What the gateway's own source files share and nothing else sees: the metric families the
// gateway registers, the record a routed request keeps for its logs, the state of one
// forwarding attempt, and small helpers on requests and responses. The gateway is split along
// its seams: gateway.cc (creation, start, the route table, authentication and admission),
// request_path.cc (routing and forwarding), health_check.cc (active and passive health),
// local_routes.cc (/health, /v1/models, /metrics and the status page's sampling), and the
// loops in discovery_loop.cc and engine_metrics_loop.cc.
//
// Not a public interface: include it only from src/gateway/*.cc that define Gateway members.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "api/error.h"
#include "api/trace_context.h"
#include "gateway/background.h"
#include "gateway/gateway.h"

namespace prefix_router::gateway {
namespace gateway_internal {

namespace bhttp = http::bhttp;
using Clock = std::chrono::steady_clock;

inline std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

inline double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::optional<std::string_view> HeaderValue(const http::Request& req, std::string_view name) {
  auto it = req.find(name);
  if (it == req.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

inline http::StringResponse JsonResponse(int status, std::string body) {
  http::StringResponse res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

inline std::string_view RequestIdOf(const http::Request& req) {
  return HeaderValue(req, api::kRequestIdHeader).value_or("-");
}

inline std::string_view TraceIdOf(const http::Request& req) {
  auto tp = HeaderValue(req, api::kTraceparentHeader);
  return tp ? api::TraceIdOf(*tp).value_or("-") : "-";
}

}  // namespace gateway_internal

// ------------------------------------------------------------------------------------ metrics

struct Gateway::Metrics {
  explicit Metrics(metrics::Registry& r)
      : requests(r.AddCounter("prefix_router_requests_total",
                              "Requests routed to an instance, by instance, model and decision kind",
                              {"instance", "model", "decision"})),
        overflows(r.AddCounter("prefix_router_overflows_total",
                               "Prefix-aware requests that did not land on their first choice "
                               "(overflow or saturated), by model",
                               {"model"})),
        upstream_errors(r.AddCounter("prefix_router_upstream_errors_total",
                                     "Upstream failures by instance and kind (connect, reset, "
                                     "timeout, status_500, status_502, status_503, broken_stream)",
                                     {"instance", "kind"})),
        client_disconnects(r.AddCounter("prefix_router_client_disconnects_total",
                                        "Clients that went away before their response ended, by "
                                        "stage (waiting for the instance, or streaming); the "
                                        "upstream request is aborted",
                                        {"stage"})),
        rejected_requests(r.AddCounter("prefix_router_rejected_requests_total",
                                       "Requests refused before routing, by model and reason "
                                       "(429 pool_in_flight: the pool's max_in_flight; 429 "
                                       "tenant_requests, tenant_tokens: the tenant's rate limits; "
                                       "413 tenant_request_too_large: over its token burst; 429 with "
                                       "flow_control: queue_full, queue_bytes, queue_shed (a "
                                       "sheddable priority), queue_timeout (max_queue_wait), "
                                       "queue_displaced (a higher priority took its place))",
                                       {"model", "reason"})),
        unauthorized(r.AddCounter("prefix_router_unauthorized_requests_total",
                                  "Requests refused with 401 for want of a valid client key, by "
                                  "reason (missing_key, invalid_key)",
                                  {"reason"})),
        rejected_connections(r.AddCounter("prefix_router_rejected_connections_total",
                                          "Client connections refused with 503 because "
                                          "limits.max_connections were open")),
        tls_handshake_failures(r.AddCounter("prefix_router_tls_handshake_failures_total",
                                            "Client connections closed because their TLS "
                                            "handshake failed or timed out (tls enabled)")),
        client_connections(r.AddGauge("prefix_router_client_connections", "Client connections currently open")),
        retries(r.AddCounter("prefix_router_retries_total",
                             "Requests sent to a further instance after a failure, by model and "
                             "the previous attempt's failure (connect, reset, broken_stream, "
                             "status_500, status_502, status_503, timeout: timeouts."
                             "per_try_first_byte, ejected: its instance was ejected while it "
                             "waited)",
                             {"model", "reason"})),
        local_errors(r.AddCounter("prefix_router_local_resource_errors_total",
                                  "Upstream connects and health checks that failed for want of a "
                                  "local resource (descriptors, buffers, ports: EMFILE, ENFILE, "
                                  "ENOBUFS, ENOMEM, EADDRNOTAVAIL), by where; they never count "
                                  "against an instance's health",
                                  {"where"})),
        max_client_connections(r.AddGauge("prefix_router_max_client_connections",
                                          "The limit on open client connections in force "
                                          "(limits.max_connections, auto: derived from the "
                                          "descriptor limit); 0 = no limit")),
        rejected_client_connections(r.AddCounter("prefix_router_rejected_client_connections_total",
                                                 "Client connections refused with 429 because their "
                                                 "address held limits.max_connections_per_client")),
        request_timeouts(r.AddCounter("prefix_router_request_timeouts_total",
                                      "Requests answered 408 because their head or body stopped "
                                      "arriving for timeouts.client_read")),
        accept_errors(r.AddCounter("prefix_router_accept_errors_total",
                                   "Failed accepts on the client listener (EMFILE and the like); "
                                   "the listener backs off from 10 ms to 1 s")),
        metric_series_overflow(r.AddCounter("prefix_router_metric_series_overflow_total",
                                            "Updates that found their metric at its series bound and "
                                            "went to its `other` series instead, by metric",
                                            {"metric"})),
        responses(r.AddCounter("prefix_router_responses_total",
                               "Responses sent to clients by HTTP status code and origin "
                               "(upstream or gateway)",
                               {"code", "origin"})),
        in_flight(r.AddGauge("prefix_router_in_flight_requests",
                             "Requests dispatched to an instance and not yet finished", {"instance"})),
        instance_up(r.AddGauge("prefix_router_instance_up",
                               "1 while the instance takes traffic, 0 while ejected or drained", {"instance"})),
        decision_seconds(
            r.AddHistogram("prefix_router_routing_decision_seconds",
                           "Time from a complete request to the routing decision "
                           "(parse, extract, hash, tokenize with tokenizer: engine, pick)",
                           {}, {1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2})),
        first_byte_seconds(r.AddHistogram("prefix_router_upstream_first_byte_seconds",
                                          "Time from dispatch to the first response body byte "
                                          "from the instance, by instance and stream (true: an "
                                          "SSE stream, whose first byte is its first token: TTFT "
                                          "as seen at the gateway; false: a whole response, "
                                          "whose first byte comes when it is all generated)",
                                          {"instance", "stream"}, metrics::Histogram::LatencyBuckets())),
        model_first_byte_seconds(r.AddHistogram("prefix_router_model_first_byte_seconds",
                                                "Time from dispatch to the first response body "
                                                "byte, by model (a served name the gateway knows, "
                                                "else other) and stream (true: TTFT)",
                                                {"model", "stream"}, metrics::Histogram::LatencyBuckets())),
        duration_seconds(r.AddHistogram("prefix_router_request_duration_seconds",
                                        "Time from a complete request to the end of its response", {"instance"},
                                        metrics::Histogram::DurationBuckets())),
        prompt_tokens(r.AddCounter("prefix_router_prompt_tokens_total",
                                   "Prompt tokens of the responses relayed, from their usage, by "
                                   "instance, model, client (the configured client key's tenant; "
                                   "empty without client keys) and cached (true: served from the "
                                   "engine's prefix cache, usage.prompt_tokens_details."
                                   "cached_tokens; false: computed)",
                                   {"instance", "model", "client", "cached"})),
        completion_tokens(r.AddCounter("prefix_router_completion_tokens_total",
                                       "Completion tokens of the responses relayed, from their "
                                       "usage, by instance, model and client",
                                       {"instance", "model", "client"})),
        usage_responses(r.AddCounter("prefix_router_usage_responses_total",
                                     "Successful completion responses relayed, by instance, "
                                     "model, client and with_usage (false: no usage in the body, "
                                     "or a stream without stream_options.include_usage; their "
                                     "tokens are not counted)",
                                     {"instance", "model", "client", "with_usage"})),
        queue_length(r.AddGauge("prefix_router_queue_length",
                                "Requests waiting in a pool's flow-control queue, by pool (its served "
                                "name, or default)",
                                {"pool"})),
        queue_tenants_at_bound(r.AddGauge("prefix_router_queue_tenants_at_bound",
                                          "Tenants holding flow_control.max_in_flight_per_tenant requests in "
                                          "flight (their next requests wait), by pool",
                                          {"pool"})),
        queue_wait_seconds(r.AddHistogram("prefix_router_queue_wait_seconds",
                                          "Time requests let out of a flow-control queue waited in it, "
                                          "by model and priority",
                                          {"model", "priority"}, metrics::Histogram::LatencyBuckets())),
        background_failures(BackgroundFailuresFamily(r)) {}

  metrics::Family<metrics::Counter>& requests;
  metrics::Family<metrics::Counter>& overflows;
  metrics::Family<metrics::Counter>& upstream_errors;
  metrics::Family<metrics::Counter>& client_disconnects;
  metrics::Family<metrics::Counter>& rejected_requests;
  metrics::Family<metrics::Counter>& unauthorized;
  metrics::Family<metrics::Counter>& rejected_connections;
  metrics::Family<metrics::Counter>& tls_handshake_failures;
  metrics::Family<metrics::Gauge>& client_connections;
  metrics::Family<metrics::Counter>& retries;
  metrics::Family<metrics::Counter>& local_errors;
  metrics::Family<metrics::Gauge>& max_client_connections;
  metrics::Family<metrics::Counter>& rejected_client_connections;
  metrics::Family<metrics::Counter>& request_timeouts;
  metrics::Family<metrics::Counter>& accept_errors;
  metrics::Family<metrics::Counter>& metric_series_overflow;
  metrics::Family<metrics::Counter>& responses;
  metrics::Family<metrics::Gauge>& in_flight;
  metrics::Family<metrics::Gauge>& instance_up;
  metrics::Family<metrics::Histogram>& decision_seconds;
  metrics::Family<metrics::Histogram>& first_byte_seconds;
  metrics::Family<metrics::Histogram>& model_first_byte_seconds;
  metrics::Family<metrics::Histogram>& duration_seconds;
  metrics::Family<metrics::Counter>& prompt_tokens;
  metrics::Family<metrics::Counter>& completion_tokens;
  metrics::Family<metrics::Counter>& usage_responses;
  metrics::Family<metrics::Gauge>& queue_length;
  metrics::Family<metrics::Gauge>& queue_tenants_at_bound;
  metrics::Family<metrics::Histogram>& queue_wait_seconds;
  metrics::Family<metrics::Counter>& background_failures;
};

// What the access log and the failure log say about one routed request.
struct Gateway::RequestRecord {
  std::string model;          // served name (empty before parsing succeeded)
  std::string tenant;         // the client key's tenant (empty: keys off)
  std::string instance;       // the last instance tried
  std::string_view decision;  // its decision kind (a DecisionKindName literal)
  uint32_t rank = 0;
  uint32_t attempts = 0;  // instances tried
};

struct Gateway::Attempt {
  int error_status = 502;                    // what to answer if no attempt succeeds
  std::string error;                         // the last failure, for the message
  std::string kind;                          // the last failure's kind: the next retry's reason label
  std::string model;                         // the served name, for messages and logs
  std::string model_label;                   // its metric label (RoutingState::ModelLabel)
  std::string client;                        // the client key's tenant (a configured name; empty: keys off)
  bool count_usage = false;                  // a generation route: its responses' usage is counted
  ModelStats::Entry* model_stats = nullptr;  // of model_label
};

}  // namespace prefix_router::gateway
