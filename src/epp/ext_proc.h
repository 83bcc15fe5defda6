// EppServer: the endpoint picker's gRPC server (docs/epp.md). It serves
// envoy.service.ext_proc.v3.ExternalProcessor/Process (one PickerStream per stream, on gRPC's
// callback API: no thread per stream) and grpc.health.v1.Health/Check for the services
// "" and "liveness" (SERVING while the server runs), "readiness" and
// "envoy.service.ext_proc.v3.ExternalProcessor" (SERVING once the gateway's first discovery round
// has ended with an available instance, NOT_SERVING before and after Shutdown); other names get
// NOT_FOUND, as the health protocol asks.
//
// Lifetime: Start attaches nothing by itself; `serve` hands the server to Gateway::Attach so that
// Gateway::Stop and ~Gateway shut it down (streams cancelled, every count they hold released)
// before the HTTP server. A stream whose decision waits in a pool's queue waits on one of the
// gateway's I/O threads and ends through it: Shutdown needs them running, and the gateway shuts
// the picker down before them. REQUIRES: the Gateway outlives the EppServer.
//
// Thread-safety: Shutdown and port() may be called from any thread; streams run on gRPC's threads
// and share only the Gateway.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "epp/picker.h"
#include "gateway/gateway.h"

namespace grpc {
class Server;
}

namespace prefix_router::epp {

class EppServer final : public gateway::Gateway::Attachment {
 public:
  // Listens on host:port (port 0: any free port; see port()). Errors name the address.
  static Result<std::unique_ptr<EppServer>> Start(gateway::Gateway& gateway, const std::string& host, uint16_t port);
  ~EppServer() override;

  uint16_t port() const { return port_; }
  // Stops accepting, cancels the streams in progress and waits for them (bounded). Idempotent.
  void Shutdown() override;

  // The health service's answer for `service` (grpc.health.v1.HealthCheckResponse.ServingStatus:
  // 1 SERVING, 2 NOT_SERVING; -1: an unknown service).
  int HealthOf(const std::string& service) const;

 private:
  struct Services;
  explicit EppServer(gateway::Gateway& gateway);

  gateway::Gateway& gateway_;
  PickerMetrics metrics_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  uint16_t port_ = 0;
  std::atomic<bool> shut_down_{false};
};

}  // namespace prefix_router::epp
