#include "core/random_policy.h"

#include <cstdint>
#include <memory>

#include "core/policy_internal.h"

namespace prefix_router {
namespace {

using policy_internal::Candidates;
using policy_internal::NoCandidate;

class RandomPolicy final : public Policy {
 public:
  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng& rng) const override {
    auto c = Candidates(r, f, false);
    if (c.empty()) return NoCandidate(r, f);
    if (f.uniform_weights()) return Decision{c[rng.Uniform(c.size())], DecisionKind::kRandom, 0};
    uint64_t total = 0;
    for (uint32_t i : c) total += f.weight(i);
    uint64_t x = static_cast<uint64_t>(rng.NextDouble() * static_cast<double>(total));
    for (uint32_t i : c) {
      if (x < f.weight(i)) return Decision{i, DecisionKind::kRandom, 0};
      x -= f.weight(i);
    }
    return Decision{c.back(), DecisionKind::kRandom, 0};
  }
  std::string_view name() const override { return StrategyName(Strategy::kRandom); }
};

}  // namespace

std::unique_ptr<Policy> MakeRandomPolicy(const RoutingOptions&) { return std::make_unique<RandomPolicy>(); }

}  // namespace prefix_router
