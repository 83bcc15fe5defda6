// Tenant classes for flow control (docs/flow-control.md): the clients of a run split into
// classes, each with the priority band and tenant name its requests carry, and the part of the
// offered load it sends. `simulate` gives them to its gateways' queues; `bench` sends them as
// x-prefix-router-priority and x-gateway-inference-fairness-id.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace prefix_router::workload {

inline constexpr size_t kMaxTenantClasses = 64;

struct TenantClass {
  std::string name;
  int32_t priority = 0;  // kMinFlowBand..kMaxFlowBand (-10..10); negative = sheddable
  // Open loop without arrival times: the fraction of the offered rate this class sends (the
  // classes together send rate x the sum of their shares, so "a:0:0.5,b:0:5" is b at 10x its
  // half). Closed loop and timed traces: a weight, the chance that a session is this class's.
  double share = 1;
  // Its requests' time-to-first-token objective in milliseconds (header x-slo-ttft-ms; their
  // deadline in a flow-control queue), 1..86400000; 0 = none.
  uint32_t ttft_objective_ms = 0;
};

// "NAME:PRIORITY:SHARE[:TTFT_OBJECTIVE_MS],..." e.g. "interactive:1:0.2:500,batch:0:0.8": names
// unique and usable as a header value (1..64 of [A-Za-z0-9._-]), at most kMaxTenantClasses
// classes, priorities -10..10, shares > 0, objectives 1..86400000 ms when given.
Result<std::vector<TenantClass>> ParseTenantClasses(std::string_view text);
// InvalidArgument unless every class is as ParseTenantClasses would accept it.
Status ValidateTenantClasses(const std::vector<TenantClass>& classes);

double ShareSum(const std::vector<TenantClass>& classes);
// The class a session with uniform draw `u` in [0, 1) belongs to, by share; -1 with no classes.
int32_t PickTenantClass(const std::vector<TenantClass>& classes, double u);

}  // namespace prefix_router::workload
