#include "gateway/connection_limit.h"

#include <sys/resource.h>

#include <algorithm>

#include "http/server.h"

namespace prefix_router::gateway {
namespace {

constexpr uint64_t kInfinite = 1u << 20;

uint64_t Finite(rlim_t v) { return v == RLIM_INFINITY ? kInfinite : static_cast<uint64_t>(v); }

}  // namespace

ConnectionLimitPlan AutoMaxConnections(uint64_t descriptors, size_t instances) {
  ConnectionLimitPlan plan;
  plan.descriptors = descriptors;
  plan.reserve = kFixedReserve + static_cast<uint64_t>(http::Server::kMaxLingeringRejections) +
                 kPerInstanceReserve * static_cast<uint64_t>(instances);
  if (descriptors < plan.reserve + 2) {
    plan.limit = 1;
    plan.starved = true;
    return plan;
  }
  plan.limit = static_cast<uint32_t>(std::min<uint64_t>((descriptors - plan.reserve) / 2, 1'000'000));
  return plan;
}

DescriptorLimit CurrentDescriptorLimit() {
  rlimit rl{};
  DescriptorLimit out;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return out;
  out.soft = out.was = Finite(rl.rlim_cur);
  out.hard = Finite(rl.rlim_max);
  return out;
}

DescriptorLimit RaiseDescriptorLimit() {
  DescriptorLimit before = CurrentDescriptorLimit();
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max) return before;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return before;
  DescriptorLimit after = CurrentDescriptorLimit();
  after.was = before.soft;
  return after;
}

}  // namespace prefix_router::gateway
