// The endpoint picker's protocol state for one ext_proc stream (one HTTP request through Envoy),
// as the Gateway API Inference Extension's endpoint picker protocol defines it (docs/epp.md):
//
//   request_headers -> request_body chunks ... end_of_stream   (FULL_DUPLEX_STREAMED or BUFFERED)
//   the picker decides once the body is complete, with Gateway::Admit (the proxy's parsers, pools,
//   rate limits and max_in_flight) and the pool's Policy (Pick repeated with the growing `tried`
//   list: the preference order, up to max_retries + 1 endpoints), and answers with the header
//   x-gateway-destination-endpoint: ip:port[,ip:port...] and the same string in dynamic metadata
//   envoy.lb / x-gateway-destination-endpoint, or with an ImmediateResponse (400, 404, 413, 429,
//   503) carrying the proxy's OpenAI-style JSON error body;
//   response_headers (metadata envoy.lb / x-gateway-destination-endpoint-served: the endpoint that
//   served) -> response_body chunks ... end_of_stream: the request counts in flight on the served
//   instance (InFlightGuard, Policy::OnDispatched / OnCompleted) until the response ends or the
//   stream does, however it ends (the stream's destructor releases what is held).
//
// Body chunks pass back unchanged: in FULL_DUPLEX_STREAMED mode the picker holds them until it
// has decided, then sends the headers response followed by one streamed body response per chunk,
// in order (the protocol wants the headers response first). BUFFERED: the headers are answered at
// once, the decision goes on the body's answer.
//
// Flow control (docs/flow-control.md): when the pool is at max_in_flight and has a queue, the
// decision waits in the pool's queue, as a proxied request does. OnMessage then leaves the stream
// queued(): the caller hands TakeQueued() to Gateway::StartQueueWait, feeds no message until the
// wait ends, and passes its end to Resume, which picks (on the load of that moment) or refuses
// (429) and appends the answers held behind the decision (the body chunks, a trailers answer).
//
// Thread-safety: a PickerStream is used by one thread at a time (the reactor serialises its
// messages and the wait's end); streams share only the Gateway (thread-safe) and the metric
// families.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fleet.h"
#include "core/status.h"
#include "envoy/service/ext_proc/v3/external_processor.pb.h"
#include "gateway/gateway.h"
#include "metrics/metrics.h"

namespace prefix_router::epp {

namespace ext_proc = envoy::service::ext_proc::v3;

inline constexpr std::string_view kDestinationHeader = "x-gateway-destination-endpoint";
inline constexpr std::string_view kLbNamespace = "envoy.lb";
inline constexpr std::string_view kDestinationKey = "x-gateway-destination-endpoint";
inline constexpr std::string_view kServedKey = "x-gateway-destination-endpoint-served";
inline constexpr std::string_view kSubsetNamespace = "envoy.lb.subset_hint";
inline constexpr std::string_view kSubsetKey = "x-gateway-destination-endpoint-subset";

// The picker's own metric families (the decisions themselves are counted in the proxy's).
struct PickerMetrics {
  explicit PickerMetrics(metrics::Registry& r);
  // prefix_router_epp_streams_total{outcome}: picked, refused (an ImmediateResponse),
  // protocol_error, abandoned (ended before a decision).
  metrics::Family<metrics::Counter>& streams;
  // prefix_router_epp_served_total{match}: first (the first choice served), fallback (a later
  // one), other (an endpoint not offered), unknown (no served metadata: the first choice assumed).
  metrics::Family<metrics::Counter>& served;
};

// "ip:port" of instance `index` (IPv6: "[ip]:port"), as Envoy names endpoints.
std::string EndpointOf(const gateway::RoutingState& rs, uint32_t index);

class PickerStream {
 public:
  PickerStream(gateway::Gateway& gateway, PickerMetrics& metrics);
  ~PickerStream();
  PickerStream(const PickerStream&) = delete;
  PickerStream& operator=(const PickerStream&) = delete;

  // One message from Envoy; its answers (zero or more, in order) are appended to `out`. An
  // error is a protocol violation: the caller ends the stream with it.
  Status OnMessage(const ext_proc::ProcessingRequest& message, std::vector<ext_proc::ProcessingResponse>& out);

  // The endpoints offered, in preference order (empty before the decision or after a refusal).
  const std::vector<std::string>& endpoints() const { return endpoints_; }

  // The decision waits in the pool's queue (after OnMessage): see the class comment.
  bool queued() const { return phase_ == Phase::kQueued && admission_.has_value(); }
  // REQUIRES: queued()
  gateway::Gateway::Admission TakeQueued();
  // The queue's answer for the decision TakeQueued took out; its answers are appended to `out`.
  // `end.gone`: the stream went away meanwhile; nothing is answered.
  void Resume(gateway::Gateway::QueueWaitEnd end, std::vector<ext_proc::ProcessingResponse>& out);

 private:
  enum class Phase { kRequestHeaders, kRequestBody, kQueued, kDecided, kRefused, kDone };
  Status OnRequestHeaders(const ext_proc::ProcessingRequest& m, std::vector<ext_proc::ProcessingResponse>& out);
  Status OnRequestBody(const ext_proc::HttpBody& body, std::vector<ext_proc::ProcessingResponse>& out);
  void OnResponseHeaders(const ext_proc::ProcessingRequest& m, std::vector<ext_proc::ProcessingResponse>& out);
  void OnResponseBody(const ext_proc::HttpBody& body, std::vector<ext_proc::ProcessingResponse>& out);
  // Decides (or refuses, or queues: phase kQueued) and appends the answer that carries it: a
  // headers response (`on_headers`), else a body response (BUFFERED).
  void Decide(bool on_headers, std::vector<ext_proc::ProcessingResponse>& out);
  // Decide's picks once admission_ holds the pool's slot, and their answer.
  void Pick(std::vector<ext_proc::ProcessingResponse>& out);
  // FULL_DUPLEX_STREAMED: the chunks held go back after the headers response, the last ending it.
  void ReturnChunks(std::vector<ext_proc::ProcessingResponse>& out);
  void Refuse(int status, std::string message, std::string code, const gateway::Gateway::Headers& headers,
              std::vector<ext_proc::ProcessingResponse>& out);
  // The response ended (or the stream did): the served instance's count and the policy's events.
  void Complete();

  gateway::Gateway& gateway_;
  PickerMetrics& metrics_;
  Phase phase_ = Phase::kRequestHeaders;
  bool buffered_ = false;  // BUFFERED or BUFFERED_PARTIAL request body mode
  bool streamed_response_ = true;
  bool observability_ = false;
  http::Request request_;  // the HTTP request as Envoy saw it, for Gateway::Admit
  api::ApiKind api_kind_ = api::ApiKind::kChatCompletions;
  bool routed_path_ = false;  // a routed (method, path); others are picked without a body parse
  std::optional<std::vector<std::string>> subset_;
  std::vector<std::string> chunks_;  // FULL_DUPLEX_STREAMED: held until the decision is sent
  size_t body_bytes_ = 0;
  std::chrono::steady_clock::time_point body_complete_;
  bool on_headers_ = false;     // the decision goes on the headers response (else the body's)
  bool trailers_held_ = false;  // a request trailers answer waits behind the queued decision

  std::optional<gateway::Gateway::Admission> admission_;
  std::vector<Decision> picks_;
  std::vector<std::string> endpoints_;
  // Served instance: counted from the response headers to the response's end.
  InFlightGuard served_guard_;
  std::optional<Decision> served_;
  RouteRequest served_request_;
  bool first_token_told_ = false;
  bool counted_outcome_ = false;
};

}  // namespace prefix_router::epp
