// PickerStream: the endpoint picker protocol for one stream (picker.h).
#include "epp/picker.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "api/error.h"

namespace prefix_router::epp {
namespace {

using ProcessingMode = envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;
using envoy::config::core::v3::HeaderValueOption;

std::string HeaderText(const envoy::config::core::v3::HeaderValue& h) {
  return h.raw_value().empty() ? h.value() : h.raw_value();
}

// The routed routes, as Gateway::Handle maps them; anything else is picked as the native API
// picks (the default pool unless the inference-component header names one, body bytes as key).
std::optional<api::ApiKind> RoutedKind(std::string_view method, std::string_view path) {
  if (method != "POST") return std::nullopt;
  if (path == "/v1/chat/completions") return api::ApiKind::kChatCompletions;
  if (path == "/v1/completions") return api::ApiKind::kCompletions;
  if (path == "/v1/responses") return api::ApiKind::kResponses;
  if (path == "/v1/embeddings") return api::ApiKind::kEmbeddings;
  if (path == "/tokenize") return api::ApiKind::kTokenize;
  if (path == "/detokenize") return api::ApiKind::kDetokenize;
  if (path == "/invocations") return api::ApiKind::kNative;
  return std::nullopt;
}

void SetHeader(ext_proc::HeaderMutation& m, std::string_view key, std::string_view value) {
  HeaderValueOption* o = m.add_set_headers();
  o->mutable_header()->set_key(std::string(key));
  o->mutable_header()->set_raw_value(std::string(value));
  o->set_append_action(HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD);
}

// envoy.lb / x-gateway-destination-endpoint = `endpoints` in the response's dynamic metadata.
void SetDestinationMetadata(ext_proc::ProcessingResponse& r, const std::string& endpoints) {
  google::protobuf::Struct& lb =
      *(*r.mutable_dynamic_metadata()->mutable_fields())[std::string(kLbNamespace)].mutable_struct_value();
  (*lb.mutable_fields())[std::string(kDestinationKey)].set_string_value(endpoints);
}

const google::protobuf::Value* MetadataValue(const ext_proc::ProcessingRequest& m, std::string_view ns,
                                             std::string_view key) {
  if (!m.has_metadata_context()) return nullptr;
  const auto& fm = m.metadata_context().filter_metadata();
  auto it = fm.find(std::string(ns));
  if (it == fm.end()) return nullptr;
  auto v = it->second.fields().find(std::string(key));
  return v == it->second.fields().end() ? nullptr : &v->second;
}

ext_proc::ProcessingResponse StreamedBody(std::string body, bool end_of_stream, bool request) {
  ext_proc::ProcessingResponse r;
  ext_proc::BodyResponse* b = request ? r.mutable_request_body() : r.mutable_response_body();
  auto* s = b->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
  s->set_body(std::move(body));
  s->set_end_of_stream(end_of_stream);
  return r;
}

}  // namespace

PickerMetrics::PickerMetrics(metrics::Registry& r)
    : streams(r.AddCounter("prefix_router_epp_streams_total",
                           "Endpoint picker streams (one per request through Envoy) by outcome: picked, "
                           "refused (an ImmediateResponse: 4xx, 503), protocol_error, abandoned (ended "
                           "before a decision)",
                           {"outcome"})),
      served(r.AddCounter("prefix_router_epp_served_total",
                          "Endpoint picker requests by which endpoint Envoy reports served them: first (the "
                          "first choice), fallback (a later one offered), other (one not offered), unknown "
                          "(no served metadata; the first choice is counted)",
                          {"match"})) {}

std::string EndpointOf(const gateway::RoutingState& rs, uint32_t index) {
  const gateway::UpstreamTarget& t = rs.instances[index]->target;
  const bool ipv6 = t.host.find(':') != std::string::npos;
  return (ipv6 ? "[" + t.host + "]" : t.host) + ":" + std::to_string(t.port);
}

PickerStream::PickerStream(gateway::Gateway& gateway, PickerMetrics& metrics) : gateway_(gateway), metrics_(metrics) {}

PickerStream::~PickerStream() {
  if (queued()) {  // a ticket never handed to a wait (the stream failed as it queued): settled here
    gateway::Gateway::Admission a = TakeQueued();
    if (a.flow->Leave(a.ticket) == PoolFlow::Waiter::State::kGranted) a.flow->Release(a.waiter->tenant);
  }
  Complete();
  if (!counted_outcome_) metrics_.streams.WithLabels({"abandoned"}).Inc();
}

Status PickerStream::OnMessage(const ext_proc::ProcessingRequest& m, std::vector<ext_proc::ProcessingResponse>& out) {
  if (m.observability_mode()) observability_ = true;
  std::vector<ext_proc::ProcessingResponse> answers;
  Status s = Status::Ok();
  switch (m.request_case()) {
    case ext_proc::ProcessingRequest::kRequestHeaders: s = OnRequestHeaders(m, answers); break;
    case ext_proc::ProcessingRequest::kRequestBody: s = OnRequestBody(m.request_body(), answers); break;
    case ext_proc::ProcessingRequest::kRequestTrailers:
      // Sent only with request_trailer_mode SEND: the body (if any) ended before them.
      if (phase_ == Phase::kRequestBody) {
        ext_proc::HttpBody end;
        end.set_end_of_stream(true);
        s = OnRequestBody(end, answers);
      }
      if (phase_ == Phase::kQueued) {
        trailers_held_ = true;  // answered after the decision (Resume)
      } else {
        answers.emplace_back().mutable_request_trailers();
      }
      break;
    case ext_proc::ProcessingRequest::kResponseHeaders: OnResponseHeaders(m, answers); break;
    case ext_proc::ProcessingRequest::kResponseBody: OnResponseBody(m.response_body(), answers); break;
    case ext_proc::ProcessingRequest::kResponseTrailers:
      Complete();
      answers.emplace_back().mutable_response_trailers();
      break;
    default: s = Status::InvalidArgument("ProcessingRequest without a request, or of an unknown kind");
  }
  if (!s.ok() && !counted_outcome_) {
    counted_outcome_ = true;
    metrics_.streams.WithLabels({"protocol_error"}).Inc();
  }
  if (!observability_) {
    for (auto& a : answers) out.push_back(std::move(a));
  }
  return s;
}

Status PickerStream::OnRequestHeaders(const ext_proc::ProcessingRequest& m,
                                      std::vector<ext_proc::ProcessingResponse>& out) {
  if (phase_ != Phase::kRequestHeaders) return Status::InvalidArgument("request_headers sent twice on one stream");
  if (m.has_protocol_config()) {
    const auto mode = m.protocol_config().request_body_mode();
    buffered_ = mode == ProcessingMode::BUFFERED || mode == ProcessingMode::BUFFERED_PARTIAL;
    streamed_response_ = m.protocol_config().response_body_mode() == ProcessingMode::FULL_DUPLEX_STREAMED ||
                         m.protocol_config().response_body_mode() == ProcessingMode::NONE;
  }
  std::string method = "POST";
  std::string path = "/";
  request_.version(11);
  for (const auto& h : m.request_headers().headers().headers()) {
    const std::string value = HeaderText(h);
    if (h.key() == ":method") {
      method = value;
    } else if (h.key() == ":path") {
      path = value;
    } else if (h.key() == ":authority") {
      request_.set(http::bhttp::field::host, value);
    } else if (!h.key().empty() && h.key()[0] != ':') {
      request_.insert(h.key(), value);
    }
  }
  request_.method_string(method);
  request_.target(path);
  const std::string_view bare = std::string_view(path).substr(0, path.find('?'));
  const std::optional<api::ApiKind> kind = RoutedKind(method, bare);
  routed_path_ = kind.has_value();
  api_kind_ = kind.value_or(api::ApiKind::kNative);
  // The subset hint: Envoy names the endpoints this request may go to.
  if (const google::protobuf::Value* v = MetadataValue(m, kSubsetNamespace, kSubsetKey)) {
    subset_.emplace();
    if (v->has_list_value()) {
      for (const auto& e : v->list_value().values()) {
        if (e.has_string_value()) subset_->push_back(e.string_value());
      }
    } else if (v->has_string_value()) {  // tolerated: one string, comma-separated
      std::string_view s = v->string_value();
      while (!s.empty()) {
        const size_t comma = s.find(',');
        std::string_view item = s.substr(0, comma);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        if (!item.empty()) subset_->emplace_back(item);
        s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
      }
    }
  }
  if (m.request_headers().end_of_stream()) {  // no body: decide on the headers
    body_complete_ = std::chrono::steady_clock::now();
    Decide(/*on_headers=*/true, out);
    return Status::Ok();
  }
  phase_ = Phase::kRequestBody;
  if (buffered_) out.emplace_back().mutable_request_headers();  // the body comes after this answer
  return Status::Ok();
}

Status PickerStream::OnRequestBody(const ext_proc::HttpBody& body, std::vector<ext_proc::ProcessingResponse>& out) {
  if (phase_ == Phase::kRefused || phase_ == Phase::kDone) return Status::Ok();  // Envoy stops after a refusal
  if (phase_ != Phase::kRequestBody) {
    return Status::InvalidArgument("request_body before request_headers, or after the request ended");
  }
  body_bytes_ += body.body().size();
  const uint64_t limit = gateway_.config().max_request_body_bytes;
  if (limit > 0 && body_bytes_ > limit) {
    chunks_.clear();
    gateway_.CountGatewayResponse(413);
    Refuse(413, "request body exceeds the limit of " + std::to_string(limit) + " bytes", "request_too_large", {},
           out);
    return Status::Ok();
  }
  request_.body().append(body.body());
  if (!buffered_) chunks_.push_back(body.body());
  if (!body.end_of_stream()) {
    if (buffered_) out.emplace_back().mutable_request_body();  // BUFFERED_PARTIAL: one answer per message
    return Status::Ok();
  }
  body_complete_ = std::chrono::steady_clock::now();
  Decide(/*on_headers=*/!buffered_, out);
  if (phase_ != Phase::kQueued) ReturnChunks(out);  // queued: they wait with the decision
  return Status::Ok();
}

void PickerStream::ReturnChunks(std::vector<ext_proc::ProcessingResponse>& out) {
  if (phase_ == Phase::kDecided && !buffered_) {
    // The chunks go back unchanged, after the headers response, the last one ending the stream.
    for (size_t i = 0; i < chunks_.size(); ++i) {
      out.push_back(StreamedBody(std::move(chunks_[i]), i + 1 == chunks_.size(), /*request=*/true));
    }
  }
  chunks_.clear();
  chunks_.shrink_to_fit();
}

gateway::Gateway::Admission PickerStream::TakeQueued() {
  gateway::Gateway::Admission a = std::move(*admission_);
  admission_.reset();
  return a;
}

void PickerStream::Resume(gateway::Gateway::QueueWaitEnd end, std::vector<ext_proc::ProcessingResponse>& out) {
  if (end.gone) {  // the stream is going: no answer (counted abandoned); the slot, if any, goes on
    phase_ = Phase::kDone;
    chunks_.clear();
    return;
  }
  std::vector<ext_proc::ProcessingResponse> answers;
  admission_.emplace(std::move(end.admission));
  if (end.refusal) {
    gateway::Gateway::Refusal& r = *end.refusal;
    Refuse(r.status, std::move(r.message), std::move(r.code), r.headers, answers);
  } else {
    Pick(answers);
  }
  ReturnChunks(answers);
  if (trailers_held_) answers.emplace_back().mutable_request_trailers();
  trailers_held_ = false;
  if (!observability_) {
    for (auto& a : answers) out.push_back(std::move(a));
  }
}

void PickerStream::Refuse(int status, std::string message, std::string code, const gateway::Gateway::Headers& headers,
                          std::vector<ext_proc::ProcessingResponse>& out) {
  phase_ = Phase::kRefused;
  admission_.reset();  // the pool's slot comes back at once, not when Envoy closes the stream
  counted_outcome_ = true;
  metrics_.streams.WithLabels({"refused"}).Inc();
  spdlog::debug("endpoint picker: {} {} for '{}': {}", status, code, std::string(request_.target()), message);
  ext_proc::ImmediateResponse* ir = out.emplace_back().mutable_immediate_response();
  ir->mutable_status()->set_code(static_cast<envoy::type::v3::StatusCode>(status));
  SetHeader(*ir->mutable_headers(), "content-type", "application/json");
  for (const auto& [name, value] : headers) SetHeader(*ir->mutable_headers(), name, value);
  ir->set_body(api::ErrorBody(api::MakeError(status, std::move(message), code)));
  ir->set_details("prefix_router_" + (code.empty() ? std::to_string(status) : code));
}

void PickerStream::Decide(bool on_headers, std::vector<ext_proc::ProcessingResponse>& out) {
  if (!gateway_.first_discovery_done()) {
    gateway_.CountGatewayResponse(503);
    Refuse(503, "the endpoint picker is not ready: the first discovery round has not ended", "not_ready", {}, out);
    return;
  }
  // A pool at its ceiling queues the decision on one of the gateway's I/O threads (none in
  // observability mode, where Envoy does not wait for the answer: 429 at once, as before).
  const std::optional<boost::asio::any_io_executor> wait_on = observability_ ? std::nullopt : gateway_.QueueExecutor();
  auto admitted = gateway_.Admit(api_kind_, request_, "", nullptr, wait_on ? &*wait_on : nullptr);
  if (auto* r = std::get_if<gateway::Gateway::Refusal>(&admitted)) {
    Refuse(r->status, std::move(r->message), std::move(r->code), r->headers, out);
    return;
  }
  admission_.emplace(std::move(std::get<gateway::Gateway::Admission>(admitted)));
  on_headers_ = on_headers;
  if (admission_->waiter) {  // the pool is full: the queue decides when (Resume picks)
    phase_ = Phase::kQueued;
    return;
  }
  Pick(out);
}

void PickerStream::Pick(std::vector<ext_proc::ProcessingResponse>& out) {
  const bool on_headers = on_headers_;
  gateway::Gateway::Admission& a = *admission_;
  // tokenizer: engine would ask an instance's /tokenize here; the picker does not wait on the
  // network while Envoy holds the request, so kv-aware pools route it on their fallback view.
  const gateway::RoutingState& rs = *a.rs;
  const FleetSnapshot& fleet = *rs.fleet;
  std::vector<uint32_t> tried;
  size_t excluded = 0;
  if (subset_) {
    for (uint32_t i = 0; i < fleet.size(); ++i) {
      if (std::find(subset_->begin(), subset_->end(), EndpointOf(rs, i)) == subset_->end()) tried.push_back(i);
    }
    excluded = tried.size();
    if (subset_->empty() || excluded == fleet.size()) {
      gateway_.CountGatewayResponse(503);
      Refuse(503,
             subset_->empty() ? "the subset hint names no endpoint"
                              : "no instance of the fleet is in the subset hint (" + std::to_string(subset_->size()) +
                                    " endpoints)",
             "no_instance_available", {}, out);
      return;
    }
  }
  // In-flight saturation: the full instances count as tried, so that the pick goes where the
  // room is that let the request in (as the proxy's). Should that leave nothing the subset hint
  // allows, the first pick is made again without them.
  const size_t before_full = tried.size();
  if (a.d.full_at > 0) AppendFullInstances(fleet, fleet.Eligible(a.d.served_name), a.d.full_at, tried);
  bool full_excluded = tried.size() > before_full;
  const uint32_t want = gateway_.config().max_retries + 1;
  Rng& shared = gateway_.PickRng();
  std::optional<Rng> fallback_rng;  // later picks draw from a copy: the first choice's draws
                                    // stay those of the proxy's first pick
  while (picks_.size() < want) {
    RouteRequest rr = gateway_.RouteRequestFor(a.d, tried);
    rr.preview = !picks_.empty();
    Rng& rng = picks_.empty() ? shared : *fallback_rng;
    Result<Decision> d = a.d.policy->Pick(rr, fleet, rng);
    if (picks_.empty()) {
      fallback_rng.emplace(shared);
      gateway_.ObserveDecisionSeconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - body_complete_).count());
    }
    if (!d.ok()) {
      if (picks_.empty() && full_excluded) {
        tried.resize(before_full);
        full_excluded = false;
        continue;
      }
      if (picks_.empty()) {
        gateway_.CountGatewayResponse(503);
        std::string why = d.status().message();
        if (subset_) why += " (within the subset hint of " + std::to_string(subset_->size()) + " endpoints)";
        Refuse(503, std::move(why), "no_instance_available", {}, out);
        return;
      }
      break;  // fewer eligible instances than max_retries + 1
    }
    picks_.push_back(*d);
    tried.push_back(d->instance);
  }
  gateway_.CountDecision(rs, picks_.front(), a.model_label, 0, "");
  std::string joined;
  for (const Decision& d : picks_) {
    endpoints_.push_back(EndpointOf(rs, d.instance));
    if (!joined.empty()) joined += ',';
    joined += endpoints_.back();
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("endpoint picker: '{}' -> {} ({}, rank {})", a.d.served_name, joined,
                  DecisionKindName(picks_.front().kind), picks_.front().rank);
  }
  ext_proc::ProcessingResponse& r = out.emplace_back();
  ext_proc::CommonResponse* common =
      on_headers ? r.mutable_request_headers()->mutable_response() : r.mutable_request_body()->mutable_response();
  SetHeader(*common->mutable_header_mutation(), kDestinationHeader, joined);
  common->set_clear_route_cache(true);
  SetDestinationMetadata(r, joined);
  phase_ = Phase::kDecided;
  counted_outcome_ = true;
  metrics_.streams.WithLabels({"picked"}).Inc();
}

void PickerStream::OnResponseHeaders(const ext_proc::ProcessingRequest& m,
                                     std::vector<ext_proc::ProcessingResponse>& out) {
  out.emplace_back().mutable_response_headers();
  if (phase_ != Phase::kDecided || served_ || !admission_) return;
  const gateway::RoutingState& rs = *admission_->rs;
  const FleetSnapshot& fleet = *rs.fleet;
  // Which endpoint served: Envoy's report, else the first choice.
  std::optional<Decision> served;
  std::string_view match = "unknown";
  if (const google::protobuf::Value* v = MetadataValue(m, kLbNamespace, kServedKey); v && v->has_string_value()) {
    const std::string& name = v->string_value();
    for (size_t n = 0; n < picks_.size(); ++n) {
      if (endpoints_[n] == name) {
        served = picks_[n];
        match = n == 0 ? "first" : "fallback";
        if (n > 0) gateway_.CountDecision(rs, picks_[n], admission_->model_label, static_cast<uint32_t>(n), "fallback");
        break;
      }
    }
    if (!served) {
      for (uint32_t i = 0; i < fleet.size(); ++i) {
        if (EndpointOf(rs, i) == name) {
          Decision d;
          d.instance = i;
          d.kind = picks_.front().kind;
          served = d;
          match = "other";
          break;
        }
      }
    }
    if (!served) spdlog::debug("endpoint picker: served endpoint {} is not an instance; counting the first choice", name);
  }
  if (!served) served = picks_.front();
  metrics_.served.WithLabels({std::string(match)}).Inc();
  served_guard_ = InFlightGuard(fleet.shared_state(served->instance), admission_->d.work_tokens);
  served_request_ = gateway_.RouteRequestFor(admission_->d, {});
  served->request_id = served_request_.request_id;
  admission_->d.policy->OnDispatched(served_request_, *served, fleet);
  served_ = served;
  if (m.response_headers().end_of_stream()) Complete();
}

void PickerStream::OnResponseBody(const ext_proc::HttpBody& body, std::vector<ext_proc::ProcessingResponse>& out) {
  if (served_ && !first_token_told_ && !body.body().empty()) {
    first_token_told_ = true;
    admission_->d.policy->OnFirstToken(*served_, *admission_->rs->fleet);
  }
  if (streamed_response_) {
    out.push_back(StreamedBody(body.body(), body.end_of_stream(), /*request=*/false));
  } else {
    out.emplace_back().mutable_response_body();
  }
  if (body.end_of_stream()) Complete();
}

void PickerStream::Complete() {
  if (served_ && admission_) {
    const FleetSnapshot& fleet = *admission_->rs->fleet;
    if (!first_token_told_) admission_->d.policy->OnFirstToken(*served_, fleet);
    admission_->d.policy->OnCompleted(*served_, fleet);
    served_.reset();
    served_guard_.Release();
  }
  if (phase_ == Phase::kDecided) phase_ = Phase::kDone;
  admission_.reset();  // the pool's slot
}

}  // namespace prefix_router::epp
