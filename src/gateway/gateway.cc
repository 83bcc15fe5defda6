#include "gateway/gateway.h"
#include "gateway/prompt_tokens.h"

#include <spdlog/spdlog.h>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include "api/error.h"
#include "api/native_request.h"
#include "api/openai_request.h"
#include "api/response_usage.h"
#include "api/trace_context.h"
#include "core/block_chain.h"
#include "gateway/background.h"
#include "gateway/connection_limit.h"
#include "gateway/log.h"
#include "http/tls.h"

namespace prefix_router::gateway {
namespace {

namespace bhttp = http::bhttp;
using Clock = std::chrono::steady_clock;
using namespace boost::asio::experimental::awaitable_operators;

// Outcomes of one forwarding attempt.
constexpr int kDone = 0;   // answered (or the client is gone)
constexpr int kRetry = 1;  // failed before any byte reached the client; another instance may try
constexpr int kFail = 2;   // failed in a way a retry must not repeat (the instance may be working on it)
constexpr size_t kRelayBufferBytes = 16 * 1024;
constexpr std::string_view kInstanceHeader = "x-prefix-router-instance";
constexpr std::string_view kDecisionHeader = "x-prefix-router-decision";
constexpr std::string_view kRankHeader = "x-prefix-router-rank";

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A per-thread generator for the random strategies, seeded once per thread.
Rng& ThreadRng() {
  thread_local Rng rng(std::random_device{}() ^
                       std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return rng;
}

// A per-thread parser: its buffers grow to the largest body seen and are reused.
api::OpenAiRequestParser& ThreadParser() {
  thread_local api::OpenAiRequestParser parser;
  return parser;
}

// A per-thread copy of the keyed text, for cache-aware pools' block chains (read before the
// request's first await, like the parser's results).
std::string& ThreadKeyedText() {
  thread_local std::string text;
  return text;
}

std::optional<std::string_view> HeaderValue(const http::Request& req, std::string_view name) {
  auto it = req.find(name);
  if (it == req.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  api::AppendJsonEscaped(out, s);
  out += '"';
  return out;
}

http::StringResponse JsonResponse(int status, std::string body) {
  http::StringResponse res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

// True when the sender's Connection header lists `name` as a connection option: that header
// is hop-by-hop as well and is not forwarded (RFC 9110 section 7.6.1).
template <bool isRequest>
bool NamedByConnection(const bhttp::header<isRequest>& message, std::string_view name) {
  auto [begin, end] = message.equal_range(bhttp::field::connection);
  for (auto it = begin; it != end; ++it) {
    for (auto token : bhttp::token_list(it->value())) {
      if (beast::iequals(token, name)) return true;
    }
  }
  return false;
}

// x-request-id and Trace Context (api/trace_context.h). The request is edited in place, so
// that the instance receives the id the client is answered with and no invalid traceparent.
void Correlate(http::Exchange& ex) {
  http::Request& req = ex.request();
  auto id = HeaderValue(req, api::kRequestIdHeader);
  if (!id || req.count(api::kRequestIdHeader) != 1 || !api::IsValidRequestId(*id)) {
    thread_local Rng rng(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32));
    req.set(api::kRequestIdHeader, api::FormatRequestId(rng.Next(), rng.Next()));
    id = HeaderValue(req, api::kRequestIdHeader);
  }
  ex.SetResponseHeader(api::kRequestIdHeader, std::string(*id));
  if (const size_t n = req.count(api::kTraceparentHeader);
      n > 1 || (n == 1 && !api::TraceIdOf(*HeaderValue(req, api::kTraceparentHeader)))) {
    req.erase(api::kTraceparentHeader);
    req.erase(api::kTracestateHeader);
  }
}

std::string_view RequestIdOf(const http::Request& req) {
  return HeaderValue(req, api::kRequestIdHeader).value_or("-");
}

std::string_view TraceIdOf(const http::Request& req) {
  auto tp = HeaderValue(req, api::kTraceparentHeader);
  return tp ? api::TraceIdOf(*tp).value_or("-") : "-";
}

// The routes of Handle; any other path is unknown (config unknown_path_status), a known one
// with another method is 405.
bool IsKnownPath(std::string_view path) {
  static constexpr std::string_view kPaths[] = {
      "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/tokenize",
      "/detokenize", "/invocations", "/health", "/v1/models", "/metrics"};
  return std::find(std::begin(kPaths), std::end(kPaths), path) != std::end(kPaths);
}

// The routes a client key opens when keys are on: every API route, /v1/models included (it
// tells what is served). /health stays open for probes, /metrics for scrapers unless
// metrics.require_key.
bool NeedsClientKey(std::string_view path, bool metrics_need_key) {
  if (path == "/metrics") return metrics_need_key;
  return IsKnownPath(path) && path != "/health";
}

// The key a request presents: `Authorization: Bearer KEY` (what the OpenAI SDKs send), else
// `x-api-key: KEY` (Anthropic's SDKs, and many gateways). nullopt when it presents none; an
// empty view for a header that is there but malformed (another scheme, two of them).
std::optional<std::string_view> PresentedKey(const http::Request& req) {
  if (const size_t n = req.count(bhttp::field::authorization); n > 0) {
    if (n > 1) return std::string_view();
    std::string_view v = *HeaderValue(req, "authorization");
    if (v.size() < 7 || !beast::iequals(v.substr(0, 7), "bearer ")) return std::string_view();
    v.remove_prefix(7);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  }
  if (const size_t n = req.count("x-api-key"); n > 0) {
    if (n > 1) return std::string_view();
    return *HeaderValue(req, "x-api-key");
  }
  return std::nullopt;
}

// Requests without a prefix key in a prefix-aware pool: least-outstanding-requests, since
// placement by key has nothing to place, with the pool's load measure. Stateless, so one
// instance per measure serves every pool.
Policy& UnkeyedPolicy(LoadMeasure measure) {
  static const auto make = [](LoadMeasure m) {
    RoutingOptions o;
    o.strategy = Strategy::kLeastOutstanding;
    o.load_measure = m;
    return MakePolicy(o);
  };
  static const std::unique_ptr<Policy> by_requests = make(LoadMeasure::kRequests);
  static const std::unique_ptr<Policy> by_tokens = make(LoadMeasure::kPromptTokens);
  return measure == LoadMeasure::kRequests ? *by_requests : *by_tokens;
}

// Completes when instance `index` is ejected (health checks, passive failures), when `watch`;
// otherwise only when the race it is part of cancels it.
net::awaitable<void> WaitEjected(const RoutingState& rs, uint32_t index, bool watch) {
  if (!watch) {
    net::steady_timer never(co_await net::this_coro::executor, net::steady_timer::time_point::max());
    co_await never.async_wait(http::kTuple);
    co_return;
  }
  co_await rs.instances[index]->ejection.Wait(rs.fleet->state(index).available);
}

bool IsSse(const bhttp::response_header<>& head) {
  auto it = head.find(bhttp::field::content_type);
  return it != head.end() && beast::iequals(it->value().substr(0, 17), "text/event-stream");
}

}  // namespace

// ------------------------------------------------------------------------------------ metrics

struct Gateway::Metrics {
  explicit Metrics(Registry& r)
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
                                       "413 tenant_request_too_large: over its token burst)",
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
        client_connections(r.AddGauge("prefix_router_client_connections",
                                      "Client connections currently open")),
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
                               "1 while the instance takes traffic, 0 while ejected or drained",
                               {"instance"})),
        decision_seconds(r.AddHistogram("prefix_router_routing_decision_seconds",
                                        "Time from a complete request to the routing decision "
                                        "(parse, extract, hash, tokenize with tokenizer: engine, pick)",
                                        {}, {1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2})),
        first_byte_seconds(r.AddHistogram("prefix_router_upstream_first_byte_seconds",
                                          "Time from dispatch to the first response body byte "
                                          "from the instance, by instance and stream (true: an "
                                          "SSE stream, whose first byte is its first token: TTFT "
                                          "as seen at the gateway; false: a whole response, "
                                          "whose first byte comes when it is all generated)",
                                          {"instance", "stream"}, Histogram::LatencyBuckets())),
        model_first_byte_seconds(r.AddHistogram("prefix_router_model_first_byte_seconds",
                                                "Time from dispatch to the first response body "
                                                "byte, by model (a served name the gateway knows, "
                                                "else other) and stream (true: TTFT)",
                                                {"model", "stream"}, Histogram::LatencyBuckets())),
        duration_seconds(r.AddHistogram("prefix_router_request_duration_seconds",
                                        "Time from a complete request to the end of its response",
                                        {"instance"}, Histogram::DurationBuckets())),
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
        background_failures(BackgroundFailuresFamily(r)) {}

  Family<Counter>& requests;
  Family<Counter>& overflows;
  Family<Counter>& upstream_errors;
  Family<Counter>& client_disconnects;
  Family<Counter>& rejected_requests;
  Family<Counter>& unauthorized;
  Family<Counter>& rejected_connections;
  Family<Counter>& tls_handshake_failures;
  Family<Gauge>& client_connections;
  Family<Counter>& retries;
  Family<Counter>& local_errors;
  Family<Gauge>& max_client_connections;
  Family<Counter>& rejected_client_connections;
  Family<Counter>& request_timeouts;
  Family<Counter>& accept_errors;
  Family<Counter>& metric_series_overflow;
  Family<Counter>& responses;
  Family<Gauge>& in_flight;
  Family<Gauge>& instance_up;
  Family<Histogram>& decision_seconds;
  Family<Histogram>& first_byte_seconds;
  Family<Histogram>& model_first_byte_seconds;
  Family<Histogram>& duration_seconds;
  Family<Counter>& prompt_tokens;
  Family<Counter>& completion_tokens;
  Family<Counter>& usage_responses;
  Family<Counter>& background_failures;
};

// What the access log and the failure log say about one routed request.
struct Gateway::RequestRecord {
  std::string model;              // served name (empty before parsing succeeded)
  std::string tenant;             // the client key's tenant (empty: keys off)
  std::string instance;           // the last instance tried
  std::string_view decision;      // its decision kind (a DecisionKindName literal)
  uint32_t rank = 0;
  uint32_t attempts = 0;          // instances tried
};

struct Gateway::Attempt {
  int error_status = 502;   // what to answer if no attempt succeeds
  std::string error;        // the last failure, for the message
  std::string kind;         // the last failure's kind: the next retry's reason label
  std::string model;        // the served name, for messages and logs
  std::string model_label;  // its metric label (RoutingState::ModelLabel)
  std::string client;       // the client key's tenant (a configured name; empty: keys off)
  bool count_usage = false; // a generation route: its responses' usage is counted
  ModelStats::Entry* model_stats = nullptr;  // of model_label
};

// ------------------------------------------------------------------------------ RoutingState

const Pool& RoutingState::PoolFor(std::string_view served_name) const {
  auto it = pools.find(served_name);
  return it == pools.end() ? default_pool : it->second;
}

std::string_view RoutingState::ModelLabel(std::string_view served_name) const {
  if (served_name.empty() || fleet->Declares(served_name) || pools.contains(served_name)) return served_name;
  return "other";
}

// ----------------------------------------------------------------------------------- Gateway

Gateway::Gateway(GatewayConfig config, RateLimiter::Now rate_limit_clock)
    : config_(std::move(config)), limiter_(std::make_unique<RateLimiter>(std::move(rate_limit_clock))) {}
Gateway::~Gateway() {
  if (server_) server_->Stop(std::chrono::milliseconds(0));
}

Result<std::unique_ptr<Gateway>> Gateway::Create(GatewayConfig config, std::shared_ptr<Resolver> resolver,
                                                 RateLimiter::Now rate_limit_clock) {
  std::unique_ptr<Gateway> g(new Gateway(std::move(config), std::move(rate_limit_clock)));
  const GatewayConfig& c = g->config_;
  g->metrics_ = std::make_unique<Metrics>(g->registry_);
  g->registry_.SetSeriesLimit(kDefaultMaxSeries, &g->metrics_->metric_series_overflow);
  g->tokenize_requests_ = &g->registry_.AddCounter(
      "prefix_router_tokenize_requests_total",
      "POST /tokenize asked of instances for kv-aware prompt tokens (tokenizer: engine), by "
      "instance and outcome (ok; failed: the request routed without tokens)",
      {"instance", "outcome"});
  g->tokenize_seconds_ = &g->registry_.AddHistogram(
      "prefix_router_tokenize_seconds", "Time to a /tokenize answer (or its failure), before the routing decision",
      {}, {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1});
  g->resolver_ = resolver                     ? std::move(resolver)
                 : c.discovery.hosts_file.empty() ? MakeSystemResolver()
                                                  : MakeHostsFileResolver(c.discovery.hosts_file);
  g->running_ = c;
  g->running_.admin = AdminConfig{};
  g->running_.tls = ListenerTlsConfig{};

  // `resolve: all` names are resolved before the gateway starts, so that it starts with their
  // instances (a name that does not resolve yet gets them at a later resolution).
  if (std::any_of(c.instances.begin(), c.instances.end(),
                  [](const InstanceConfig& ic) { return ic.resolve == ResolveMode::kAll; })) {
    net::io_context ctx;
    g->SpawnLoop(ctx, "resolve", g->ResolveRound(/*apply=*/false));
    ctx.run();
  }

  const GatewayConfig effective = g->EffectiveLocked(g->running_);
  auto rs = g->BuildRouting(effective, nullptr, nullptr);
  if (!rs.ok()) return rs.status();
  g->routing_.store(*rs);
  KvSubscriberOptions kv_options;
  kv_options.silence_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(c.timeouts.kv_events_silence * 1000));
  g->kv_subscriber_ = std::make_unique<KvEventSubscriber>(kv_options, &g->registry_);
  g->UpdateKvSources(effective, **rs);
  g->ApplyClientsAndLimits(c, nullptr, nullptr);

  // Live gauges are read from the fleet at scrape time.
  Gateway* self = g.get();
  // Instances removed at run time read 0 (their series stay: children are never removed).
  auto reported = std::make_shared<std::pair<std::mutex, std::set<std::string>>>();
  g->registry_.AddCollector([self, reported] {
    auto state = self->routing_.load();
    std::lock_guard lock(reported->first);
    std::set<std::string> gone = std::move(reported->second);
    reported->second.clear();
    for (uint32_t i = 0; i < state->fleet->size(); ++i) {
      const auto& name = state->fleet->spec(i).name;
      self->metrics_->in_flight.WithLabels({name}).Set(state->fleet->state(i).in_flight.load());
      self->metrics_->instance_up.WithLabels({name}).Set(state->fleet->state(i).routable() ? 1 : 0);
      gone.erase(name);
      reported->second.insert(name);
    }
    for (const auto& name : gone) {
      self->metrics_->in_flight.WithLabels({name}).Set(0);
      self->metrics_->instance_up.WithLabels({name}).Set(0);
    }
    // The server keeps its own counts (the HTTP layer knows no metrics); the counter catches
    // up with them here, and only here, so the difference is never negative.
    if (self->server_) {
      self->metrics_->client_connections.WithLabels({}).Set(static_cast<double>(self->server_->open_connections()));
      const auto catch_up = [](Family<Counter>& family, int64_t count) {
        Counter& counter = family.WithLabels({});
        const auto now = static_cast<uint64_t>(count);
        if (now > counter.Value()) counter.Inc(now - counter.Value());
      };
      catch_up(self->metrics_->rejected_connections, self->server_->rejected_connections());
      catch_up(self->metrics_->tls_handshake_failures, self->server_->tls_handshake_failures());
      catch_up(self->metrics_->rejected_client_connections, self->server_->rejected_client_connections());
      catch_up(self->metrics_->request_timeouts, self->server_->request_timeouts());
      catch_up(self->metrics_->accept_errors, self->server_->accept_errors());
    }
  });

  http::ServerOptions so;
  so.host = c.listen_host;
  so.port = c.listen_port;
  so.io_threads = c.io_threads;
  so.max_body_bytes = c.max_request_body_bytes;
  so.max_header_bytes = c.max_header_bytes;
  so.max_connections = c.max_connections;
  so.max_connections_per_client = c.max_connections_per_client;
  if (c.max_connections == kAutoMaxConnections) {
    const DescriptorLimit fds = CurrentDescriptorLimit();
    const ConnectionLimitPlan plan = AutoMaxConnections(fds.soft, c.instances.size());
    so.max_connections = plan.limit;
    LogEvent(plan.starved ? spdlog::level::warn : spdlog::level::info, "client connection limit",
             {{"max_connections", plan.limit}, {"rule", "auto: (descriptors - reserve) / 2"},
              {"descriptors", fds.soft}, {"reserve", plan.reserve},
              {"note", plan.starved ? "the descriptor limit leaves no room for clients: raise "
                                      "RLIMIT_NOFILE (ulimit -n) or set limits.max_connections"
                                    : "set limits.max_connections to override"}});
  }
  g->metrics_->max_client_connections.WithLabels({}).Set(so.max_connections);
  so.read_timeout = Ms(c.timeouts.client_read);
  so.write_timeout = Ms(c.timeouts.client_write);
  so.idle_timeout = Ms(c.timeouts.client_idle);
  if (c.tls.enabled) {
    auto tls = http::MakeServerTlsContext(c.tls.cert_file, c.tls.key_file, "tls");
    if (!tls.ok()) return tls.status();
    so.tls = *tls;
  }
  g->server_ = std::make_unique<http::Server>(so, *g);
  return g;
}

std::shared_ptr<InstanceRuntime> Gateway::NewRuntime(const InstanceConfig& ic) {
  auto rt = std::make_shared<InstanceRuntime>();
  rt->target.host = ic.host;
  rt->target.port = ic.port;
  rt->target.base_path = ic.base_path;
  const bool ipv6 = ic.host.find(':') != std::string::npos;
  const std::string address = (ipv6 ? "[" + ic.host + "]" : ic.host) + ":" + std::to_string(ic.port);
  rt->target.host_header = ic.host_header.empty() ? address : ic.host_header;
  rt->target.https = ic.https;
  rt->target.tls_name = ic.tls_name;
  rt->target.key = (ic.https ? "https://" : "http://") + address;
  if (ic.https) {
    rt->target.tls_config = ic.tls;
    auto tls = http::MakeClientTlsContext(ic.tls.ca_file, ic.tls.verify, "instances." + ic.name + ".upstream_tls");
    if (tls.ok()) {
      rt->target.tls = *tls;
      // Connections made under another context (another CA file, or the same file re-read by
      // a reload) are never lent for this one.
      rt->target.key += fmt::format("#{}", fmt::ptr(rt->target.tls.get()));
    } else {
      // Validated at load; a file that went away since makes every connect fail with this.
      LogEvent(spdlog::level::err, "upstream TLS unavailable",
               {{"instance", ic.name}, {"error", tls.status().message()}});
    }
  }
  rt->target.authorization = ic.authorization;
  rt->first_byte = &metrics_->first_byte_seconds.WithLabels({ic.name, "false"});
  rt->first_byte_stream = &metrics_->first_byte_seconds.WithLabels({ic.name, "true"});
  rt->duration = &metrics_->duration_seconds.WithLabels({ic.name});
  return rt;
}

void Gateway::UpdateKvSources(const GatewayConfig& effective, const RoutingState& rs) {
  if (!kv_subscriber_) return;
  std::vector<KvSource> sources;
  for (const InstanceConfig& ic : effective.instances) {
    if (ic.kv_events.endpoint.empty()) continue;
    std::optional<uint32_t> index = rs.fleet->Find(ic.name);
    if (!index) continue;
    KvSource src;
    src.instance_seed = rs.fleet->placement_seed(*index);
    src.instance = ic.name;
    src.config = ic.kv_events;
    src.policies.push_back(rs.default_pool.policy);
    for (const auto& [name, pool] : rs.pools) {
      const bool serves = ic.models.empty() ? !ic.models_only_listed
                                            : std::find(ic.models.begin(), ic.models.end(), name) !=
                                                  ic.models.end();
      if (serves && std::find(src.policies.begin(), src.policies.end(), pool.policy) ==
                        src.policies.end()) {
        src.policies.push_back(pool.policy);
      }
    }
    sources.push_back(std::move(src));
  }
  const bool any = !sources.empty();
  kv_subscriber_->SetSources(std::move(sources));
  if (any) kv_subscriber_->Start();
}

Status Gateway::Start() {
  if (Status s = server_->Start(); !s.ok()) return s;
  if (config_.health.interval > 0) {
    auto rs = routing_.load();
    for (uint32_t i = 0; i < rs->fleet->size(); ++i) {
      auto& ctx = server_->context(i % server_->thread_count());
      SpawnLoop(ctx, "health", HealthLoop(rs, i));
    }
  }
  for (const auto& ic : config_.instances) {
    if (ic.https && !ic.tls.verify) {
      LogEvent(spdlog::level::warn, "upstream TLS verification is off: the instance's certificate is not checked",
               {{"instance", ic.name}, {"url", ic.url}});
    }
  }
  SampleRequests(StatusClock::now());
  SpawnLoop(server_->context(0), "sample", SampleLoop());
  SpawnLoop(server_->context(0), "discovery", DiscoveryLoop());
  SpawnLoop(server_->context(0), "engine_metrics", EngineMetricsLoop());
  spdlog::info("prefix-router listening on {}:{} with {} instances, {} I/O threads",
               config_.listen_host, server_->port(), routing_.load()->fleet->size(),
               server_->thread_count());
  return Status::Ok();
}

void Gateway::SpawnLoop(net::io_context& ctx, std::string_view task, net::awaitable<void> loop) {
  SpawnBackground(ctx.get_executor(), task, std::move(loop), metrics_->background_failures.WithLabels({task}));
}

void Gateway::Stop() {
  discovery_stop_.store(true);
  WakeDiscovery();  // the loop sees discovery_stop_ and ends
  server_->Stop(Ms(config_.timeouts.drain));
}

net::awaitable<void> Gateway::Handle(http::Exchange& ex) {
  Correlate(ex);
  const auto& req = ex.request();
  std::string_view target(req.target().data(), req.target().size());
  std::string_view path = target.substr(0, target.find('?'));
  const auto method = req.method();
  int origin_status = 0;
  RequestRecord record;
  const bool metrics_here = config_.metrics.listener == MetricsListener::kClient;
  if (auto keys = client_keys_.load(); keys && NeedsClientKey(path, config_.metrics.require_key)) {
    if (!co_await Authenticate(ex, *keys, record)) {
      metrics_->responses.WithLabels({"401", "gateway"}).Inc();
      if (config_.log.access_log) LogAccess(ex, path, record);
      co_return;
    }
  }
  if (method == bhttp::verb::post && path == "/v1/chat/completions") {
    co_await HandleRouted(ex, static_cast<int>(api::ApiKind::kChatCompletions), record);
  } else if (method == bhttp::verb::post && path == "/v1/completions") {
    co_await HandleRouted(ex, static_cast<int>(api::ApiKind::kCompletions), record);
  } else if (method == bhttp::verb::post && path == "/v1/responses") {
    co_await HandleRouted(ex, static_cast<int>(api::ApiKind::kResponses), record);
  } else if (method == bhttp::verb::post && path == "/v1/embeddings") {
    co_await HandleRouted(ex, static_cast<int>(api::ApiKind::kEmbeddings), record);
  } else if (method == bhttp::verb::post && path == "/tokenize") {
    co_await HandleRouted(ex, static_cast<int>(api::ApiKind::kTokenize), record);
  } else if (method == bhttp::verb::post && path == "/detokenize") {
    co_await HandleRouted(ex, static_cast<int>(api::ApiKind::kDetokenize), record);
  } else if (method == bhttp::verb::post && path == "/invocations") {
    co_await HandleRouted(ex, static_cast<int>(api::ApiKind::kNative), record);
  } else if (method == bhttp::verb::get && path == "/health") {
    co_await HandleHealth(ex);
  } else if (method == bhttp::verb::get && path == "/v1/models") {
    co_await HandleModels(ex);
  } else if (method == bhttp::verb::get && path == "/metrics" && metrics_here) {
    co_await HandleMetrics(ex);
  } else if (IsKnownPath(path) && (metrics_here || path != "/metrics")) {
    origin_status = 405;
    co_await ex.SendError(405, "method " + std::string(req.method_string()) + " is not allowed on " +
                                   std::string(path));
  } else {
    static constexpr std::pair<int, std::string_view> kCodes[] = {
        {403, "forbidden"}, {404, "not_found"}, {410, "gone"}, {421, "misdirected_request"}, {501, "not_implemented"}};
    origin_status = static_cast<int>(config_.unknown_path_status);
    std::string_view code = "not_found";
    for (const auto& [status, name] : kCodes) code = status == origin_status ? name : code;
    co_await ex.SendError(origin_status, "no route for " + std::string(path), code);
  }
  if (origin_status) metrics_->responses.WithLabels({std::to_string(origin_status), "gateway"}).Inc();
  if (config_.log.access_log) LogAccess(ex, path, record);
}

// One line per request. The path goes without its query string and no header is logged: both
// may carry credentials (an api-key parameter, Authorization).
void Gateway::LogAccess(const http::Exchange& ex, std::string_view path, const RequestRecord& r) const {
  const auto ms = [&ex](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - ex.received_at()).count();
  };
  std::vector<LogField> fields;
  fields.reserve(10);
  fields.emplace_back("method", std::string_view(ex.request().method_string()));
  fields.emplace_back("path", path);
  fields.emplace_back("status", ex.status());  // 0: the client went away before any response
  if (!r.tenant.empty()) fields.emplace_back("tenant", r.tenant);
  if (!r.model.empty()) fields.emplace_back("model", r.model);
  if (r.attempts > 0) {
    fields.emplace_back("instance", r.instance);
    fields.emplace_back("decision", r.decision);
    fields.emplace_back("rank", r.rank);
    fields.emplace_back("attempts", r.attempts);
  }
  fields.emplace_back("duration_ms", ms(Clock::now()));
  if (ex.status() != 0) fields.emplace_back("ttfb_ms", ms(ex.head_sent_at()));
  LogEvent(spdlog::level::info, "request", fields);
}

net::awaitable<bool> Gateway::Authenticate(http::Exchange& ex, const ClientKeySet& keys, RequestRecord& record) {
  http::Request& req = ex.request();
  const std::optional<std::string_view> presented = PresentedKey(req);
  const std::string* tenant = presented && !presented->empty() ? keys.Find(*presented) : nullptr;
  if (tenant != nullptr) {
    record.tenant = *tenant;
    // The client's credential is for the gateway: it does not go to the instances.
    req.erase(bhttp::field::authorization);
    req.erase("x-api-key");
    co_return true;
  }
  // Neither the key nor any part of it is logged or echoed.
  metrics_->unauthorized.WithLabels({presented ? "invalid_key" : "missing_key"}).Inc();
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("request {} refused: {} client key", RequestIdOf(req), presented ? "invalid" : "no");
  }
  ex.SetResponseHeader("www-authenticate", presented ? R"(Bearer realm="prefix-router", error="invalid_token")"
                                                     : R"(Bearer realm="prefix-router")");
  co_await ex.SendError(
      401,
      presented ? "Incorrect API key provided. Send a valid key as `Authorization: Bearer YOUR_KEY`."
                : "You didn't provide an API key. You need to provide your API key in an Authorization "
                  "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
      "invalid_api_key");
  co_return false;
}

std::optional<http::StringResponse> Gateway::AdmitTenant(http::Exchange& ex, std::string_view tenant,
                                                         const std::string& model) {
  const uint64_t tokens = api::EstimatePromptTokens(ex.request().body().size());
  const RateLimiter::Decision d = limiter_->Admit(tenant, tokens);
  // OpenAI's headers, on every answer to a limited tenant (also the instance's, streamed or not).
  if (d.limit_requests > 0) {
    ex.SetResponseHeader("x-ratelimit-limit-requests", std::to_string(d.limit_requests));
    ex.SetResponseHeader("x-ratelimit-remaining-requests", std::to_string(d.remaining_requests));
  }
  if (d.limit_tokens > 0) {
    ex.SetResponseHeader("x-ratelimit-limit-tokens", std::to_string(d.limit_tokens));
    ex.SetResponseHeader("x-ratelimit-remaining-tokens", std::to_string(d.remaining_tokens));
  }
  if (d.admitted()) return std::nullopt;
  std::string reason;
  std::string message;
  int status = 429;
  std::string code = "rate_limit_exceeded";
  switch (d.verdict) {
    case RateLimiter::Verdict::kRequests:
      reason = "tenant_requests";
      message = fmt::format("Rate limit reached for tenant '{}' on requests per minute: limit {}. "
                            "Please try again in {}s.",
                            tenant, d.limit_requests, d.retry_after_seconds);
      break;
    case RateLimiter::Verdict::kTokens:
      reason = "tenant_tokens";
      message = fmt::format("Rate limit reached for tenant '{}' on prompt tokens per minute: limit {}, "
                            "remaining {}, requested ~{} (estimated as body bytes / 4). Please try "
                            "again in {}s.",
                            tenant, d.limit_tokens, d.remaining_tokens, tokens, d.retry_after_seconds);
      break;
    default:  // kTooLarge: waiting cannot help, so not a 429 that clients would retry
      reason = "tenant_request_too_large";
      status = 413;
      code = "request_too_large";
      message = fmt::format("Request too large for tenant '{}' on prompt tokens per minute: ~{} "
                            "estimated prompt tokens (body bytes / 4) exceed the tenant's token burst "
                            "of {}, so it can never be admitted. Shorten the prompt.",
                            tenant, tokens, d.token_burst);
      break;
  }
  metrics_->rejected_requests.WithLabels({model, reason}).Inc();
  metrics_->responses.WithLabels({std::to_string(status), "gateway"}).Inc();
  http::StringResponse res = JsonResponse(status, api::ErrorBody(api::MakeError(status, std::move(message), code)));
  if (status == 429) res.set(bhttp::field::retry_after, std::to_string(d.retry_after_seconds));
  return res;
}

net::awaitable<void> Gateway::HandleRouted(http::Exchange& ex, int api_kind_int, RequestRecord& record) {
  const auto api_kind = static_cast<api::ApiKind>(api_kind_int);
  const auto& req = ex.request();
  co_await AwaitFirstDiscovery();
  auto rs = routing_.load();
  const FleetSnapshot& fleet = *rs->fleet;

  // 1. Bytes -> routing values.
  Result<api::ParsedRequest> parsed = Status::Internal("unset");
  const std::string& body = req.body();
  std::optional<std::string_view> component;
  if (api_kind == api::ApiKind::kNative) {
    component = HeaderValue(req, api::kInferenceComponentHeader);
    const Pool& pool = rs->PoolFor(component.value_or(""));
    parsed = api::ParseNative(body, api::KeyedLength(pool.options), HeaderValue(req, api::kRoutingGroupHeader),
                              component, pool.normaliser.get(),
                              UsesBlockChain(pool.options.strategy) ? &ThreadKeyedText() : nullptr);
  } else {
    // The pool (and so prefix_length) depends on the model, which is in the body: parse with
    // the largest prefix length in use, then cut to the pool's own if it is shorter.
    // A cache-aware pool keys its whole block chain's worth of text and needs the text itself:
    // it always parses again below, so the first parse keys only prefix_length.
    uint32_t max_len = rs->default_pool.options.prefix_length;
    for (const auto& [name, pool] : rs->pools) max_len = std::max(max_len, pool.options.prefix_length);
    parsed = ThreadParser().Parse(api_kind, body, max_len);
    if (parsed.ok() && api::HasPrefixKey(api_kind)) {
      const Pool& pool = rs->PoolFor(parsed->served_name);
      const bool patterns = pool.normaliser && pool.normaliser->has_patterns();
      const bool chained = UsesBlockChain(pool.options.strategy);
      if (api::KeyedLength(pool.options) != max_len || patterns || chained) {
        parsed = ThreadParser().Parse(api_kind, body, api::KeyedLength(pool.options), false,
                                      chained ? &ThreadKeyedText() : nullptr, pool.normaliser.get());
      }
    }
  }
  if (!parsed.ok()) {
    api::ApiError e = api::ErrorFromStatus(parsed.status());
    metrics_->responses.WithLabels({std::to_string(e.http_status), "gateway"}).Inc();
    co_await ex.SendError(e.http_status, e.message);
    co_return;
  }
  const api::ParsedRequest& p = *parsed;
  if (fleet.Eligible(p.served_name).empty()) {
    record.model = std::string(p.served_name);  // the access log names the model it did not find
    metrics_->responses.WithLabels({"404", "gateway"}).Inc();
    if (api_kind == api::ApiKind::kNative) {
      co_await ex.SendError(404, "no instance serves inference component '" + std::string(p.served_name) + "'",
                            "model_not_found");
    } else {
      co_await ex.SendError(404, "The model `" + std::string(p.served_name) + "` does not exist.",
                            "model_not_found");
    }
    co_return;
  }
  const Pool& pool = rs->PoolFor(p.served_name);
  // cache-aware: the keyed text's block chain (owned here: retries route by it after awaits).
  std::vector<uint64_t> chain;
  if (UsesBlockChain(pool.options.strategy) && api::HasPrefixKey(api_kind)) {
    chain = BuildBlockChain(ThreadKeyedText(), pool.options.cache_aware.block_bytes,
                            pool.options.cache_aware.max_blocks, BlockChainSeed(p.served_name, p.routing_group));
  }
  // kv-aware: the prompt's tokens as the engines tokenize it (gateway/prompt_tokens.h); a body
  // the engine tokenizer refuses routes without them (the engine answers its error).
  std::vector<uint32_t> prompt_tokens;
  const bool engine_tokens = WantsPromptTokens(pool.options) && pool.options.tokenizer == TokenizerSource::kEngine;
  if (WantsPromptTokens(pool.options) && !engine_tokens) {
    if (auto t = EnginePromptTokens(api_kind, body); t.ok()) prompt_tokens = std::move(*t);
  }
  Policy& policy = !api::HasPrefixKey(api_kind) && pool.options.strategy == Strategy::kPrefixAware
                       ? UnkeyedPolicy(pool.options.load_measure)
                       : *pool.policy;
  Attempt attempt;
  attempt.model = std::string(p.served_name);
  attempt.model_label = std::string(rs->ModelLabel(p.served_name));
  attempt.client = record.tenant;
  attempt.count_usage = api::HasPrefixKey(api_kind);  // generations: their usage is counted
  attempt.model_stats = &model_stats_.For(attempt.model_label);
  record.model = attempt.model;

  // Tenant rate limits, before the pool's ceiling and any instance.
  if (limiter_->enabled()) {
    const std::string_view tenant = !record.tenant.empty()        ? std::string_view(record.tenant)
                                    : !p.routing_group.empty() ? p.routing_group
                                                               : kAnonymousTenant;
    if (auto refusal = AdmitTenant(ex, tenant, attempt.model_label)) {
      co_await ex.Send(std::move(*refusal));
      co_return;
    }
  }

  // Overload shedding: over the pool's ceiling, refuse before any instance is asked. The slot is
  // taken first and given back on refusal, so concurrent requests cannot overshoot it.
  struct PoolSlot {
    std::atomic<int64_t>& count;
    ~PoolSlot() { count.fetch_sub(1, std::memory_order_relaxed); }
  } slot{*pool.in_flight};
  const int64_t admitted_before = slot.count.fetch_add(1, std::memory_order_relaxed);
  if (pool.options.max_in_flight > 0 && admitted_before >= pool.options.max_in_flight) {
    metrics_->rejected_requests.WithLabels({attempt.model_label, "pool_in_flight"}).Inc();
    metrics_->responses.WithLabels({"429", "gateway"}).Inc();
    http::StringResponse res = JsonResponse(
        429, api::ErrorBody(api::MakeError(
                 429,
                 "too many requests in flight for '" + attempt.model + "' (limit " +
                     std::to_string(pool.options.max_in_flight) + "); retry later",
                 "pool_overloaded")));
    res.set(bhttp::field::retry_after, "1");
    co_await ex.Send(std::move(res));
    co_return;
  }
  // `p` views into this thread's parser, which other requests reuse while this one awaits its
  // instance: retries must route by a copy of the name.
  const std::string served_name(p.served_name);
  const uint32_t work_tokens = api::EstimatePromptTokens(body.size());
  // tokenizer: engine: asked once admitted (nothing of the parser's is read after this await).
  if (engine_tokens) prompt_tokens = co_await EngineTokens(*rs, served_name, api_kind_int, body);

  // 2. Pick, forward, and on a retryable failure move down the preference order.
  std::vector<uint32_t> tried;
  bool decided_once = false;
  for (uint32_t n = 0;; ++n) {
    RouteRequest rr{served_name, p.key, tried, work_tokens, chain};
    rr.prompt_tokens = prompt_tokens;
    rr.request_id = dispatch_ids_.fetch_add(1, std::memory_order_relaxed) + 1;
    auto decision = policy.Pick(rr, fleet, ThreadRng());
    if (!decided_once) {
      metrics_->decision_seconds.WithLabels({}).Observe(SecondsSince(ex.received_at()));
      decided_once = true;
    }
    if (!decision.ok()) {
      const int status = n == 0 ? 503 : attempt.error_status;
      std::string msg = n == 0 ? decision.status().message()
                               : "all attempted instances failed; last error: " + attempt.error;
      LogEvent(spdlog::level::warn, "request failed",
               {{"model", attempt.model}, {"status", status}, {"attempts", n}, {"error", msg}});
      metrics_->responses.WithLabels({std::to_string(status), "gateway"}).Inc();
      spdlog::info("request {} (trace {}) for '{}': {}", RequestIdOf(req), TraceIdOf(req), served_name, msg);
      co_await ex.SendError(status, msg, n == 0 ? "no_instance_available" : "upstream_failed");
      co_return;
    }
    const uint32_t i = decision->instance;
    const std::string& name = fleet.spec(i).name;
    record.instance = name;
    record.decision = DecisionKindName(decision->kind);
    record.rank = decision->rank;
    record.attempts = n + 1;
    metrics_->requests.WithLabels({name, attempt.model_label, std::string(DecisionKindName(decision->kind))}).Inc();
    rs->instances[i]->stats->CountDecision(decision->kind);
    if (decision->kind == DecisionKind::kOverflow || decision->kind == DecisionKind::kSaturated) {
      metrics_->overflows.WithLabels({attempt.model_label}).Inc();
    }
    if (n > 0) metrics_->retries.WithLabels({attempt.model_label, attempt.kind}).Inc();
    if (spdlog::should_log(spdlog::level::debug)) {
      spdlog::debug("request {} (trace {}) for '{}' -> {} ({}, rank {}, attempt {})", RequestIdOf(req),
                    TraceIdOf(req), served_name, name, DecisionKindName(decision->kind), decision->rank, n + 1);
    }
    const bool last = n >= config_.max_retries;
    int outcome = kDone;
    {
      InFlightGuard guard(fleet.shared_state(i), work_tokens);
      decision->request_id = rr.request_id;
      policy.OnDispatched(rr, *decision, fleet);
      outcome = co_await Forward(ex, *rs, i, *decision, last, attempt, policy);
      policy.OnCompleted(*decision, fleet);
    }
    if (outcome == kDone) co_return;
    tried.push_back(i);
    if (last || outcome == kFail) {
      LogEvent(spdlog::level::warn, "request failed",
               {{"model", attempt.model}, {"status", attempt.error_status}, {"attempts", n + 1},
                {"error", attempt.error}});
      metrics_->responses.WithLabels({std::to_string(attempt.error_status), "gateway"}).Inc();
      spdlog::info("request {} (trace {}) for '{}' failed: {}", RequestIdOf(req), TraceIdOf(req), served_name,
                   attempt.error);
      co_await ex.SendError(attempt.error_status,
                            (n == 0 ? "the instance failed: " : "all attempted instances failed; last error: ") +
                                attempt.error,
                            "upstream_failed");
      co_return;
    }
  }
}

net::awaitable<int> Gateway::Forward(http::Exchange& ex, const RoutingState& rs, uint32_t index,
                                     const Decision& decision, bool last_attempt, Attempt& attempt,
                                     Policy& policy) {
  InstanceRuntime& rt = *rs.instances[index];
  const std::string& name = rs.fleet->spec(index).name;
  const auto& t = config_.timeouts;
  const auto started = Clock::now();
  const auto total_deadline = t.total > 0 ? ex.received_at() + Ms(t.total) : Clock::time_point::max();
  auto limit = [&](double seconds) {
    auto d = std::chrono::duration_cast<Clock::duration>(Ms(seconds));
    if (total_deadline != Clock::time_point::max()) d = std::min(d, total_deadline - Clock::now());
    return std::max(d, Clock::duration(std::chrono::milliseconds(1)));
  };
  auto error = [&](std::string_view kind, std::string message, int status) {
    metrics_->upstream_errors.WithLabels({name, std::string(kind)}).Inc();
    rt.stats->upstream_errors.fetch_add(1, std::memory_order_relaxed);
    attempt.error = name + ": " + message;
    attempt.error_status = status;
    attempt.kind = std::string(kind);
  };
  // timeouts.per_try_first_byte: the deadline of this attempt's first response byte, counted
  // from its dispatch (connect included). Only an attempt that may be retried uses it: the
  // last one waits out first_byte, or ends at the per-try deadline with 504.
  const auto per_try_deadline =
      t.per_try_first_byte > 0 ? started + std::chrono::duration_cast<Clock::duration>(Ms(t.per_try_first_byte))
                               : Clock::time_point::max();
  // The wait for the first response byte: first_byte (and total), cut at the per-try deadline;
  // `per_try` says the per-try deadline is the one that binds.
  bool per_try = false;
  auto first_byte_wait = [&] {
    Clock::duration d = limit(t.first_byte);
    per_try = false;
    if (per_try_deadline != Clock::time_point::max()) {
      const Clock::duration left = per_try_deadline - Clock::now();
      if (left <= d) {
        d = std::max(left, Clock::duration(std::chrono::milliseconds(1)));
        per_try = true;
      }
    }
    return d;
  };
  auto first_byte_timeout = [&]() -> int {
    if (per_try) {
      error("timeout", fmt::format("no response within the per-try timeout of {} s", t.per_try_first_byte), 504);
      return last_attempt ? kFail : kRetry;  // cancelled upstream when the lease is dropped
    }
    error("timeout", "no response within the first-byte timeout", 504);
    return kFail;  // it may still be working on it
  };
  // Ejection while waiting: only an attempt that may be retried leaves; the last one keeps
  // waiting (the instance may still answer).
  const bool watch_ejection = !last_attempt && config_.health.interval > 0;
  auto ejected = [&]() -> int {
    error("ejected", "the instance was ejected while the request waited for its first byte", 502);
    return kRetry;
  };
  auto& pool = ConnectionPool::ForThisThread();
  const auto& req = ex.request();
  // The policy's first-token event (Forward's comment in gateway.h), at most once per attempt.
  bool first_token_told = false;
  auto first_token = [&] {
    if (first_token_told) return;
    first_token_told = true;
    policy.OnFirstToken(decision, *rs.fleet);
  };
  // `stream`: an SSE response, whose first byte is its first token; a whole response's first
  // byte comes once it is all generated, so it is labelled apart (and the status page's
  // per-model TTFT takes streams only).
  auto first_byte = [&](bool stream) {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - started).count();
    (stream ? rt.first_byte_stream : rt.first_byte)->Observe(seconds);
    rt.stats->first_byte.Add(now, seconds);
    metrics_->model_first_byte_seconds.WithLabels({attempt.model_label, stream ? "true" : "false"}).Observe(seconds);
    if (stream && attempt.model_stats) attempt.model_stats->first_byte.Add(now, seconds);
  };

  for (int fresh = 0; fresh < 2; ++fresh) {
    auto [cec, lease] = co_await pool.Acquire(
        rt.target, std::chrono::duration_cast<std::chrono::milliseconds>(limit(t.connect)), fresh > 0);
    if (cec && IsLocalResourceError(cec)) {
      // This process is out of descriptors, buffers or ports: no instance is to blame, and
      // another would fail the same way.
      metrics_->local_errors.WithLabels({"upstream"}).Inc();
      attempt.error = "the gateway is out of local resources (" + cec.message() + "); retry later";
      attempt.error_status = 503;
      attempt.kind = "local";
      co_return kFail;
    }
    if (cec) {
      error("connect", "connect to " + rt.target.host_header + " failed: " +
                           (lease.error.empty() ? cec.message() : lease.error), 502);
      if (!lease.error.empty()) {  // TLS: say why here, even when a retry then succeeds
        LogEvent(spdlog::level::warn, "upstream TLS connect failed",
                 {{"instance", name}, {"error", lease.error}, {"request_id", RequestIdOf(req)}});
      }
      ReportConnectFailure(rs, index);
      co_return kRetry;
    }
    auto& stream = *lease.stream;

    // The request goes upstream unchanged but for hop-by-hop headers (and the instance's own
    // credentials, when it has some, in place of the client's Authorization).
    const bool own_credentials = !rt.target.authorization.empty();
    bhttp::request<bhttp::span_body<const char>> up{req.method(), rt.target.base_path + std::string(req.target()), 11};
    for (const auto& f : req) {
      if (http::IsHopByHopHeader(f.name_string()) || NamedByConnection(req, f.name_string()) ||
          f.name() == bhttp::field::host ||
          f.name() == bhttp::field::content_length || f.name() == bhttp::field::expect ||
          (own_credentials && f.name() == bhttp::field::authorization)) {
        continue;
      }
      up.insert(f.name_string(), f.value());
    }
    up.set(bhttp::field::host, rt.target.host_header);
    if (own_credentials) rt.target.authorization.SetHeaderOn(up, "Authorization");
    up.body() = boost::span<const char>(req.body().data(), req.body().size());
    up.keep_alive(true);
    up.prepare_payload();
    stream.tcp().expires_after(first_byte_wait());
    auto [wec, wn] = co_await stream.On([&](auto& s) { return bhttp::async_write(s, up, http::kTuple); });
    if (wec) {
      if (lease.reused) continue;  // the instance closed an idle connection: try a fresh one
      error("reset", "sending the request failed: " + wec.message(), 502);
      co_return kRetry;
    }
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.body_limit(boost::none);
    // Wait for the response head, or for the client to go away (then abandoning the lease
    // closes the upstream connection, which aborts the request on the instance).
    auto head_or_gone =
        co_await (stream.On([&](auto& s) { return bhttp::async_read_header(s, buffer, parser, http::kTuple); }) ||
                  ex.WaitClientGone() || WaitEjected(rs, index, watch_ejection));
    if (head_or_gone.index() == 1) {
      metrics_->client_disconnects.WithLabels({"waiting"}).Inc();
      co_return kDone;
    }
    if (head_or_gone.index() == 2) co_return ejected();
    auto [hec, hn] = std::get<0>(head_or_gone);
    if (hec) {
      if (hec == beast::error::timeout) co_return first_byte_timeout();
      if (lease.reused && (hec == bhttp::error::end_of_stream || hec == net::error::connection_reset ||
                           hec == net::error::eof || hec == net::ssl::error::stream_truncated)) {
        continue;
      }
      error("reset", "the connection failed before a response: " + hec.message(), 502);
      co_return kRetry;
    }
    rt.consecutive_failures.store(0, std::memory_order_relaxed);
    const int status = parser.get().result_int();
    // 500, 502 and 503 say the instance is done with the request without serving it (broken,
    // or its own upstream failed, or overloaded): nothing reached the client yet, so another
    // instance may serve it. A 504 is not retried, like our own first-byte timeout: the work
    // may still be running behind it.
    if ((status == 500 || status == 502 || status == 503) && !last_attempt) {
      error("status_" + std::to_string(status), "answered " + std::to_string(status), status);
      co_return kRetry;  // the connection is dropped with the lease
    }

    // Response head to the client.
    bhttp::response_header<> head;
    head.result(parser.get().result_int());
    head.reason(parser.get().reason());
    for (const auto& f : parser.get()) {
      if (http::IsHopByHopHeader(f.name_string()) || NamedByConnection(parser.get(), f.name_string())) continue;
      head.insert(f.name_string(), f.value());
    }
    if (config_.decision_headers) {
      head.set(kInstanceHeader, name);
      head.set(kDecisionHeader, DecisionKindName(decision.kind));
      head.set(kRankHeader, std::to_string(decision.rank));
    }
    const bool sse = IsSse(head);
    // Token accounting: the usage of a successful generation, read as the body streams past
    // (api/response_usage.h: no allocation, no copy), counted once the response has ended.
    api::UsageScanner usage(sse ? api::UsageScanner::Framing::kSse : api::UsageScanner::Framing::kJson);
    const bool scan_usage = attempt.count_usage && status >= 200 && status < 300;
    bool usage_counted = false;
    auto count_usage = [&] {
      if (!scan_usage || usage_counted) return;
      usage_counted = true;
      const api::ResponseUsage& u = usage.usage();
      rt.stats->tokens.Add(u);
      if (attempt.model_stats) attempt.model_stats->tokens.Add(u);
      metrics_->usage_responses.WithLabels({name, attempt.model_label, attempt.client, u.present ? "true" : "false"})
          .Inc();
      if (!u.present) return;
      const uint32_t cached = std::min(u.cached_tokens, u.prompt_tokens);
      metrics_->prompt_tokens.WithLabels({name, attempt.model_label, attempt.client, "true"}).Inc(cached);
      metrics_->prompt_tokens.WithLabels({name, attempt.model_label, attempt.client, "false"})
          .Inc(u.prompt_tokens - cached);
      metrics_->completion_tokens.WithLabels({name, attempt.model_label, attempt.client}).Inc(u.completion_tokens);
    };
    if (parser.is_done()) {
      metrics_->responses.WithLabels({std::to_string(status), "upstream"}).Inc();
      // No body (204, 304, or an empty one).
      first_token();
      http::StringResponse res{std::move(head)};
      const bool upstream_keep = parser.get().keep_alive();
      count_usage();  // before the client has the answer: a scrape after it includes it
      co_await ex.Send(std::move(res));
      first_byte(sse);
      rt.duration->Observe(SecondsSince(ex.received_at()));
      if (upstream_keep) pool.Release(std::move(lease));
      co_return kDone;
    }
    // Body: relay each piece as soon as it arrives. The head is held back until the first body
    // byte (or the end of the body): an instance that dies between its head and its first token
    // (during prefill, say) has then sent the client nothing, and the request can still go to
    // another instance.
    std::array<char, kRelayBufferBytes> buf;
    bool first = true;
    bool head_sent = false;
    auto send_head = [&]() -> net::awaitable<bool> {
      head_sent = true;
      metrics_->responses.WithLabels({std::to_string(status), "upstream"}).Inc();
      co_return co_await ex.SendHead(std::move(head));
    };
    while (!parser.is_done()) {
      parser.get().body().data = buf.data();
      parser.get().body().size = buf.size();
      stream.tcp().expires_after(first ? first_byte_wait() : limit(t.idle));
      auto piece_or_gone =
          co_await (stream.On([&](auto& s) { return bhttp::async_read_some(s, buffer, parser, http::kTuple); }) ||
                    ex.WaitClientGone() || WaitEjected(rs, index, watch_ejection && !head_sent));
      if (piece_or_gone.index() == 1) {  // client gone: drop the upstream
        metrics_->client_disconnects.WithLabels({head_sent ? "streaming" : "waiting"}).Inc();
        co_return kDone;
      }
      if (piece_or_gone.index() == 2) co_return ejected();  // nothing reached the client yet
      auto [rec, rn] = std::get<0>(piece_or_gone);
      const size_t got = buf.size() - parser.get().body().size;
      if (rec == bhttp::error::need_buffer) rec = {};
      if (rec && got == 0 && !head_sent) {  // nothing reached the client yet
        if (rec == beast::error::timeout) co_return first_byte_timeout();
        error("broken_stream", "the response broke off before its first byte: " + rec.message(), 502);
        co_return kRetry;
      }
      if (!head_sent && !co_await send_head()) {
        metrics_->client_disconnects.WithLabels({"waiting"}).Inc();
        co_return kDone;  // client gone: drop upstream
      }
      if (got > 0) {
        if (first) {
          first_byte(sse);
          first = false;
          if (sse) first_token();  // a stream's first token is its first byte
        }
        if (scan_usage) usage.Feed(std::string_view(buf.data(), got));
        // Counted before the last piece goes out: a client that has read its whole answer and
        // then scrapes /metrics finds it counted.
        if (parser.is_done() && !rec) count_usage();
        if (!co_await ex.SendBody(net::buffer(buf.data(), got))) {
          metrics_->client_disconnects.WithLabels({"streaming"}).Inc();
          // The client went away: abandoning the lease closes the upstream connection, which
          // aborts the request on the instance.
          co_return kDone;
        }
      }
      if (rec) {
        const bool timeout = rec == beast::error::timeout;
        error(timeout ? "timeout" : "broken_stream",
              timeout ? fmt::format("the response stalled for over {} s", t.idle)
                      : "the response broke off: " + rec.message(),
              502);
        LogEvent(spdlog::level::warn, "stream broke after it started",
                 {{"instance", name}, {"model", attempt.model}, {"error", attempt.error},
                  {"request_id", RequestIdOf(req)}});
        if (sse) {
          std::string event = "data: {\"error\":{\"message\":" + JsonString(attempt.error) +
                              ",\"type\":\"server_error\",\"code\":\"upstream_stream_broken\"}}\n\n";
          co_await ex.SendBody(net::buffer(event));
          co_await ex.Finish();
        }
        // Other bodies end without their terminating chunk (or short of Content-Length):
        // closing the connection makes the truncation visible to the client.
        ex.CloseAfter();
        co_return kDone;
      }
    }
    first_token();  // the whole response has arrived (a stream told it at its first byte)
    count_usage();  // (already, unless the body ended with an empty read)
    if (!head_sent && !co_await send_head()) co_return kDone;  // a body that ended empty
    co_await ex.Finish();
    rt.duration->Observe(SecondsSince(ex.received_at()));
    if (parser.get().keep_alive()) pool.Release(std::move(lease));
    co_return kDone;
  }
  error("reset", "the connection failed twice before a response", 502);
  co_return kRetry;
}

// ------------------------------------------------------------------------------------ health

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

// The status page's request series: one sample every RequestSeries::kInterval.
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

// ------------------------------------------------------------------------------ local routes

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
    std::string body = "{\"model\":" + JsonString(*only) + ",\"status\":" +
                       (up ? "\"ok\"" : "\"unavailable\"") + ",\"available\":" + std::to_string(up) +
                       ",\"instances\":" + std::to_string(list.size()) + "}";
    co_await ex.Send(JsonResponse(up ? 200 : 503, std::move(body)));
    co_return;
  }
  const uint32_t up_all = available_in(f.Eligible(""));
  std::string body = "{\"status\":";
  body += up_all ? "\"ok\"" : "\"unavailable\"";
  body += ",\"models\":{";
  bool first = true;
  for (const auto& name : f.ServedNames()) {
    auto list = f.Eligible(name);
    if (!first) body += ',';
    first = false;
    body += JsonString(name) + ":{\"available\":" + std::to_string(available_in(list)) +
            ",\"instances\":" + std::to_string(list.size()) + "}";
  }
  body += "},\"instances\":{";
  for (uint32_t i = 0; i < f.size(); ++i) {
    if (i) body += ',';
    const auto& st = f.state(i);
    body += JsonString(f.spec(i).name) + ":" +
            (st.drained.load() ? "\"drained\"" : st.available.load() ? "\"up\"" : "\"ejected\"");
  }
  body += "}}";
  co_await ex.Send(JsonResponse(up_all ? 200 : 503, std::move(body)));
}

// Every served name once. A discovered name carries its engine's entry as the engine sent it
// (max_model_len, parent, root, ...): from the first instance, in configuration order, whose
// /v1/models lists it, so that the answer does not change with the order polls complete in. A
// name known from configuration only gets a synthesized entry. Each entry adds `instances`: the
// instances a request naming it may go to (those serving every name included).
net::awaitable<void> Gateway::HandleModels(http::Exchange& ex) {
  co_await AwaitFirstDiscovery();
  auto rs = routing_.load();
  const FleetSnapshot& f = *rs->fleet;
  std::string body = "{\"object\":\"list\",\"data\":[";
  bool first = true;
  for (const auto& name : f.ServedNames()) {
    std::string instances = "[";
    const std::string* entry = nullptr;
    for (uint32_t i : f.Eligible(name)) {  // index order: configuration order
      if (instances.size() > 1) instances += ',';
      instances += JsonString(f.spec(i).name);
      if (const auto& entries = rs->discovery[i].entries; entries && entry == nullptr) {
        if (auto it = entries->find(name); it != entries->end()) entry = &it->second;
      }
    }
    instances += ']';
    if (!first) body += ',';
    first = false;
    if (entry != nullptr) {
      body.append(*entry, 0, entry->size() - 1);  // the engine's object without its closing brace
    } else {
      body += "{\"id\":" + JsonString(name) + ",\"object\":\"model\",\"created\":0,\"owned_by\":\"prefix-router\"";
    }
    body += ",\"instances\":" + instances + "}";
  }
  body += "]}";
  co_await ex.Send(JsonResponse(200, std::move(body)));
}

http::StringResponse Gateway::MetricsResponse() const {
  http::StringResponse res{bhttp::status::ok, 11};
  res.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.body() = registry_.Render();
  return res;
}

net::awaitable<void> Gateway::HandleMetrics(http::Exchange& ex) { co_await ex.Send(MetricsResponse()); }

}  // namespace prefix_router::gateway
