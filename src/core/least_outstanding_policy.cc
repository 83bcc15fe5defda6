#include "core/least_outstanding_policy.h"

#include <cstdint>
#include <memory>

#include "core/policy_internal.h"

namespace prefix_router {
namespace {

using policy_internal::Candidates;
using policy_internal::Load;
using policy_internal::NoCandidate;

class LeastOutstandingPolicy final : public Policy {
 public:
  explicit LeastOutstandingPolicy(LoadMeasure measure) : measure_(measure) {}
  Result<Decision> Pick(const RouteRequest& r, const FleetSnapshot& f, Rng& rng) const override {
    auto c = Candidates(r, f, false);
    if (c.empty()) return NoCandidate(r, f);
    uint32_t best = c[0];
    uint32_t ties = 1;
    for (size_t k = 1; k < c.size(); ++k) {
      const uint32_t i = c[k];
      // Compare load/weight without division (tokens < 2^40 and weights <= 10^4: no overflow).
      const int64_t lhs = Load(f, i, measure_) * f.weight(best);
      const int64_t rhs = Load(f, best, measure_) * f.weight(i);
      if (lhs < rhs) {
        best = i;
        ties = 1;
      } else if (lhs == rhs && rng.Uniform(++ties) == 0) {  // reservoir: uniform among ties
        best = i;
      }
    }
    return Decision{best, DecisionKind::kLeastOutstanding, 0};
  }
  std::string_view name() const override { return StrategyName(Strategy::kLeastOutstanding); }

 private:
  LoadMeasure measure_;
};

}  // namespace

std::unique_ptr<Policy> MakeLeastOutstandingPolicy(const RoutingOptions& o) {
  return std::make_unique<LeastOutstandingPolicy>(o.load_measure);
}

}  // namespace prefix_router
