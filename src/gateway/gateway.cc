// The gateway's front (gateway.h): creation and start, the route table, client keys and
// tenant admission. The rest lives along its seams (gateway_internal.h lists the files).
#include "gateway/gateway.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <set>

#include "api/error.h"
#include "api/trace_context.h"
#include "base/json_text.h"
#include "gateway/background.h"
#include "gateway/connection_limit.h"
#include "gateway/gateway_internal.h"
#include "gateway/log.h"
#include "http/tls.h"

namespace prefix_router::gateway {

namespace {

using namespace gateway_internal;

// x-request-id and Trace Context (api/trace_context.h). The request is edited in place, so
// that the instance receives the id the client is answered with and no invalid traceparent.
void Correlate(http::Exchange& ex) {
  http::Request& req = ex.request();
  auto id = HeaderValue(req, api::kRequestIdHeader);
  if (!id || req.count(api::kRequestIdHeader) != 1 || !api::IsValidRequestId(*id)) {
    thread_local Rng rng(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32));
    std::array<char, api::kRequestIdLength> text;
    req.set(api::kRequestIdHeader, api::FormatRequestId(rng.Next(), rng.Next(), text));
    id = HeaderValue(req, api::kRequestIdHeader);
  }
  ex.SetResponseHeader(api::kRequestIdHeader, std::string(*id));
  if (const size_t n = req.count(api::kTraceparentHeader);
      n > 1 || (n == 1 && !api::TraceIdOf(*HeaderValue(req, api::kTraceparentHeader)))) {
    req.erase(api::kTraceparentHeader);
    req.erase(api::kTracestateHeader);
  }
}

// The routes of Handle; any other path is unknown (config unknown_path_status), a known one
// with another method is 405.
bool IsKnownPath(std::string_view path) {
  static constexpr std::string_view kPaths[] = {
      "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/tokenize",
      "/detokenize",          "/invocations",    "/health",       "/v1/models",     "/metrics"};
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

}  // namespace

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
  for (auto& a : attachments_) a->Shutdown();
  attachments_.clear();
  if (server_) server_->Stop(std::chrono::milliseconds(0));
}

Result<std::unique_ptr<Gateway>> Gateway::Create(GatewayConfig config, std::shared_ptr<Resolver> resolver,
                                                 RateLimiter::Now rate_limit_clock) {
  std::unique_ptr<Gateway> g(new Gateway(std::move(config), std::move(rate_limit_clock)));
  const GatewayConfig& c = g->config_;
  g->metrics_ = std::make_unique<Metrics>(g->registry_);
  g->registry_.SetSeriesLimit(metrics::kDefaultMaxSeries, &g->metrics_->metric_series_overflow);
  g->tokenize_requests_ =
      &g->registry_.AddCounter("prefix_router_tokenize_requests_total",
                               "POST /tokenize asked of instances for kv-aware prompt tokens (tokenizer: engine), by "
                               "instance and outcome (ok; failed: the request routed without tokens)",
                               {"instance", "outcome"});
  g->tokenize_seconds_ = &g->registry_.AddHistogram(
      "prefix_router_tokenize_seconds", "Time to a /tokenize answer (or its failure), before the routing decision", {},
      {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1});
  g->resolver_ = resolver                         ? std::move(resolver)
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

  // discovery.kubernetes: one list before the gateway starts, like the resolution above (a
  // failure is logged, and the watcher keeps trying once started).
  if (c.discovery.kubernetes.enabled) {
    g->kubernetes_errors_ = &g->registry_.AddCounter(
        "prefix_router_kubernetes_watch_errors_total",
        "Failed list and watch requests of discovery.kubernetes, by reason (list, watch, gone: 410 relist, "
        "invalid); the instances stay meanwhile",
        {"reason"});
    KubernetesWatcherOptions options;
    options.config = c.discovery.kubernetes;
    options.connect_timeout = Ms(c.timeouts.connect);
    g->kubernetes_ = std::make_shared<KubernetesWatcher>(std::move(options), g->kubernetes_errors_);
    net::io_context ctx;
    SpawnBackground(ctx.get_executor(), "kubernetes",
                    [](KubernetesWatcher& w) -> net::awaitable<void> { (void)co_await w.Sync(); }(*g->kubernetes_),
                    g->metrics_->background_failures.WithLabels({"kubernetes"}));
    ctx.run();
    g->KubernetesRound(/*apply=*/false);
  }

  const GatewayConfig effective = g->EffectiveLocked(g->running_);
  auto rs = g->BuildRouting(effective, nullptr, nullptr);
  if (!rs.ok()) return rs.status();
  g->routing_.store(*rs);
  KvSubscriberOptions kv_options;
  kv_options.silence_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.timeouts.kv_events_silence * 1000));
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
    const auto queue_gauges = [&](const std::string& name, const PoolFlow& flow) {
      const PoolFlow::Snapshot f = flow.TakeSnapshot(0);
      self->metrics_->queue_length.WithLabels({name}).Set(static_cast<double>(f.queued));
      if (f.options.max_in_flight_per_tenant > 0) {
        self->metrics_->queue_tenants_at_bound.WithLabels({name}).Set(static_cast<double>(f.tenants_at_bound));
      }
    };
    if (state->default_pool.flow) queue_gauges("default", *state->default_pool.flow);
    for (const auto& [name, pool] : state->pools) {
      if (pool.flow) queue_gauges(name, *pool.flow);
    }
    // The server keeps its own counts (the HTTP layer knows no metrics); the counter catches
    // up with them here, and only here, so the difference is never negative.
    if (self->server_) {
      self->metrics_->client_connections.WithLabels({}).Set(static_cast<double>(self->server_->open_connections()));
      const auto catch_up = [](metrics::Family<metrics::Counter>& family, int64_t count) {
        metrics::Counter& counter = family.WithLabels({});
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
  so.listen = !c.listen.empty();  // empty: the endpoint picker alone (config validation)
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
             {{"max_connections", plan.limit},
              {"rule", "auto: (descriptors - reserve) / 2"},
              {"descriptors", fds.soft},
              {"reserve", plan.reserve},
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
                                            : std::find(ic.models.begin(), ic.models.end(), name) != ic.models.end();
      if (serves && std::find(src.policies.begin(), src.policies.end(), pool.policy) == src.policies.end()) {
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
  if (kubernetes_) {
    kubernetes_->SetOnChange([this] { RequestDiscovery(); });
    SpawnLoop(server_->context(0), "kubernetes", KubernetesWatcher::Run(kubernetes_));
  }
  SpawnLoop(server_->context(0), "engine_metrics", EngineMetricsLoop());
  started_.store(true, std::memory_order_release);
  spdlog::info("prefix-router listening on {}:{} with {} instances, {} I/O threads", config_.listen_host,
               server_->port(), routing_.load()->fleet->size(), server_->thread_count());
  return Status::Ok();
}

void Gateway::SpawnLoop(net::io_context& ctx, std::string_view task, net::awaitable<void> loop) {
  SpawnBackground(ctx.get_executor(), task, std::move(loop), metrics_->background_failures.WithLabels({task}));
}

void Gateway::Stop() {
  for (auto& a : attachments_) a->Shutdown();
  discovery_stop_.store(true);
  if (kubernetes_) kubernetes_->Stop();
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
    co_await HandleRouted(ex, api::ApiKind::kChatCompletions, record);
  } else if (method == bhttp::verb::post && path == "/v1/completions") {
    co_await HandleRouted(ex, api::ApiKind::kCompletions, record);
  } else if (method == bhttp::verb::post && path == "/v1/responses") {
    co_await HandleRouted(ex, api::ApiKind::kResponses, record);
  } else if (method == bhttp::verb::post && path == "/v1/embeddings") {
    co_await HandleRouted(ex, api::ApiKind::kEmbeddings, record);
  } else if (method == bhttp::verb::post && path == "/tokenize") {
    co_await HandleRouted(ex, api::ApiKind::kTokenize, record);
  } else if (method == bhttp::verb::post && path == "/detokenize") {
    co_await HandleRouted(ex, api::ApiKind::kDetokenize, record);
  } else if (method == bhttp::verb::post && path == "/invocations") {
    co_await HandleRouted(ex, api::ApiKind::kNative, record);
  } else if (method == bhttp::verb::get && path == "/health") {
    co_await HandleHealth(ex);
  } else if (method == bhttp::verb::get && path == "/v1/models") {
    co_await HandleModels(ex);
  } else if (method == bhttp::verb::get && path == "/metrics" && metrics_here) {
    co_await HandleMetrics(ex);
  } else if (IsKnownPath(path) && (metrics_here || path != "/metrics")) {
    origin_status = 405;
    co_await ex.SendError(405,
                          "method " + std::string(req.method_string()) + " is not allowed on " + std::string(path));
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
  co_await ex.SendError(401,
                        presented
                            ? "Incorrect API key provided. Send a valid key as `Authorization: Bearer YOUR_KEY`."
                            : "You didn't provide an API key. You need to provide your API key in an Authorization "
                              "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                        "invalid_api_key");
  co_return false;
}

std::optional<Gateway::Refusal> Gateway::AdmitTenant(size_t body_bytes, std::string_view tenant,
                                                     const std::string& model, Headers& headers) {
  const uint64_t tokens = api::EstimatePromptTokens(body_bytes);
  const RateLimiter::Decision d = limiter_->Admit(tenant, tokens);
  // OpenAI's headers, on every answer to a limited tenant (also the instance's, streamed or not).
  if (d.limit_requests > 0) {
    headers.emplace_back("x-ratelimit-limit-requests", std::to_string(d.limit_requests));
    headers.emplace_back("x-ratelimit-remaining-requests", std::to_string(d.remaining_requests));
  }
  if (d.limit_tokens > 0) {
    headers.emplace_back("x-ratelimit-limit-tokens", std::to_string(d.limit_tokens));
    headers.emplace_back("x-ratelimit-remaining-tokens", std::to_string(d.remaining_tokens));
  }
  if (d.admitted()) return std::nullopt;
  std::string reason;
  std::string message;
  int status = 429;
  std::string code = "rate_limit_exceeded";
  switch (d.verdict) {
    case RateLimiter::Verdict::kRequests:
      reason = "tenant_requests";
      message = fmt::format(
          "Rate limit reached for tenant '{}' on requests per minute: limit {}. "
          "Please try again in {}s.",
          tenant, d.limit_requests, d.retry_after_seconds);
      break;
    case RateLimiter::Verdict::kTokens:
      reason = "tenant_tokens";
      message = fmt::format(
          "Rate limit reached for tenant '{}' on prompt tokens per minute: limit {}, "
          "remaining {}, requested ~{} (estimated as body bytes / 4). Please try "
          "again in {}s.",
          tenant, d.limit_tokens, d.remaining_tokens, tokens, d.retry_after_seconds);
      break;
    default:  // kTooLarge: waiting cannot help, so not a 429 that clients would retry
      reason = "tenant_request_too_large";
      status = 413;
      code = "request_too_large";
      message = fmt::format(
          "Request too large for tenant '{}' on prompt tokens per minute: ~{} "
          "estimated prompt tokens (body bytes / 4) exceed the tenant's token burst "
          "of {}, so it can never be admitted. Shorten the prompt.",
          tenant, tokens, d.token_burst);
      break;
  }
  metrics_->rejected_requests.WithLabels({model, reason}).Inc();
  metrics_->responses.WithLabels({std::to_string(status), "gateway"}).Inc();
  Refusal r{status, std::move(message), std::move(code), headers};
  if (status == 429) r.headers.emplace_back("Retry-After", std::to_string(d.retry_after_seconds));
  return r;
}

}  // namespace prefix_router::gateway
