// EnvoyClient: a gRPC client that plays Envoy's ext_proc filter against the endpoint picker, for
// the picker's tests and its benchmark (epp_bench). It builds the messages Envoy sends (request
// headers with pseudo-headers in raw_value, body chunks, response headers with the served
// endpoint in metadata) and reads the picker's answers. Not for production use.
//
// Thread-safety: one EnvoyStream per thread; the EnvoyClient (a channel and a stub) is shared.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace prefix_router::epp::envoy_client {

namespace xp = envoy::service::ext_proc::v3;
using Mode = envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;

inline xp::ProcessingRequest RequestHeaders(std::string_view path, bool end_of_stream,
                                            Mode::BodySendMode mode = Mode::FULL_DUPLEX_STREAMED,
                                            const std::vector<std::pair<std::string, std::string>>& extra = {},
                                            const std::optional<std::vector<std::string>>& subset = std::nullopt,
                                            std::string_view method = "POST") {
  xp::ProcessingRequest r;
  auto* h = r.mutable_request_headers();
  auto add = [&](std::string_view k, std::string_view v) {
    auto* hv = h->mutable_headers()->add_headers();
    hv->set_key(std::string(k));
    hv->set_raw_value(std::string(v));
  };
  add(":method", method);
  add(":path", path);
  add(":authority", "gateway.example");
  add(":scheme", "http");
  add("content-type", "application/json");
  for (const auto& [k, v] : extra) add(k, v);
  h->set_end_of_stream(end_of_stream);
  r.mutable_protocol_config()->set_request_body_mode(mode);
  r.mutable_protocol_config()->set_response_body_mode(mode);
  if (subset) {
    google::protobuf::Struct hint;
    auto* list = (*hint.mutable_fields())["x-gateway-destination-endpoint-subset"].mutable_list_value();
    for (const auto& e : *subset) list->add_values()->set_string_value(e);
    (*r.mutable_metadata_context()->mutable_filter_metadata())["envoy.lb.subset_hint"] = hint;
  }
  return r;
}

inline xp::ProcessingRequest RequestBody(std::string_view chunk, bool end_of_stream) {
  xp::ProcessingRequest r;
  r.mutable_request_body()->set_body(std::string(chunk));
  r.mutable_request_body()->set_end_of_stream(end_of_stream);
  return r;
}

// Response headers; `served` (when not empty) in envoy.lb / x-gateway-destination-endpoint-served.
inline xp::ProcessingRequest ResponseHeaders(std::string_view served, bool end_of_stream) {
  xp::ProcessingRequest r;
  auto* hv = r.mutable_response_headers()->mutable_headers()->add_headers();
  hv->set_key(":status");
  hv->set_raw_value("200");
  r.mutable_response_headers()->set_end_of_stream(end_of_stream);
  if (!served.empty()) {
    google::protobuf::Struct lb;
    (*lb.mutable_fields())["x-gateway-destination-endpoint-served"].set_string_value(std::string(served));
    (*r.mutable_metadata_context()->mutable_filter_metadata())["envoy.lb"] = lb;
  }
  return r;
}

inline xp::ProcessingRequest ResponseBody(std::string_view chunk, bool end_of_stream) {
  xp::ProcessingRequest r;
  r.mutable_response_body()->set_body(std::string(chunk));
  r.mutable_response_body()->set_end_of_stream(end_of_stream);
  return r;
}

// The x-gateway-destination-endpoint header a headers or body answer sets ("" = none).
inline std::string DestinationHeader(const xp::ProcessingResponse& r) {
  const xp::CommonResponse* c = r.has_request_headers() ? &r.request_headers().response()
                                : r.has_request_body()  ? &r.request_body().response()
                                                        : nullptr;
  if (!c) return "";
  for (const auto& o : c->header_mutation().set_headers()) {
    if (o.header().key() == "x-gateway-destination-endpoint") {
      return o.header().raw_value().empty() ? o.header().value() : o.header().raw_value();
    }
  }
  return "";
}

// envoy.lb / x-gateway-destination-endpoint in the answer's dynamic metadata ("" = none).
inline std::string DestinationMetadata(const xp::ProcessingResponse& r) {
  auto lb = r.dynamic_metadata().fields().find("envoy.lb");
  if (lb == r.dynamic_metadata().fields().end()) return "";
  auto v = lb->second.struct_value().fields().find("x-gateway-destination-endpoint");
  return v == lb->second.struct_value().fields().end() ? "" : v->second.string_value();
}

class EnvoyClient {
 public:
  explicit EnvoyClient(uint16_t port)
      : channel_(grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials())),
        stub_(xp::ExternalProcessor::NewStub(channel_)),
        health_(grpc::health::v1::Health::NewStub(channel_)) {}

  // Health/Check: the status (1 SERVING, 2 NOT_SERVING), or -(gRPC code) on a call error.
  int Health(const std::string& service) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse res;
    grpc::Status s = health_->Check(&ctx, req, &res);
    return s.ok() ? static_cast<int>(res.status()) : -static_cast<int>(s.error_code());
  }

  xp::ExternalProcessor::Stub& stub() { return *stub_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<xp::ExternalProcessor::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

// One Process stream, as Envoy's filter holds it for one HTTP request.
class EnvoyStream {
 public:
  explicit EnvoyStream(EnvoyClient& client, std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
    ctx_.set_deadline(std::chrono::system_clock::now() + deadline);
    rw_ = client.stub().Process(&ctx_);
  }
  bool Send(const xp::ProcessingRequest& r) { return rw_->Write(r); }
  std::optional<xp::ProcessingResponse> Read() {
    xp::ProcessingResponse r;
    if (!rw_->Read(&r)) return std::nullopt;
    return r;
  }
  // Half-closes and returns the stream's status.
  grpc::Status Close() {
    rw_->WritesDone();
    xp::ProcessingResponse ignored;
    while (rw_->Read(&ignored)) {
    }
    return rw_->Finish();
  }
  // Resets the stream (Envoy's stream reset, or a downstream that went away).
  void Cancel() { ctx_.TryCancel(); }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<xp::ProcessingRequest, xp::ProcessingResponse>> rw_;
};

}  // namespace prefix_router::epp::envoy_client
