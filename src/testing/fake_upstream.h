// FakeUpstream: an in-process model server for gateway tests, on loopback, port 0.
//
// It answers every request with a configurable Behavior: a status and JSON body naming the
// instance, or a stream of chunks (SSE or plain) with delays, or a fault (close before the
// response, close mid-stream, never answer). It records what it received.
//
// Thread-safety: SetBehavior and the accessors may be called from the test thread while the
// server runs; the handler runs on the upstream's own I/O thread.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "http/server.h"

namespace prefix_router::testing {

struct Behavior {
  enum class Fault { kNone, kCloseBeforeResponse, kCloseMidStream, kHang };
  int status = 200;
  // When not empty: a streamed body made of these pieces, one write each.
  std::vector<std::string> chunks;
  bool sse = false;                          // content-type text/event-stream
  std::chrono::milliseconds head_delay{0};   // before the response head
  std::chrono::milliseconds chunk_delay{0};  // before each streamed piece
  Fault fault = Fault::kNone;
  size_t fault_after_chunks = 1;               // kCloseMidStream: pieces sent before closing
  std::chrono::milliseconds hang_for{10'000};  // kHang: how long to sit on the request
};

struct RecordedRequest {
  std::string method;
  std::string target;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string Header(std::string_view name) const;
};

class FakeUpstream final : public http::Handler {
 public:
  explicit FakeUpstream(std::string name);
  ~FakeUpstream() override;

  // Starts on 127.0.0.1 with an ephemeral port (or `port` when not 0, to come back on the
  // same address after Stop). With `tls` (a server context: see http/tls.h) it speaks HTTPS
  // and url() says https.
  Status Start(uint16_t port = 0, std::shared_ptr<http::net::ssl::context> tls = nullptr);
  void Stop();
  uint16_t port() const { return port_; }
  std::string url() const { return (tls_ ? "https" : "http") + std::string("://127.0.0.1:") + std::to_string(port_); }
  const std::string& name() const { return name_; }

  void SetBehavior(Behavior b);
  // While held, ordinary requests wait before their response (and its head_delay) until
  // HoldResponses(false): a test decides when they end instead of guessing a long enough delay.
  void HoldResponses(bool hold) { held_.store(hold); }
  // GET /v1/models answers the OpenAI list of these ids (adapters with `parent`, like vLLM's
  // LoRA entries, when given as "adapter<base"). Unset, it answers 404 (an engine without
  // /v1/models, like a native /invocations container): the gateway polls it by default, and a
  // test about something else must not count its polls. Requests to it are counted by
  // models_requests() only, not by requests() or received().
  void SetModels(std::vector<std::string> ids);
  // ... answers `status` with `body` instead (a broken or failing instance).
  void SetModelsAnswer(int status, std::string body);
  // ... is an ordinary request instead, answered with the Behavior and counted as such.
  void SetModelsOrdinary();
  // ... waits `delay` before answering (an engine slow to answer the first poll).
  void SetModelsDelay(std::chrono::milliseconds delay);
  int models_requests() const { return models_requests_.load(); }
  // GET /metrics answers this Prometheus text (an engine's load); counted by metrics_requests()
  // only. Unset, it is an ordinary request.
  void SetMetrics(std::string text);
  int metrics_requests() const { return metrics_requests_.load(); }
  // The Authorization header of the latest GET /v1/models ("" = none).
  std::string models_authorization() const {
    std::lock_guard<std::mutex> lock(mu_);
    return models_authorization_;
  }
  int requests() const { return requests_.load(); }
  // Exchanges whose client (the gateway) went away before the response ended.
  int aborted() const { return aborted_.load(); }
  int in_progress() const { return in_progress_.load(); }
  // Connections accepted since Start (keep-alive reuse keeps it low).
  int64_t connections() const { return server_ ? server_->accepted_connections() : 0; }
  std::vector<RecordedRequest> received() const;

  http::net::awaitable<void> Handle(http::Exchange& ex) override;

 private:
  std::string name_;
  uint16_t port_ = 0;
  bool tls_ = false;
  std::unique_ptr<http::Server> server_;
  mutable std::mutex mu_;
  Behavior behavior_;
  std::vector<RecordedRequest> received_;
  bool models_ordinary_ = false;
  int models_status_ = 404;
  std::string models_body_ = R"({"detail":"Not Found"})";
  std::chrono::milliseconds models_delay_{0};
  std::atomic<int> models_requests_{0};
  bool metrics_set_ = false;
  std::string metrics_body_;
  std::atomic<int> metrics_requests_{0};
  std::string models_authorization_;  // guarded by mu_
  std::atomic<int> requests_{0};
  std::atomic<int> aborted_{0};
  std::atomic<int> in_progress_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> held_{false};
};

}  // namespace prefix_router::testing
