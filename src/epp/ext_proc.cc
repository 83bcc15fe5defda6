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

// One Process stream. Handles one message at a time (so the PickerStream is never used from two
// threads), queues the answers and writes them one at a time, in order; finishes once Envoy has
// half-closed (or the stream was cancelled) and the queue is empty. Deleted in OnDone, which
// destroys the PickerStream: whatever it still counts is released there, however the stream ended.
//
// A decision queued by the pool's flow control waits on one of the gateway's I/O threads
// (Gateway::StartQueueWait), never on gRPC's. Meanwhile the reactor keeps reading, so that it
// sees Envoy leave (the stream cancelled or half-closed: the wait is cancelled, and the request
// leaves the queue at once), but holds what it reads (Envoy sends at most the request trailers
// before it has the answer) and hands it to the PickerStream after the decision, in order. The
// wait's end comes back on that I/O thread (OnWaitEnd). The reactor does not Finish while a wait
// is pending, so gRPC cannot call OnDone (and delete it) until the wait has ended and OnWaitEnd
// has stopped touching it: OnWaitEnd calls Finish last, outside the mutex.
class ProcessReactor final : public grpc::ServerBidiReactor<ext_proc::ProcessingRequest, ext_proc::ProcessingResponse> {
 public:
  ProcessReactor(gateway::Gateway& gateway, PickerMetrics& metrics) : gateway_(gateway), stream_(gateway, metrics) {
    reading_ = true;
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    std::unique_lock lock(mu_);
    reading_ = false;
    if (!ok || reads_done_) {  // Envoy half-closed, or the stream was cancelled
      // A message that completes after OnCancel is dropped: the stream may be finished already,
      // and nothing (above all, no wait in the queue) may start on it.
      reads_done_ = true;
      if (wait_) wait_->Cancel();  // nobody waits for the decision any more
      MaybeFinish(lock);
      return;
    }
    if (wait_ || !held_.empty()) {  // after the decision, in order
      held_.push_back(std::move(request_));
      request_.Clear();
      MaybeReadLocked();
      return;
    }
    HandleLocked(request_);
    MaybeWriteLocked();
    MaybeReadLocked();
    MaybeFinish(lock);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mu_);
    writing_ = false;
    queue_.pop_front();
    if (!ok) {  // the stream is gone: nothing more goes out
      queue_.clear();
      broken_ = true;
    }
    MaybeWriteLocked();
    MaybeFinish(lock);
  }

  // The stream was cancelled (Envoy reset it, its deadline passed, the server shuts down). A read
  // outstanding ends too, but none may be (held_ full), so the end of reads is noted here as well.
  void OnCancel() override {
    std::unique_lock lock(mu_);
    reads_done_ = true;
    if (wait_) wait_->Cancel();
    MaybeFinish(lock);
  }

  void OnDone() override { delete this; }

 private:
  // At most this many messages are held while a decision waits (Envoy sends one at most); beyond
  // it, reading pauses until the decision is made.
  static constexpr size_t kMaxHeld = 8;

  // One message to the PickerStream; its answers queued. REQUIRES: mu_ held, no wait pending
  void HandleLocked(const ext_proc::ProcessingRequest& message) {
    std::vector<ext_proc::ProcessingResponse> out;
    Status s = Status::Ok();
    try {
      s = stream_.OnMessage(message, out);
    } catch (const std::exception& e) {  // nothing may escape into gRPC's threads
      s = Status::Internal(std::string("endpoint picker: ") + e.what());
    }
    for (auto& r : out) queue_.push_back(std::move(r));
    if (!s.ok()) {
      spdlog::warn("endpoint picker stream ended: {}", s.message());
      error_ = grpc::Status(s.code() == StatusCode::kInternal ? grpc::StatusCode::INTERNAL
                                                              : grpc::StatusCode::INVALID_ARGUMENT,
                            std::string(s.message()));
      reads_done_ = true;
      held_.clear();
      return;  // a decision queued as it failed is settled by ~PickerStream
    }
    if (stream_.queued()) {  // never after Finish: this runs only while reads are not done
      wait_ = gateway_.StartQueueWait(stream_.TakeQueued(),
                                      [this](gateway::Gateway::QueueWaitEnd end) { OnWaitEnd(std::move(end)); });
      if (reads_done_) wait_->Cancel();
    }
  }

  // The queue let the decision out, refused it, or saw the stream go. On the wait's I/O thread.
  void OnWaitEnd(gateway::Gateway::QueueWaitEnd end) {
    std::unique_lock lock(mu_);
    wait_.reset();
    if (reads_done_) end.gone = true;  // the stream went as the wait ended: nothing to answer
    std::vector<ext_proc::ProcessingResponse> out;
    stream_.Resume(std::move(end), out);
    for (auto& r : out) queue_.push_back(std::move(r));
    // What arrived meanwhile, in order; a message may queue a decision again.
    while (!wait_ && !held_.empty() && !reads_done_) {
      ext_proc::ProcessingRequest m = std::move(held_.front());
      held_.pop_front();
      HandleLocked(m);
    }
    if (reads_done_) held_.clear();
    MaybeWriteLocked();
    MaybeReadLocked();
    MaybeFinish(lock);
  }

  void MaybeReadLocked() {
    if (reading_ || reads_done_ || held_.size() >= kMaxHeld) return;
    reading_ = true;
    StartRead(&request_);
  }
  void MaybeWriteLocked() {
    if (writing_ || queue_.empty() || broken_) return;
    writing_ = true;
    StartWrite(&queue_.front());
  }
  // Finishes once reads are done, no decision waits, and the writes are out (or cannot go).
  // Finish is called after `lock` is released and nothing of this reactor is touched after it:
  // from OnWaitEnd (not one of gRPC's reactions) OnDone may delete it at once.
  void MaybeFinish(std::unique_lock<std::mutex>& lock) {
    if (finished_ || !reads_done_ || wait_ || writing_ || (!queue_.empty() && !broken_)) return;
    finished_ = true;
    const grpc::Status status = error_;
    lock.unlock();
    Finish(status);
  }

  gateway::Gateway& gateway_;
  PickerStream stream_;
  ext_proc::ProcessingRequest request_;
  std::mutex mu_;  // guards everything below, and stream_ (used by one thread at a time)
  std::deque<ext_proc::ProcessingResponse> queue_;
  std::deque<ext_proc::ProcessingRequest> held_;       // read while a decision waited
  std::shared_ptr<gateway::Gateway::QueueWait> wait_;  // the decision's wait in the pool's queue
  bool reading_ = false;
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
