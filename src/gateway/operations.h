// Values of the gateway's run-time operations (add, remove and drain an instance, reload the
// configuration), shared by the admin API, the SIGHUP handler of `serve` and the tests. The
// operations themselves are Gateway methods (gateway.h), implemented in operations.cc.
//
// What a reload changes: `instances`, `routing` and `pools` take effect at once, without
// dropping a request in flight; so do `upstream_tls`, and the files a reload reads again (the
// listener's certificate and key for new connections, https instances' CA files, instances'
// credentials). Every other setting is read once at start (listeners, threads,
// timeouts, limits, retries, health checks, the admin listener and its token); a reload that
// changes one applies the rest and names it in `restart_required`.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gateway/config.h"

namespace prefix_router::gateway {

class Gateway;

// One instance as operators see it.
struct InstanceView {
  std::string name;
  std::string url;
  uint32_t weight = 1;
  std::vector<std::string> models;  // empty = serves every name
  int32_t in_flight = 0;
  uint64_t dispatched = 0;  // requests ever sent to it
  bool healthy = true;      // false while ejected by health checks
  bool drained = false;

  // "drained" (by an operator), "ejected" (by health checks) or "available".
  std::string_view state() const { return drained ? "drained" : healthy ? "available" : "ejected"; }
};

struct ReloadReport {
  std::vector<std::string> changes;           // what took effect, one line each
  std::vector<std::string> restart_required;  // fields that differ but are read only at start
};

// Reads the configuration again (file and flags) and validates it.
using ConfigLoader = std::function<Result<GatewayConfig>()>;

// Loads with `loader` and reloads `gateway`; an invalid configuration is rejected with the
// loader's message and the running one stays. Logs the outcome (one line). `trigger` says what
// asked ("SIGHUP", "admin").
Result<ReloadReport> LoadAndReload(Gateway& gateway, const ConfigLoader& loader, std::string_view trigger);

// The fields of `next` that differ from `running` and need a restart, as YAML paths
// ("listen", "timeouts.connect", "admin"); the admin token is compared, never shown.
std::vector<std::string> RestartRequired(const GatewayConfig& running, const GatewayConfig& next);

}  // namespace prefix_router::gateway
