// Test helper for policies with a share bound: reports dispatches without picking.
#pragma once

#include <cstdint>
#include <vector>

#include "core/fleet.h"
#include "core/policy.h"

namespace prefix_router::testing {

// Tells `policy` that counts[i] requests `r` went to instance i, interleaved (the share meters
// weigh recent dispatches more than older ones, so sequential batches would not count alike).
inline void CountDispatches(Policy& policy, const FleetSnapshot& fleet, std::vector<int> counts,
                            const RouteRequest& r = {}) {
  for (bool any = true; any;) {
    any = false;
    for (uint32_t i = 0; i < counts.size(); ++i) {
      if (counts[i] == 0) continue;
      --counts[i];
      any = true;
      policy.OnDispatched(r, Decision{i, DecisionKind::kAffinity, 0}, fleet);
    }
  }
}

}  // namespace prefix_router::testing
