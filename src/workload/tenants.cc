#include "workload/tenants.h"

#include <charconv>
#include <cmath>
#include <utility>

#include "core/flow_queue.h"

namespace prefix_router::workload {
namespace {

Status CheckClass(const TenantClass& c) {
  if (!FlowNameOk(c.name, 64)) {
    return Status::InvalidArgument("tenant class '" + c.name + "': a name is 1 to 64 of A-Z a-z 0-9 . _ -");
  }
  if (c.priority < kMinFlowBand || c.priority > kMaxFlowBand) {
    return Status::InvalidArgument("tenant class '" + c.name + "': priority must be an integer " +
                                   std::to_string(kMinFlowBand) + ".." + std::to_string(kMaxFlowBand));
  }
  if (!(c.share > 0) || !std::isfinite(c.share)) {
    return Status::InvalidArgument("tenant class '" + c.name + "': share must be a number > 0");
  }
  if (c.ttft_objective_ms > kMaxTtftObjectiveMs) {
    return Status::InvalidArgument("tenant class '" + c.name + "': the TTFT objective must be 1 to " +
                                   std::to_string(kMaxTtftObjectiveMs) + " milliseconds");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTenantClasses(const std::vector<TenantClass>& classes) {
  if (classes.size() > kMaxTenantClasses) {
    return Status::InvalidArgument("at most " + std::to_string(kMaxTenantClasses) + " tenant classes");
  }
  for (size_t i = 0; i < classes.size(); ++i) {
    if (Status s = CheckClass(classes[i]); !s.ok()) return s;
    for (size_t j = 0; j < i; ++j) {
      if (classes[j].name == classes[i].name) {
        return Status::InvalidArgument("tenant class '" + classes[i].name + "' given twice");
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<TenantClass>> ParseTenantClasses(std::string_view text) {
  constexpr std::string_view kExpected =
      " (expected NAME:PRIORITY:SHARE[:TTFT_OBJECTIVE_MS],..., e.g. interactive:1:0.2:500,batch:0:0.8)";
  if (text.empty()) return Status::InvalidArgument("no tenant class given" + std::string(kExpected));
  std::vector<TenantClass> out;
  for (bool more = true; more;) {
    const size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    more = comma != std::string_view::npos;
    text = more ? text.substr(comma + 1) : std::string_view{};
    const size_t c1 = part.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : part.find(':', c1 + 1);
    const size_t c3 = c2 == std::string_view::npos ? c2 : part.find(':', c2 + 1);
    if (c2 == std::string_view::npos || (c3 != std::string_view::npos && part.find(':', c3 + 1) != std::string_view::npos)) {
      return Status::InvalidArgument("tenant class '" + std::string(part) + "': three or four fields" +
                                     std::string(kExpected));
    }
    TenantClass c;
    c.name = std::string(part.substr(0, c1));
    const std::string_view prio = part.substr(c1 + 1, c2 - c1 - 1);
    auto [pp, pe] = std::from_chars(prio.data(), prio.data() + prio.size(), c.priority);
    if (pe != std::errc() || pp != prio.data() + prio.size()) c.priority = kMaxFlowBand + 1;  // refused below
    const std::string_view share = part.substr(c2 + 1, c3 == std::string_view::npos ? c3 : c3 - c2 - 1);
    auto [sp, se] = std::from_chars(share.data(), share.data() + share.size(), c.share);
    if (se != std::errc() || sp != share.data() + share.size()) c.share = 0;  // refused below
    if (c3 != std::string_view::npos) {
      const std::string_view ms = part.substr(c3 + 1);
      auto [mp, me] = std::from_chars(ms.data(), ms.data() + ms.size(), c.ttft_objective_ms);
      if (me != std::errc() || mp != ms.data() + ms.size() || c.ttft_objective_ms == 0) {
        c.ttft_objective_ms = kMaxTtftObjectiveMs + 1;  // refused below
      }
    }
    out.push_back(std::move(c));
  }
  if (Status s = ValidateTenantClasses(out); !s.ok()) return s;
  return out;
}

double ShareSum(const std::vector<TenantClass>& classes) {
  double sum = 0;
  for (const TenantClass& c : classes) sum += c.share;
  return sum;
}

int32_t PickTenantClass(const std::vector<TenantClass>& classes, double u) {
  if (classes.empty()) return -1;
  double x = u * ShareSum(classes);
  for (size_t i = 0; i < classes.size(); ++i) {
    if (x < classes[i].share) return static_cast<int32_t>(i);
    x -= classes[i].share;
  }
  return static_cast<int32_t>(classes.size() - 1);  // u * sum rounded up to the sum
}

}  // namespace prefix_router::workload
