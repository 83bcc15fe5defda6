#include "core/round_robin_policy.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/policy_internal.h"

namespace prefix_router {
namespace {

using policy_internal::Candidates;
using policy_internal::NoCandidate;

class RoundRobinPolicy final : public Policy {
 public:
  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const override {
    auto c = Candidates(r, f, false);
    if (c.empty()) return NoCandidate(r, f);
    // One turn counter per served name: with a shared counter, alternating requests for two
    // models would each always land on the same instance of their own set.
    uint64_t n = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = next_.find(r.served_name);
      if (it == next_.end()) it = next_.emplace(std::string(r.served_name), 0).first;
      n = r.preview ? it->second : it->second++;
    }
    return Decision{c[n % c.size()], DecisionKind::kRoundRobin, 0};
  }
  std::string_view name() const override { return StrategyName(Strategy::kRoundRobin); }

 private:
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Pick is const for callers but takes a turn: it advances next_ under mu_ (a baseline, not a
  // hot path, so one lock per pick is fine).
  mutable std::mutex mu_;  // guards next_
  mutable std::unordered_map<std::string, uint64_t, NameHash, std::equal_to<>> next_;
};

}  // namespace

std::unique_ptr<Policy> MakeRoundRobinPolicy(const RoutingOptions&) { return std::make_unique<RoundRobinPolicy>(); }

}  // namespace prefix_router
