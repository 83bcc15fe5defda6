// EppServer (ext_proc.h): the gRPC services over PickerStream.
#include "epp/ext_proc.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <deque>
#include <exception>
#include <mutex>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace prefix_router::epp {
namespace {

using HealthStatus = grpc::health::v1::HealthCheckResponse;
constexpr const char* kExtProcService = "envoy.service.ext_proc.v3.ExternalProcessor";

// One Process stream. Reads one message at a time (so the PickerStream is never used from two
// threads), queues the answers and writes them one at a time, in order; finishes once Envoy has
// half-closed (or the stream was cancelled) and the queue is empty. Deleted in OnDone, which
// destroys the PickerStream: whatever it still counts is released there, however the stream ended.
class ProcessReactor final : public grpc::ServerBidiReactor<ext_proc::ProcessingRequest, ext_proc::ProcessingResponse> {
 public:
  ProcessReactor(gateway::Gateway& gateway, PickerMetrics& metrics) : stream_(gateway, metrics) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // Envoy half-closed, or the stream was cancelled
      std::lock_guard lock(mu_);
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    std::vector<ext_proc::ProcessingResponse> out;
    Status s = Status::Ok();
    try {
      s = stream_.OnMessage(request_, out);
    } catch (const std::exception& e) {  // nothing may escape into gRPC's threads
      s = Status::Internal(std::string("endpoint picker: ") + e.what());
    }
    std::lock_guard lock(mu_);
    for (auto& r : out) queue_.push_back(std::move(r));
    if (!s.ok()) {
      spdlog::warn("endpoint picker stream ended: {}", s.message());
      error_ = grpc::Status(s.code() == StatusCode::kInternal ? grpc::StatusCode::INTERNAL
                                                              : grpc::StatusCode::INVALID_ARGUMENT,
                            std::string(s.message()));
      reads_done_ = true;
      MaybeWriteLocked();
      MaybeFinishLocked();
      return;
    }
    MaybeWriteLocked();
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    queue_.pop_front();
    if (!ok) {  // the stream is gone: nothing more goes out
      queue_.clear();
      broken_ = true;
    }
    MaybeWriteLocked();
    MaybeFinishLocked();
  }

  void OnDone() override { delete this; }

 private:
  void MaybeWriteLocked() {
    if (writing_ || queue_.empty() || broken_) return;
    writing_ = true;
    StartWrite(&queue_.front());
  }
  void MaybeFinishLocked() {
    if (finished_ || !reads_done_ || writing_ || (!queue_.empty() && !broken_)) return;
    finished_ = true;
    Finish(error_);
  }

  PickerStream stream_;
  ext_proc::ProcessingRequest request_;
  std::mutex mu_;  // guards everything below
  std::deque<ext_proc::ProcessingResponse> queue_;
  bool writing_ = false;
  bool reads_done_ = false;
  bool broken_ = false;
  bool finished_ = false;
  grpc::Status error_ = grpc::Status::OK;
};

}  // namespace

struct EppServer::Services {
  class ExtProc final : public ext_proc::ExternalProcessor::CallbackService {
   public:
    ExtProc(gateway::Gateway& g, PickerMetrics& m) : gateway_(g), metrics_(m) {}
    grpc::ServerBidiReactor<ext_proc::ProcessingRequest, ext_proc::ProcessingResponse>* Process(
        grpc::CallbackServerContext*) override {
      return new ProcessReactor(gateway_, metrics_);
    }

   private:
    gateway::Gateway& gateway_;
    PickerMetrics& metrics_;
  };
  class Health final : public grpc::health::v1::Health::CallbackService {
   public:
    explicit Health(const EppServer& s) : server_(s) {}
    grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                                    HealthStatus* res) override {
      grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
      const int status = server_.HealthOf(req->service());
      if (status < 0) {
        r->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + req->service() + "'"));
      } else {
        res->set_status(static_cast<HealthStatus::ServingStatus>(status));
        r->Finish(grpc::Status::OK);
      }
      return r;
    }

   private:
    const EppServer& server_;
  };
  Services(gateway::Gateway& g, PickerMetrics& m, const EppServer& s) : ext_proc(g, m), health(s) {}
  ExtProc ext_proc;
  Health health;
};

EppServer::EppServer(gateway::Gateway& gateway) : gateway_(gateway), metrics_(gateway.metrics()) {}

EppServer::~EppServer() { Shutdown(); }

Result<std::unique_ptr<EppServer>> EppServer::Start(gateway::Gateway& gateway, const std::string& host,
                                                    uint16_t port) {
  std::unique_ptr<EppServer> s(new EppServer(gateway));
  s->services_ = std::make_unique<Services>(gateway, s->metrics_, *s);
  const bool ipv6 = host.find(':') != std::string::npos;
  const std::string address = (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  grpc::ServerBuilder builder;
  int selected = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &selected);
  builder.RegisterService(&s->services_->ext_proc);
  builder.RegisterService(&s->services_->health);
  // BUFFERED mode sends the whole body in one message: room for the proxy's body limit.
  const uint64_t max_body = gateway.config().max_request_body_bytes;
  const uint64_t max_message = max_body > 0 ? max_body + (1u << 20) : (64u << 20);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<uint64_t>(max_message, 1u << 30)));
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || selected == 0) {
    return Status::Unavailable("epp.listen " + address + ": the gRPC server could not listen there");
  }
  s->port_ = static_cast<uint16_t>(selected);
  spdlog::info("endpoint picker (ext_proc) listening on {}:{}", host, s->port_);
  return s;
}

void EppServer::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (server_) {
    // Streams still open are cancelled at the deadline; their reactors finish and release.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server_->Wait();
  }
}

int EppServer::HealthOf(const std::string& service) const {
  const bool up = !shut_down_.load();
  if (service.empty() || service == "liveness") return up ? HealthStatus::SERVING : HealthStatus::NOT_SERVING;
  if (service == "readiness" || service == kExtProcService) {
    bool ready = up && gateway_.first_discovery_done();
    if (ready) {
      auto rs = gateway_.routing();
      ready = false;
      for (uint32_t i = 0; i < rs->fleet->size() && !ready; ++i) ready = rs->fleet->state(i).available.load();
    }
    return ready ? HealthStatus::SERVING : HealthStatus::NOT_SERVING;
  }
  return -1;
}

}  // namespace prefix_router::epp
