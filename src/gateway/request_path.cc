// The gateway's request path (gateway.h's class comment): a routed request is parsed into
// routing values, admitted (tenant rate limits, the pool's ceiling), and dispatched: the pool's
// Policy picks an instance, Forward relays the exchange, and a retryable failure moves down the
// preference order. HandleRouted reads as those steps; Forward as connect, send, wait for the
// head, relay the body.
#include <spdlog/spdlog.h>

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
#include <random>
#include <span>
#include <thread>
#include <variant>

#include "api/native_request.h"
#include "api/openai_request.h"
#include "api/response_usage.h"
#include "core/block_chain.h"
#include "gateway/gateway_internal.h"
#include "gateway/log.h"
#include "gateway/prompt_tokens.h"

namespace prefix_router::gateway {
namespace {

using namespace gateway_internal;

constexpr std::string_view kInstanceHeader = "x-prefix-router-instance";
constexpr std::string_view kDecisionHeader = "x-prefix-router-decision";
constexpr std::string_view kRankHeader = "x-prefix-router-rank";
// Flow control: the request's priority band, and its fairness key without client keys.
constexpr std::string_view kPriorityHeader = "x-prefix-router-priority";
// The Gateway API Inference Extension's name for a request's objective (routing.flow_control.objectives).
constexpr std::string_view kObjectiveHeader = "x-gateway-inference-objective";
constexpr std::string_view kFairnessHeader = "x-gateway-inference-fairness-id";
// A request's time-to-first-token objective in milliseconds, as the Gateway API Inference
// Extension's SLO-aware routing reads it: its deadline in the queue (core/flow_queue.h).
constexpr std::string_view kTtftObjectiveHeader = "x-slo-ttft-ms";

// A per-thread generator for the random strategies, seeded once per thread.
Rng& ThreadRng() {
  thread_local Rng rng(std::random_device{}() ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
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

// Exchange::WatchClient for as long as this lives. The callback captures locals of the scope
// that watches, so the watch ends with that scope however it ends: a co_return, or the coroutine
// destroyed mid-wait at shutdown.
class ClientWatch {
 public:
  ClientWatch(http::Exchange& ex, std::function<void()> on_gone) : ex_(ex) { ex_.WatchClient(std::move(on_gone)); }
  ~ClientWatch() { ex_.StopWatchingClient(); }
  ClientWatch(const ClientWatch&) = delete;
  ClientWatch& operator=(const ClientWatch&) = delete;

 private:
  http::Exchange& ex_;
};

bool IsSse(const bhttp::response_header<>& head) {
  auto it = head.find(bhttp::field::content_type);
  return it != head.end() && beast::iequals(it->value().substr(0, 17), "text/event-stream");
}

// Step 1 of a routed request: its bytes as routing values, keyed for its pool. Does not
// suspend; the result views into this thread's parser.
Result<api::ParsedRequest> ParseForRouting(api::ApiKind api_kind, const http::Request& req, const RoutingState& rs) {
  const std::string& body = req.body();
  if (api_kind == api::ApiKind::kNative) {
    const std::optional<std::string_view> component = HeaderValue(req, api::kInferenceComponentHeader);
    const Pool& pool = rs.PoolFor(component.value_or(""));
    return api::ParseNative(body, api::KeyedLength(pool.options), HeaderValue(req, api::kRoutingGroupHeader), component,
                            pool.normaliser.get(),
                            UsesBlockChain(pool.options.strategy) ? &ThreadKeyedText() : nullptr);
  }
  // The pool (and so prefix_length) depends on the model, which is in the body: parse with
  // the largest prefix length in use, then cut to the pool's own if it is shorter.
  // A cache-aware pool keys its whole block chain's worth of text and needs the text itself:
  // it always parses again below, so the first parse keys only prefix_length.
  uint32_t max_len = rs.default_pool.options.prefix_length;
  for (const auto& [name, pool] : rs.pools) max_len = std::max(max_len, pool.options.prefix_length);
  Result<api::ParsedRequest> parsed = ThreadParser().Parse(api_kind, body, max_len);
  if (parsed.ok() && api::HasPrefixKey(api_kind)) {
    const Pool& pool = rs.PoolFor(parsed->served_name);
    const bool patterns = pool.normaliser && pool.normaliser->has_patterns();
    const bool chained = UsesBlockChain(pool.options.strategy);
    if (api::KeyedLength(pool.options) != max_len || patterns || chained) {
      parsed = ThreadParser().Parse(api_kind, body, api::KeyedLength(pool.options), false,
                                    chained ? &ThreadKeyedText() : nullptr, pool.normaliser.get());
    }
  }
  return parsed;
}

// The upstream copy of the client's request head, in wire form, appended to `out`: unchanged
// but for hop-by-hop headers (and the instance's own credentials, when it has some, in place of
// the client's Authorization), with the instance's Host and the body's length. Written straight
// into one buffer: no header container is built, and the head and the body leave in one write.
void AppendUpstreamHead(std::string& out, const http::Request& req, const UpstreamTarget& target) {
  const bool own_credentials = !target.authorization.empty();
  const bool has_connection = req.count(bhttp::field::connection) > 0;
  const auto method = req.method_string();
  out.append(method.data(), method.size());
  out.push_back(' ');
  out.append(target.base_path);
  const auto path = req.target();
  out.append(path.data(), path.size());
  out.append(" HTTP/1.1\r\n");
  for (const auto& f : req) {
    const auto field = f.name();
    if (field == bhttp::field::host || field == bhttp::field::content_length || field == bhttp::field::expect ||
        (own_credentials && field == bhttp::field::authorization) || http::IsHopByHopHeader(f.name_string()) ||
        (has_connection && http::NamedByConnection(req, f.name_string()))) {
      continue;
    }
    const auto name = f.name_string();
    const auto value = f.value();
    out.append(name.data(), name.size());
    out.append(": ");
    out.append(value.data(), value.size());
    out.append("\r\n");
  }
  out.append("Host: ");
  out.append(target.host_header);
  out.append("\r\n");
  if (own_credentials) target.authorization.AppendHeaderLine(out, "Authorization");
  // As Beast's prepare_payload: a length for any body, and for an empty one where the method
  // implies a body.
  const size_t length = req.body().size();
  const auto verb = req.method();
  if (length > 0 || verb == bhttp::verb::post || verb == bhttp::verb::put || verb == bhttp::verb::options) {
    fmt::format_to(std::back_inserter(out), "Content-Length: {}\r\n", length);
  }
  out.append("\r\n");
}

// The instance's response-head fields the client does not get: hop-by-hop ones and those its
// Connection header names.
bool NotRelayed(const bhttp::response_header<>& upstream, std::string_view name) {
  return http::IsHopByHopHeader(name) || http::NamedByConnection(upstream, name);
}

// What the client's head adds to the instance's: the decision headers when configured (views
// into `decision` and `rank`, a buffer of the caller's).
struct DecisionFields {
  std::array<std::pair<std::string_view, std::string_view>, 3> fields;
  size_t size = 0;
  std::span<const std::pair<std::string_view, std::string_view>> view() const { return {fields.data(), size}; }
};
DecisionFields DecisionHeaderFields(bool decision_headers, std::string_view instance, const Decision& decision,
                                    std::array<char, 16>& rank) {
  DecisionFields out;
  if (!decision_headers) return out;
  const auto end = std::to_chars(rank.data(), rank.data() + rank.size(), decision.rank).ptr;
  out.fields = {{{kInstanceHeader, instance},
                 {kDecisionHeader, DecisionKindName(decision.kind)},
                 {kRankHeader, std::string_view(rank.data(), static_cast<size_t>(end - rank.data()))}}};
  out.size = 3;
  return out;
}

// The client's copy of the instance's response head (for a response without a body; one with a
// body is written from the instance's head where it is: Exchange::SendHeadFrom).
bhttp::response_header<> ClientHead(const bhttp::response<bhttp::buffer_body>& upstream,
                                    std::span<const std::pair<std::string_view, std::string_view>> extra) {
  bhttp::response_header<> head;
  head.result(upstream.result_int());
  head.reason(upstream.reason());
  for (const auto& f : upstream) {
    if (NotRelayed(upstream, f.name_string())) continue;
    head.insert(f.name_string(), f.value());
  }
  for (const auto& [name, value] : extra) head.set(name, value);
  return head;
}

// Sends the client the instance's response that has no body (204, 304, or an empty one), with
// the decision headers when configured. A coroutine of its own, so that the response and the
// copied head live in its frame only while it is sent, not in Forward's for every request.
net::awaitable<bool> SendWithoutBody(http::Exchange& ex, const bhttp::response<bhttp::buffer_body>& upstream,
                                     bool decision_headers, std::string_view instance, const Decision& decision) {
  std::array<char, 16> rank_text;
  const DecisionFields fields = DecisionHeaderFields(decision_headers, instance, decision, rank_text);
  co_return co_await ex.Send(http::StringResponse{ClientHead(upstream, fields.view())});
}

// Parses what `buffer` holds into the parser's body buffer, as far as both go. Wanting more bytes
// (need_more) or more room (need_buffer) is not an error.
beast::error_code ParseBuffered(bhttp::response_parser<bhttp::buffer_body>& parser, beast::flat_buffer& buffer) {
  while (!parser.is_done() && buffer.size() > 0 && parser.get().body().size > 0) {
    beast::error_code ec;
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == bhttp::error::need_more || ec == bhttp::error::need_buffer) break;
    if (ec) return ec;
    if (used == 0) break;
  }
  return {};
}

// The last event of an SSE stream that broke after it started: OpenAI's error shape, so that
// SDKs raise it instead of ending the stream as if it were complete.
std::string BrokenStreamEvent(std::string_view error) {
  boost::json::object detail;
  detail["message"] = error;
  detail["type"] = "server_error";
  detail["code"] = "upstream_stream_broken";
  boost::json::object event;
  event["error"] = std::move(detail);
  return "data: " + boost::json::serialize(event) + "\n\n";
}

// The deadlines of one attempt: timeouts.total from the request's arrival, first_byte and idle
// per wait, and timeouts.per_try_first_byte from the attempt's dispatch (connect included).
class AttemptDeadlines {
 public:
  AttemptDeadlines(const TimeoutsConfig& t, Clock::time_point received, Clock::time_point started)
      : t_(t),
        total_(t.total > 0 ? received + Ms(t.total) : Clock::time_point::max()),
        per_try_(t.per_try_first_byte > 0
                     ? started + std::chrono::duration_cast<Clock::duration>(Ms(t.per_try_first_byte))
                     : Clock::time_point::max()) {}

  // `seconds`, cut at the total deadline; at least 1 ms.
  Clock::duration Limit(double seconds) const {
    auto d = std::chrono::duration_cast<Clock::duration>(Ms(seconds));
    if (total_ != Clock::time_point::max()) d = std::min(d, total_ - Clock::now());
    return std::max(d, Clock::duration(std::chrono::milliseconds(1)));
  }
  // The wait for the first response byte: first_byte (and total), cut at the per-try deadline;
  // per_try_binds() then says the per-try deadline is the one that binds.
  Clock::duration FirstByteWait() {
    Clock::duration d = Limit(t_.first_byte);
    per_try_binds_ = false;
    if (per_try_ != Clock::time_point::max()) {
      const Clock::duration left = per_try_ - Clock::now();
      if (left <= d) {
        d = std::max(left, Clock::duration(std::chrono::milliseconds(1)));
        per_try_binds_ = true;
      }
    }
    return d;
  }
  bool per_try_binds() const { return per_try_binds_; }

 private:
  const TimeoutsConfig& t_;
  const Clock::time_point total_;
  const Clock::time_point per_try_;
  bool per_try_binds_ = false;
};

}  // namespace

// ------------------------------------------------------------------------------ HandleRouted

std::variant<Gateway::Admission, Gateway::Refusal> Gateway::Admit(api::ApiKind api_kind, const http::Request& req,
                                                                  std::string_view tenant_key, std::string* model,
                                                                  const net::any_io_executor* wait_on) {
  auto rs = routing_.load();
  const std::string& body = req.body();
  auto refuse = [&](int status, std::string message, std::string code) {
    metrics_->responses.WithLabels({std::to_string(status), "gateway"}).Inc();
    return Refusal{status, std::move(message), std::move(code), {}};
  };

  // 1. Bytes -> routing values.
  Result<api::ParsedRequest> parsed = ParseForRouting(api_kind, req, *rs);
  if (!parsed.ok()) {
    api::ApiError e = api::ErrorFromStatus(parsed.status());
    return refuse(e.http_status, std::move(e.message), "");
  }
  const api::ParsedRequest& p = *parsed;
  if (model) *model = std::string(p.served_name);  // the access log names the model, found or not
  if (rs->fleet->Eligible(p.served_name).empty()) {
    const std::string name(p.served_name);
    return api_kind == api::ApiKind::kNative
               ? refuse(404, "no instance serves inference component '" + name + "'", "model_not_found")
               : refuse(404, "The model `" + name + "` does not exist.", "model_not_found");
  }

  // 2. What the pool's policy routes by (block chain, prompt tokens), and the policy itself.
  const Pool& pool = rs->PoolFor(p.served_name);
  Admission a;
  Dispatch& d = a.d;
  d.served_name = std::string(p.served_name);
  d.key = p.key;
  d.work_tokens = api::EstimatePromptTokens(body.size());
  // cache-aware: the keyed text's block chain (owned here: retries route by it after awaits).
  if (UsesBlockChain(pool.options.strategy) && api::HasPrefixKey(api_kind)) {
    d.chain = BuildBlockChain(ThreadKeyedText(), pool.options.cache_aware.block_bytes,
                              pool.options.cache_aware.max_blocks, BlockChainSeed(p.served_name, p.routing_group));
  }
  // kv-aware: the prompt's tokens as the engines tokenize it (gateway/prompt_tokens.h); a body
  // the engine tokenizer refuses routes without them (the engine answers its error).
  a.engine_tokens = WantsPromptTokens(pool.options) && pool.options.tokenizer == TokenizerSource::kEngine;
  if (WantsPromptTokens(pool.options) && !a.engine_tokens) {
    if (auto t = EnginePromptTokens(api_kind, body); t.ok()) d.prompt_tokens = std::move(*t);
  }
  d.policy = !api::HasPrefixKey(api_kind) && pool.options.strategy == Strategy::kPrefixAware
                 ? &UnkeyedPolicy(pool.options.load_measure)
                 : pool.policy.get();
  if (pool.options.flow_control.saturation == FlowSaturation::kInFlight) {
    d.full_at = pool.options.concurrency_threshold;
  }
  a.model_label = std::string(rs->ModelLabel(p.served_name));
  a.count_usage = api::HasPrefixKey(api_kind);  // generations: their usage is counted

  // 3. Admission: tenant rate limits, then the pool's ceiling, before any instance.
  if (limiter_->enabled()) {
    const std::string_view tenant = !tenant_key.empty()        ? tenant_key
                                    : !p.routing_group.empty() ? p.routing_group
                                                               : kAnonymousTenant;
    if (auto refusal = AdmitTenant(body.size(), tenant, a.model_label, a.headers)) return std::move(*refusal);
  }
  if (pool.flow) {  // flow control: a slot now, a place in the queue, or 429
    FlowItem item;
    if (auto header = req.find(kPriorityHeader); header != req.end()) {
      const std::string_view text = header->value();
      int32_t band = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), band);
      if (ec != std::errc() || end != text.data() + text.size() || band < kMinFlowBand || band > kMaxFlowBand) {
        return refuse(400, std::string(kPriorityHeader) + ": must be an integer from -10 to 10", "invalid_priority");
      }
      item.band = band;
    } else if (auto objective = req.find(kObjectiveHeader);
               objective != req.end() && !pool.options.flow_control.objectives.empty()) {
      // An objective the pool does not list is priority 0, as an objective-less request.
      item.band = FlowObjectiveBand(pool.options.flow_control.objectives, objective->value()).value_or(0);
    }
    // The fairness key: the client key's tenant (a header cannot claim another's), else the
    // routing group, else the fairness-id header.
    if (!tenant_key.empty()) {
      item.tenant = std::string(tenant_key);
    } else if (!p.routing_group.empty()) {
      item.tenant = std::string(p.routing_group);
    } else if (auto header = req.find(kFairnessHeader); header != req.end()) {
      item.tenant = std::string(header->value().substr(0, 256));
    }
    item.tokens = d.work_tokens;
    item.bytes = body.size();
    // Each waiter times its own wait (WaitInQueue) and nothing calls Expire; the arrival is
    // still the queue's view of the wait: the status page's oldest wait (PoolFlow::TakeSnapshot).
    item.arrival = FlowSeconds(Clock::now());
    if (auto header = req.find(kTtftObjectiveHeader); header != req.end()) {
      const std::string_view text = header->value();
      uint32_t ms = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
      if (ec != std::errc() || end != text.data() + text.size() || ms == 0 || ms > kMaxTtftObjectiveMs) {
        return refuse(400, std::string(kTtftObjectiveHeader) + ": must be an integer number of milliseconds, 1 to " +
                               std::to_string(kMaxTtftObjectiveMs), "invalid_slo");
      }
      item.deadline = item.arrival + ms / 1000.0;
    }
    a.priority = item.band;
    std::string slot_tenant = pool.flow->bounds_tenants() ? item.tenant : std::string();
    PoolFlow::Entry e = pool.flow->Enter(std::move(item), wait_on);
    const char* reason = nullptr;
    std::string why;
    switch (e.outcome) {
      case PoolFlow::Outcome::kAdmitted: a.slot = PoolSlot::FromFlow(pool.flow, std::move(slot_tenant)); break;
      case PoolFlow::Outcome::kQueued:
        a.flow = pool.flow;
        a.waiter = std::move(e.waiter);
        a.ticket = e.id;
        break;
      case PoolFlow::Outcome::kShed:
        reason = "queue_shed";
        why = "a sheddable request (priority " + std::to_string(a.priority) + ") while the pool is at its limit";
        break;
      case PoolFlow::Outcome::kFull:
        reason = "queue_full";
        why = wait_on ? "the queue is full" : "no queue in this mode";
        break;
      case PoolFlow::Outcome::kTooLarge:
        reason = "queue_bytes";
        why = "the body is larger than the queue's byte bound";
        break;
    }
    if (reason) {
      std::string limits;
      if (pool.options.max_in_flight > 0) limits = "limit " + std::to_string(pool.options.max_in_flight);
      if (pool.options.flow_control.saturation == FlowSaturation::kInFlight) {
        limits += (limits.empty() ? "" : ", or ") + std::string("every instance at its concurrency threshold of ") +
                  std::to_string(pool.options.concurrency_threshold);
      }
      if (pool.options.flow_control.max_in_flight_per_tenant > 0) {
        limits += (limits.empty() ? "" : ", or ") + std::string("the tenant's own ") +
                  std::to_string(pool.options.flow_control.max_in_flight_per_tenant) +
                  " in flight (flow_control.max_in_flight_per_tenant)";
      }
      return PoolOverloaded(a, reason, " (" + limits + ") and " + why);
    }
    a.rs = std::move(rs);
    return a;
  }
  // The slot is taken first and given back on refusal, so concurrent requests cannot overshoot.
  a.slot = PoolSlot(pool.in_flight);
  if (pool.options.max_in_flight > 0 && a.slot.admitted_before() >= pool.options.max_in_flight) {
    return PoolOverloaded(a, "pool_in_flight", " (limit " + std::to_string(pool.options.max_in_flight) + ")");
  }
  a.rs = std::move(rs);
  return a;
}

net::awaitable<void> Gateway::HandleRouted(http::Exchange& ex, api::ApiKind api_kind, RequestRecord& record) {
  co_await AwaitFirstDiscovery();
  const net::any_io_executor executor = co_await net::this_coro::executor;
  auto admitted = Admit(api_kind, ex.request(), record.tenant, &record.model, &executor);
  if (auto* refusal = std::get_if<Refusal>(&admitted)) {
    co_await SendRefusal(ex, *refusal);
    co_return;
  }
  Admission& a = std::get<Admission>(admitted);
  // The pool is at its ceiling: wait in its queue (refused there, or the client gone: done).
  if (a.waiter && !co_await WaitInQueue(ex, a)) co_return;
  for (auto& [name, value] : a.headers) ex.SetResponseHeader(name, value);
  Attempt attempt;
  attempt.model = a.d.served_name;
  attempt.model_label = a.model_label;
  attempt.client = record.tenant;
  attempt.count_usage = a.count_usage;
  attempt.model_stats = &model_stats_.For(attempt.model_label);
  // tokenizer: engine: asked once admitted (nothing of the parser's is read after this await).
  if (a.engine_tokens) {
    a.d.prompt_tokens = co_await EngineTokens(*a.rs, a.d.served_name, api_kind, ex.request().body());
  }

  // 4. Pick, forward, and on a retryable failure move down the preference order.
  co_await DispatchWithRetries(ex, *a.rs, a.d, attempt, record);
}

net::awaitable<bool> Gateway::WaitInQueue(http::Exchange& ex, Admission& a) {
  PoolFlow::Waiter& waiter = *a.waiter;
  bool client_gone = false;
  bool gone = false;
  std::optional<Refusal> refusal;
  {
    const ClientWatch watch(ex, [&client_gone, &waiter] {
      client_gone = true;
      waiter.timer.cancel();
    });
    refusal = co_await AwaitQueueSlot(a, client_gone, gone);
  }
  if (gone) co_return false;
  if (refusal) {
    co_await SendRefusal(ex, *refusal);
    co_return false;
  }
  co_return true;
}

net::awaitable<std::optional<Gateway::Refusal>> Gateway::AwaitQueueSlot(Admission& a, const bool& requester_gone,
                                                                        bool& gone) {
  PoolFlow& flow = *a.flow;
  PoolFlow::Waiter& waiter = *a.waiter;
  // Whatever ends the wait (its timer, a grant or displacement posted to this thread, the
  // requester leaving), the ticket is settled: taken out of the queue, or its slot held.
  struct Settle {  // if the coroutine is destroyed mid-wait (shutdown), the ticket still is
    PoolFlow& flow;
    const PoolFlow::Waiter& waiter;
    uint64_t ticket;
    bool done = false;
    ~Settle() {
      if (!done && flow.Leave(ticket) == PoolFlow::Waiter::State::kGranted) flow.Release(waiter.tenant);
    }
  } settle{flow, waiter, a.ticket};
  const auto started = Clock::now();
  // A grant that came before this wait begins is seen here; one that comes after posts the
  // timer's cancellation to this thread, which runs once this coroutine is suspended.
  if (flow.Pending(a.ticket) && !requester_gone) {
    waiter.timer.expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(flow.options().max_queue_wait)));
    (void)co_await waiter.timer.async_wait(http::kTuple);
  }
  settle.done = true;
  const PoolFlow::Waiter::State state = flow.Leave(a.ticket);
  if (state == PoolFlow::Waiter::State::kGranted) {
    a.slot = PoolSlot::FromFlow(a.flow, waiter.tenant);
    metrics_->queue_wait_seconds.WithLabels({a.model_label, std::to_string(a.priority)})
        .Observe(std::chrono::duration<double>(Clock::now() - started).count());
    if (requester_gone) {  // let out as its requester left: the slot goes to the next at once
      metrics_->client_disconnects.WithLabels({"queued"}).Inc();
      gone = true;
    }
    co_return std::nullopt;
  }
  if (requester_gone) {
    metrics_->client_disconnects.WithLabels({"queued"}).Inc();
    gone = true;
    co_return std::nullopt;
  }
  if (state == PoolFlow::Waiter::State::kDisplaced) {
    co_return PoolOverloaded(a, "queue_displaced", ": a request of higher priority took this one's place in the queue");
  }
  co_return PoolOverloaded(a, "queue_timeout",
                           ": waited " + fmt::format("{:g}", flow.options().max_queue_wait) +
                               " s (flow_control.max_queue_wait) in the queue");
}

// The Admission and the callback of a StartQueueWait, owned by its coroutine's frame: if the
// frame is destroyed before the wait ends (its thread's loop torn down, even before it began),
// the ticket is settled (AwaitQueueSlot's Settle may not have run) and `done` still hears of it,
// as gone.
struct Gateway::PendingQueueWait {
  Admission admission;
  std::function<void(QueueWaitEnd)> done;
  PendingQueueWait(Admission a, std::function<void(QueueWaitEnd)> d) : admission(std::move(a)), done(std::move(d)) {}
  PendingQueueWait(PendingQueueWait&& other) noexcept
      : admission(std::move(other.admission)), done(std::exchange(other.done, nullptr)) {}
  PendingQueueWait& operator=(PendingQueueWait&&) = delete;
  ~PendingQueueWait() {
    if (!done) return;
    if (admission.flow && admission.flow->Leave(admission.ticket) == PoolFlow::Waiter::State::kGranted) {
      admission.flow->Release(admission.waiter->tenant);
    }
    std::exchange(done, nullptr)(QueueWaitEnd{std::move(admission), std::nullopt, /*gone=*/true});
  }
};

void Gateway::QueueWait::Cancel() {
  // The flag and the timer belong to the waiter's thread; both live on in the handler.
  net::post(waiter_->executor, [self = shared_from_this()] {
    self->gone_ = true;
    self->waiter_->timer.cancel();
  });
}

std::shared_ptr<Gateway::QueueWait> Gateway::StartQueueWait(Admission a, std::function<void(QueueWaitEnd)> done) {
  auto wait = std::make_shared<QueueWait>(a.waiter);
  const net::any_io_executor executor = a.waiter->executor;
  SpawnBackground(executor, "queue_wait", RunQueueWait(wait, PendingQueueWait(std::move(a), std::move(done))),
                  metrics_->background_failures.WithLabels({"queue_wait"}));
  return wait;
}

net::awaitable<void> Gateway::RunQueueWait(std::shared_ptr<QueueWait> wait, PendingQueueWait pending) {
  bool gone = false;
  std::optional<Refusal> refusal = co_await AwaitQueueSlot(pending.admission, wait->gone_, gone);
  std::exchange(pending.done, nullptr)(QueueWaitEnd{std::move(pending.admission), std::move(refusal), gone});
}

std::optional<net::any_io_executor> Gateway::QueueExecutor() {
  if (!started_.load(std::memory_order_acquire) || server_->thread_count() == 0) return std::nullopt;
  const uint32_t turn = queue_executor_turn_.fetch_add(1, std::memory_order_relaxed);
  return server_->context(turn % server_->thread_count()).get_executor();
}

Gateway::Refusal Gateway::PoolOverloaded(Admission& a, std::string_view reason, std::string_view detail) {
  metrics_->rejected_requests.WithLabels({a.model_label, reason}).Inc();
  metrics_->responses.WithLabels({"429", "gateway"}).Inc();
  Refusal r{429, "too many requests in flight for '" + a.d.served_name + "'" + std::string(detail) + "; retry later",
            "pool_overloaded", std::move(a.headers)};  // a limited tenant's x-ratelimit-* as well
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

net::awaitable<void> Gateway::SendRefusal(http::Exchange& ex, const Refusal& r) {
  if (r.headers.empty()) {
    co_await ex.SendError(r.status, r.message, r.code);
    co_return;
  }
  http::StringResponse res = JsonResponse(r.status, api::ErrorBody(api::MakeError(r.status, r.message, r.code)));
  for (const auto& [name, value] : r.headers) res.set(name, value);
  co_await ex.Send(std::move(res));
}

RouteRequest Gateway::RouteRequestFor(const Dispatch& d, std::span<const uint32_t> tried) {
  RouteRequest rr{d.served_name, d.key, tried, d.work_tokens, d.chain};
  rr.prompt_tokens = d.prompt_tokens;
  rr.request_id = dispatch_ids_.fetch_add(1, std::memory_order_relaxed) + 1;
  return rr;
}

Rng& Gateway::PickRng() { return test_rng_ ? *test_rng_ : ThreadRng(); }

void Gateway::ObserveDecisionSeconds(double seconds) { metrics_->decision_seconds.WithLabels({}).Observe(seconds); }

void Gateway::CountGatewayResponse(int status) {
  metrics_->responses.WithLabels({std::to_string(status), "gateway"}).Inc();
}

net::awaitable<void> Gateway::DispatchWithRetries(http::Exchange& ex, const RoutingState& rs, const Dispatch& d,
                                                  Attempt& attempt, RequestRecord& record) {
  const FleetSnapshot& fleet = *rs.fleet;
  const auto& req = ex.request();
  std::vector<uint32_t> tried;
  // In-flight saturation: the full instances count as tried, so that the request goes where the
  // room is that let it in (and retries too).
  if (d.full_at > 0) AppendFullInstances(fleet, fleet.Eligible(d.served_name), d.full_at, tried);
  for (uint32_t n = 0;; ++n) {
    RouteRequest rr = RouteRequestFor(d, tried);
    auto decision = d.policy->Pick(rr, fleet, PickRng());
    if (n == 0) metrics_->decision_seconds.WithLabels({}).Observe(SecondsSince(ex.received_at()));
    if (!decision.ok()) {
      const int status = n == 0 ? 503 : attempt.error_status;
      std::string msg =
          n == 0 ? decision.status().message() : "all attempted instances failed; last error: " + attempt.error;
      LogEvent(spdlog::level::warn, "request failed",
               {{"model", attempt.model}, {"status", status}, {"attempts", n}, {"error", msg}});
      metrics_->responses.WithLabels({std::to_string(status), "gateway"}).Inc();
      spdlog::info("request {} (trace {}) for '{}': {}", RequestIdOf(req), TraceIdOf(req), d.served_name, msg);
      co_await ex.SendError(status, msg, n == 0 ? "no_instance_available" : "upstream_failed");
      co_return;
    }
    const uint32_t i = decision->instance;
    RecordDecision(rs, *decision, n, attempt, record);
    if (spdlog::should_log(spdlog::level::debug)) {
      spdlog::debug("request {} (trace {}) for '{}' -> {} ({}, rank {}, attempt {})", RequestIdOf(req), TraceIdOf(req),
                    d.served_name, record.instance, DecisionKindName(decision->kind), decision->rank, n + 1);
    }
    const bool last = n >= config_.max_retries;
    AttemptOutcome outcome = AttemptOutcome::kDone;
    {
      InFlightGuard guard(fleet.shared_state(i), d.work_tokens);
      decision->request_id = rr.request_id;
      d.policy->OnDispatched(rr, *decision, fleet);
      outcome = co_await Forward(ex, rs, i, *decision, last, attempt, *d.policy);
      d.policy->OnCompleted(*decision, fleet);
    }
    if (outcome == AttemptOutcome::kDone) co_return;
    tried.push_back(i);
    if (last || outcome == AttemptOutcome::kFail) {
      LogEvent(
          spdlog::level::warn, "request failed",
          {{"model", attempt.model}, {"status", attempt.error_status}, {"attempts", n + 1}, {"error", attempt.error}});
      metrics_->responses.WithLabels({std::to_string(attempt.error_status), "gateway"}).Inc();
      spdlog::info("request {} (trace {}) for '{}' failed: {}", RequestIdOf(req), TraceIdOf(req), d.served_name,
                   attempt.error);
      co_await ex.SendError(
          attempt.error_status,
          (n == 0 ? "the instance failed: " : "all attempted instances failed; last error: ") + attempt.error,
          "upstream_failed");
      co_return;
    }
  }
}

void Gateway::RecordDecision(const RoutingState& rs, const Decision& decision, uint32_t n, const Attempt& attempt,
                             RequestRecord& record) {
  const std::string& name = rs.fleet->spec(decision.instance).name;
  record.instance = name;
  record.decision = DecisionKindName(decision.kind);
  record.rank = decision.rank;
  record.attempts = n + 1;
  CountDecision(rs, decision, attempt.model_label, n, attempt.kind);
}

void Gateway::CountDecision(const RoutingState& rs, const Decision& decision, std::string_view model_label, uint32_t n,
                            std::string_view retry_reason) {
  const std::string& name = rs.fleet->spec(decision.instance).name;
  const std::string label(model_label);
  metrics_->requests.WithLabels({name, label, std::string(DecisionKindName(decision.kind))}).Inc();
  rs.instances[decision.instance]->stats->CountDecision(decision.kind);
  if (decision.kind == DecisionKind::kOverflow || decision.kind == DecisionKind::kSaturated) {
    metrics_->overflows.WithLabels({label}).Inc();
  }
  if (n > 0) metrics_->retries.WithLabels({label, std::string(retry_reason)}).Inc();
}

// ----------------------------------------------------------------------------------- Forward

void Gateway::CountUsage(const std::string& instance, InstanceRuntime& rt, const Attempt& attempt,
                         const api::ResponseUsage& u) {
  rt.stats->tokens.Add(u);
  if (attempt.model_stats) attempt.model_stats->tokens.Add(u);
  metrics_->usage_responses.WithLabels({instance, attempt.model_label, attempt.client, u.present ? "true" : "false"})
      .Inc();
  if (!u.present) return;
  const uint32_t cached = std::min(u.cached_tokens, u.prompt_tokens);
  metrics_->prompt_tokens.WithLabels({instance, attempt.model_label, attempt.client, "true"}).Inc(cached);
  metrics_->prompt_tokens.WithLabels({instance, attempt.model_label, attempt.client, "false"})
      .Inc(u.prompt_tokens - cached);
  metrics_->completion_tokens.WithLabels({instance, attempt.model_label, attempt.client}).Inc(u.completion_tokens);
}

// One forwarding attempt's accounting, in Forward's frame and shared with RelayBody (two
// coroutines rather than one, so that each frame stays within the 1,020 bytes that asio
// recycles per thread: a larger one is a malloc and a free per request).
struct Gateway::AttemptContext {
  Gateway& gw;
  http::Exchange& ex;
  const RoutingState& rs;
  const Decision& decision;
  bool last_attempt;
  Attempt& attempt;
  Policy& policy;
  InstanceRuntime& rt;
  const std::string& name;
  const TimeoutsConfig& t;
  Clock::time_point started;
  AttemptDeadlines deadlines;
  bool first_token_told = false;
  bool usage_counted = false;

  AttemptContext(Gateway& g, http::Exchange& e, const RoutingState& r, uint32_t i, const Decision& d, bool last,
                 Attempt& a, Policy& p)
      : gw(g),
        ex(e),
        rs(r),
        decision(d),
        last_attempt(last),
        attempt(a),
        policy(p),
        rt(*r.instances[i]),
        name(r.fleet->spec(i).name),
        t(g.config_.timeouts),
        started(Clock::now()),
        deadlines(t, e.received_at(), started) {}

  void Error(std::string_view kind, std::string message, int status) {
    gw.metrics_->upstream_errors.WithLabels({name, std::string(kind)}).Inc();
    rt.stats->upstream_errors.fetch_add(1, std::memory_order_relaxed);
    attempt.error = name + ": " + message;
    attempt.error_status = status;
    attempt.kind = std::string(kind);
  }
  // Only an attempt that may be retried uses the per-try deadline: the last one waits out
  // first_byte, or ends at the per-try deadline with 504.
  AttemptOutcome FirstByteTimeout() {
    if (deadlines.per_try_binds()) {
      Error("timeout", fmt::format("no response within the per-try timeout of {} s", t.per_try_first_byte), 504);
      // Cancelled upstream when the lease is dropped.
      return last_attempt ? AttemptOutcome::kFail : AttemptOutcome::kRetry;
    }
    Error("timeout", "no response within the first-byte timeout", 504);
    return AttemptOutcome::kFail;  // it may still be working on it
  }
  // Ejection while waiting: only an attempt that may be retried leaves (see watch_ejection).
  AttemptOutcome Ejected() {
    Error("ejected", "the instance was ejected while the request waited for its first byte", 502);
    return AttemptOutcome::kRetry;
  }
  // The policy's first-token event (Forward's comment in gateway.h), at most once per attempt.
  void FirstToken() {
    if (first_token_told) return;
    first_token_told = true;
    policy.OnFirstToken(decision, *rs.fleet);
  }
  // `stream`: an SSE response, whose first byte is its first token; a whole response's first
  // byte comes once it is all generated, so it is labelled apart (and the status page's
  // per-model TTFT takes streams only).
  void FirstByte(bool stream) {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - started).count();
    (stream ? rt.first_byte_stream : rt.first_byte)->Observe(seconds);
    rt.stats->first_byte.Add(now, seconds);
    gw.metrics_->model_first_byte_seconds.WithLabels({attempt.model_label, stream ? "true" : "false"}).Observe(seconds);
    if (stream && attempt.model_stats) attempt.model_stats->first_byte.Add(now, seconds);
  }
  // Token accounting: the usage of a successful generation, counted once, when the response
  // has ended and before the client has all of it (a scrape after it includes it).
  void CountUsage(int status, const api::ResponseUsage& usage) {
    if (!attempt.count_usage || status < 200 || status >= 300 || usage_counted) return;
    usage_counted = true;
    gw.CountUsage(name, rt, attempt, usage);
  }
};

net::awaitable<Gateway::AttemptOutcome> Gateway::Forward(http::Exchange& ex, const RoutingState& rs, uint32_t index,
                                                         const Decision& decision, bool last_attempt, Attempt& attempt,
                                                         Policy& policy) {
  AttemptContext c(*this, ex, rs, index, decision, last_attempt, attempt, policy);
  InstanceRuntime& rt = c.rt;
  // Ejection while waiting: only an attempt that may be retried leaves; the last one keeps
  // waiting (the instance may still answer).
  const bool watch_ejection = !last_attempt && config_.health.interval > 0;
  auto& pool = ConnectionPool::ForThisThread();
  const auto& req = ex.request();

  for (int fresh = 0; fresh < 2; ++fresh) {
    // Connect (or reuse a pooled connection).
    auto [cec, lease] = co_await pool.Acquire(
        rt.target, std::chrono::duration_cast<std::chrono::milliseconds>(c.deadlines.Limit(c.t.connect)), fresh > 0);
    if (cec && IsLocalResourceError(cec)) {
      // This process is out of descriptors, buffers or ports: no instance is to blame, and
      // another would fail the same way.
      metrics_->local_errors.WithLabels({"upstream"}).Inc();
      attempt.error = "the gateway is out of local resources (" + cec.message() + "); retry later";
      attempt.error_status = 503;
      attempt.kind = "local";
      co_return AttemptOutcome::kFail;
    }
    if (cec) {
      c.Error("connect",
              "connect to " + rt.target.host_header + " failed: " + (lease.error.empty() ? cec.message() : lease.error),
              502);
      if (!lease.error.empty()) {  // TLS: say why here, even when a retry then succeeds
        LogEvent(spdlog::level::warn, "upstream TLS connect failed",
                 {{"instance", c.name}, {"error", lease.error}, {"request_id", RequestIdOf(req)}});
      }
      ReportConnectFailure(rs, index);
      co_return AttemptOutcome::kRetry;
    }
    auto& stream = *lease.stream;

    // Send the request.
    std::string& up_head = stream.head_buffer();
    up_head.clear();
    AppendUpstreamHead(up_head, req, rt.target);
    const std::array<net::const_buffer, 2> up{net::buffer(up_head), net::buffer(req.body())};
    beast::error_code wec;
    size_t sent = 0;
    if (!stream.tls()) sent = http::WriteNow(stream.tcp().socket(), up, wec);  // usually all of it
    stream.tcp().expires_after(c.deadlines.FirstByteWait());
    if (!wec && sent < net::buffer_size(up)) {
      beast::buffers_suffix<std::array<net::const_buffer, 2>> rest(up);
      rest.consume(sent);
      std::tie(wec, std::ignore) = co_await stream.On([&](auto& s) { return net::async_write(s, rest, http::kTuple); });
    }
    if (wec) {
      if (lease.reused) continue;  // the instance closed an idle connection: try a fresh one
      c.Error("reset", "sending the request failed: " + wec.message(), 502);
      co_return AttemptOutcome::kRetry;
    }

    // From here until the response ends, the client going away (and until the head goes out,
    // the instance's ejection) cancels the upstream operation in progress; the flags say why it
    // ended. Abandoning the lease then closes the upstream connection, which aborts the request
    // on the instance. (Callbacks rather than a race of awaitables per read: nothing is spawned
    // or allocated per read.)
    bool client_gone = false;
    bool instance_ejected = false;
    const ClientWatch watch(ex, [&client_gone, &stream] {
      client_gone = true;
      stream.tcp().cancel();
    });
    EjectionSignal::Subscription ejection;
    if (watch_ejection) {
      ejection = rt.ejection.Subscribe(stream.tcp().get_executor(), [&instance_ejected, &stream] {
        instance_ejected = true;
        stream.tcp().cancel();
      });
      if (!rs.fleet->state(index).available.load()) instance_ejected = true;  // ejected already
    }
    if (client_gone) {
      metrics_->client_disconnects.WithLabels({"waiting"}).Inc();
      co_return AttemptOutcome::kDone;
    }
    if (instance_ejected) co_return c.Ejected();

    // Wait for the response head.
    beast::flat_buffer& buffer = stream.read_buffer();
    buffer.clear();  // a pooled connection's last response was read to its end
    bhttp::response_parser<bhttp::buffer_body>& parser = stream.NewResponseParser();
    parser.body_limit(boost::none);
    auto [hec, hn] =
        co_await stream.On([&](auto& s) { return bhttp::async_read_header(s, buffer, parser, http::kTuple); });
    if (client_gone) {
      metrics_->client_disconnects.WithLabels({"waiting"}).Inc();
      co_return AttemptOutcome::kDone;
    }
    if (instance_ejected) co_return c.Ejected();
    if (hec) {
      if (hec == beast::error::timeout) co_return c.FirstByteTimeout();
      if (lease.reused && (hec == bhttp::error::end_of_stream || hec == net::error::connection_reset ||
                           hec == net::error::eof || hec == net::ssl::error::stream_truncated)) {
        continue;
      }
      c.Error("reset", "the connection failed before a response: " + hec.message(), 502);
      co_return AttemptOutcome::kRetry;
    }
    rt.consecutive_failures.store(0, std::memory_order_relaxed);
    const int status = parser.get().result_int();
    // 500, 502 and 503 say the instance is done with the request without serving it (broken,
    // or its own upstream failed, or overloaded): nothing reached the client yet, so another
    // instance may serve it. A 504 is not retried, like our own first-byte timeout: the work
    // may still be running behind it.
    if ((status == 500 || status == 502 || status == 503) && !last_attempt) {
      c.Error("status_" + std::to_string(status), "answered " + std::to_string(status), status);
      co_return AttemptOutcome::kRetry;  // the connection is dropped with the lease
    }

    const bool sse = IsSse(parser.get()) && !NotRelayed(parser.get(), "Content-Type");
    if (parser.is_done()) {
      ejection.Cancel();
      metrics_->responses.WithLabels({std::to_string(status), "upstream"}).Inc();
      // No body (204, 304, or an empty one).
      c.FirstToken();
      const bool upstream_keep = parser.get().keep_alive();
      c.CountUsage(status, api::ResponseUsage{});  // no body, no usage
      co_await SendWithoutBody(ex, parser.get(), config_.decision_headers, c.name, decision);
      c.FirstByte(sse);
      rt.duration->Observe(SecondsSince(ex.received_at()));
      if (upstream_keep) pool.Release(std::move(lease));
      co_return AttemptOutcome::kDone;
    }
    co_return co_await RelayBody(c, lease, parser, ejection, client_gone, instance_ejected, status, sse);
  }
  c.Error("reset", "the connection failed twice before a response", 502);
  co_return AttemptOutcome::kRetry;
}

// Relays the body, each piece as soon as it arrives. The head is held back until the first
// body byte (or the end of the body): an instance that dies between its head and its first
// token (during prefill, say) has then sent the client nothing, and the request can still go to
// another instance.
net::awaitable<Gateway::AttemptOutcome> Gateway::RelayBody(AttemptContext& c, Lease& lease,
                                                           bhttp::response_parser<bhttp::buffer_body>& parser,
                                                           EjectionSignal::Subscription& ejection,
                                                           const bool& client_gone, const bool& instance_ejected,
                                                           int status, bool sse) {
  http::Exchange& ex = c.ex;
  UpstreamStream& stream = *lease.stream;
  beast::flat_buffer& buffer = stream.read_buffer();
  // Token accounting: the usage of a successful generation, read as the body streams past
  // (api/response_usage.h: no allocation, no copy), counted once the response has ended.
  api::UsageScanner usage(sse ? api::UsageScanner::Framing::kSse : api::UsageScanner::Framing::kJson);
  const bool scan_usage = c.attempt.count_usage && status >= 200 && status < 300;
  const std::span<char> buf = stream.relay_buffer();
  bool first = true;
  bool head_sent = false;
  // The head goes out with the first piece of the body (and a body that arrived whole, with
  // its end, leaves in one write).
  auto send_head = [&](net::const_buffer piece, bool last) -> net::awaitable<bool> {
    head_sent = true;
    ejection.Cancel();  // once the client has bytes, the request stays with this instance
    metrics_->responses.WithLabels({std::to_string(status), "upstream"}).Inc();
    std::array<char, 16> rank_text;
    const DecisionFields fields = DecisionHeaderFields(config_.decision_headers, c.name, c.decision, rank_text);
    co_return co_await ex.SendHeadFrom(parser.get(), NotRelayed, fields.view(), piece, last);
  };
  while (!parser.is_done()) {
    if (client_gone) {  // went while its last piece was being written: drop the upstream
      metrics_->client_disconnects.WithLabels({"streaming"}).Inc();
      co_return AttemptOutcome::kDone;
    }
    parser.get().body().data = buf.data();
    parser.get().body().size = buf.size();
    // What is buffered already (a body that came with the head, as most do) is parsed without a
    // read, a deadline or a round through the event loop; the socket is read only when none of
    // it could be parsed.
    beast::error_code rec = ParseBuffered(parser, buffer);
    if (!rec && !parser.is_done() && parser.get().body().size == buf.size()) {
      stream.tcp().expires_after(first ? c.deadlines.FirstByteWait() : c.deadlines.Limit(c.t.idle));
      auto [read_ec, rn] =
          co_await stream.On([&](auto& s) { return bhttp::async_read_some(s, buffer, parser, http::kTuple); });
      if (client_gone) {  // drop the upstream
        metrics_->client_disconnects.WithLabels({head_sent ? "streaming" : "waiting"}).Inc();
        co_return AttemptOutcome::kDone;
      }
      rec = read_ec == bhttp::error::need_buffer ? beast::error_code{} : read_ec;
      // A read returns after one chunk of a chunked body, though one system call may have
      // brought many (a burst of SSE events): parse the rest of what is buffered into the relay
      // buffer's free space now, so that the burst leaves in one write rather than one each.
      if (!rec) rec = ParseBuffered(parser, buffer);
    }
    if (instance_ejected) co_return c.Ejected();  // nothing reached the client yet
    const size_t got = buf.size() - parser.get().body().size;
    if (rec && got == 0 && !head_sent) {  // nothing reached the client yet
      if (rec == beast::error::timeout) co_return c.FirstByteTimeout();
      c.Error("broken_stream", "the response broke off before its first byte: " + rec.message(), 502);
      co_return AttemptOutcome::kRetry;
    }
    const bool last = parser.is_done() && !rec;
    if (got > 0) {
      if (first) {
        c.FirstByte(sse);
        first = false;
        if (sse) c.FirstToken();  // a stream's first token is its first byte
      }
      if (scan_usage) usage.Feed(std::string_view(buf.data(), got));
      // Counted before the last piece goes out: a client that has read its whole answer and
      // then scrapes /metrics finds it counted.
      if (last) {
        c.FirstToken();  // the whole response has arrived (a stream told it at its first byte)
        c.CountUsage(status, usage.usage());
      }
    }
    const net::const_buffer piece(buf.data(), got);
    if (!head_sent) {
      if (!co_await send_head(piece, last)) {
        metrics_->client_disconnects.WithLabels({"waiting"}).Inc();
        co_return AttemptOutcome::kDone;  // client gone: drop upstream
      }
    } else if ((got > 0 || last) && !co_await ex.SendBody(piece, last)) {
      metrics_->client_disconnects.WithLabels({"streaming"}).Inc();
      // The client went away: abandoning the lease closes the upstream connection, which
      // aborts the request on the instance.
      co_return AttemptOutcome::kDone;
    }
    if (rec) {
      const bool timeout = rec == beast::error::timeout;
      c.Error(timeout ? "timeout" : "broken_stream",
              timeout ? fmt::format("the response stalled for over {} s", c.t.idle)
                      : "the response broke off: " + rec.message(),
              502);
      co_await EndBrokenStream(ex, c.name, c.attempt, sse);
      co_return AttemptOutcome::kDone;
    }
  }
  c.FirstToken();  // (already, unless the body ended with an empty read)
  c.CountUsage(status, usage.usage());
  if (!head_sent && !co_await send_head({}, true)) co_return AttemptOutcome::kDone;  // a body that ended empty
  co_await ex.Finish();  // (already sent with the last piece, unless the body ended with an empty read)
  c.rt.duration->Observe(SecondsSince(ex.received_at()));
  if (parser.get().keep_alive()) ConnectionPool::ForThisThread().Release(std::move(lease));
  co_return AttemptOutcome::kDone;
}

net::awaitable<void> Gateway::EndBrokenStream(http::Exchange& ex, const std::string& instance, const Attempt& attempt,
                                              bool sse) {
  LogEvent(spdlog::level::warn, "stream broke after it started",
           {{"instance", instance},
            {"model", attempt.model},
            {"error", attempt.error},
            {"request_id", RequestIdOf(ex.request())}});
  if (sse) {
    const std::string event = BrokenStreamEvent(attempt.error);
    co_await ex.SendBody(net::buffer(event));
    co_await ex.Finish();
  }
  // Other bodies end without their terminating chunk (or short of Content-Length): closing the
  // connection makes the truncation visible to the client.
  ex.CloseAfter();
}

}  // namespace prefix_router::gateway
