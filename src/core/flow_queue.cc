#include "core/flow_queue.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <limits>
#include <string_view>

namespace prefix_router {

size_t FlowQueue::size(int32_t band) const {
  auto it = bands_.find(band);
  return it == bands_.end() ? 0 : it->second.arrivals.size();
}

size_t FlowQueue::tenants_tracked() const {
  size_t n = 0;
  for (const auto& [band, b] : bands_) n += b.tenants.size();
  return n;
}

double FlowQueue::LowestBacklogged(const Band& b) const {
  return b.backlogged.empty() ? 0 : std::get<0>(*b.backlogged.begin());
}

FlowQueue::PushResult FlowQueue::Push(FlowItem item) {
  assert(!items_.contains(item.id));
  PushResult result;
  if (item.band < 0) {
    result.verdict = FlowVerdict::kShed;
    return result;
  }
  const uint64_t max_bytes = options_.max_queue_bytes;
  if (max_bytes != 0 && item.bytes > max_bytes) {
    result.verdict = FlowVerdict::kTooLarge;
    return result;
  }
  // Room: what the bands below this one hold can be displaced; what the others hold cannot.
  size_t kept = 0;
  uint64_t kept_bytes = 0;
  for (const auto& [band, b] : bands_) {
    if (band < item.band) break;  // highest first: the rest are lower
    kept += b.arrivals.size();
    kept_bytes += b.bytes;
  }
  if (kept >= options_.max_queue || (max_bytes != 0 && kept_bytes + item.bytes > max_bytes)) {
    result.verdict = FlowVerdict::kFull;
    return result;
  }
  // Displace the most recent requests of the lowest band until it fits.
  while (items_.size() >= options_.max_queue || (max_bytes != 0 && bytes_ + item.bytes > max_bytes)) {
    const Band& lowest = bands_.rbegin()->second;  // not empty: `kept` says a lower band holds something
    const uint64_t id = lowest.arrivals.back();
    Take(id, /*charge=*/false);
    result.displaced.push_back(id);
  }

  Band& band = bands_[item.band];
  const std::string& flow = FlowOf(item);
  auto [at, inserted] = band.tenants.try_emplace(flow);
  Tenant& tenant = at->second;
  const bool joins = tenant.queue.empty();
  if (joins && !inserted) band.idle.erase({tenant.counter, flow});
  // Joining: at least the lowest counter of those already waiting (no credit saved up while idle).
  if (joins && options_.fairness) tenant.counter = std::max(tenant.counter, LowestBacklogged(band));
  const uint64_t id = item.id;
  const uint64_t seq = next_seq_++;
  if (joins) {
    tenant.blocked = AtBound(flow);
    if (!tenant.blocked) band.backlogged.emplace(tenant.counter, seq, flow);
  }
  tenant.queue.push_back(id);
  if (options_.deadlines && item.deadline != kNoFlowDeadline) tenant.deadlines.emplace(item.deadline, id);
  band.arrivals.push_back(id);
  all_.push_back(id);
  band.bytes += item.bytes;
  bytes_ += item.bytes;
  Node node{std::move(item), seq, std::prev(tenant.queue.end()), std::prev(band.arrivals.end()), std::prev(all_.end())};
  items_.emplace(id, std::move(node));
  return result;
}

std::optional<FlowItem> FlowQueue::Pop(double now) {
  // The highest band with a tenant that is not blocked (without a bound: the highest band).
  for (const auto& [number, band] : bands_) {
    if (band.backlogged.empty()) continue;
    const std::string& name = std::get<2>(*band.backlogged.begin());
    const Tenant& tenant = band.tenants.at(name);
    // The earliest deadline not yet passed, else the oldest.
    auto live = tenant.deadlines.upper_bound({now, std::numeric_limits<uint64_t>::max()});
    FlowItem out = Take(live != tenant.deadlines.end() ? live->second : tenant.queue.front(), /*charge=*/true);
    Started(out.tenant);
    return out;
  }
  return std::nullopt;
}

bool FlowQueue::ready() const {
  for (const auto& [number, band] : bands_) {
    if (!band.backlogged.empty()) return true;
  }
  return false;
}

bool FlowQueue::AtBound(std::string_view tenant) const {
  return options_.max_in_flight_per_tenant > 0 && in_flight(tenant) >= options_.max_in_flight_per_tenant;
}

uint32_t FlowQueue::in_flight(std::string_view tenant) const {
  if (tenant_in_flight_.empty()) return 0;
  auto it = tenant_in_flight_.find(std::string(tenant));
  return it == tenant_in_flight_.end() ? 0 : it->second;
}

void FlowQueue::Started(const std::string& tenant) {
  if (options_.max_in_flight_per_tenant == 0) return;
  if (++tenant_in_flight_[tenant] == options_.max_in_flight_per_tenant) {
    ++at_bound_;
    Block(tenant);
  }
}

void FlowQueue::Finished(const std::string& tenant) {
  if (options_.max_in_flight_per_tenant == 0) return;
  auto it = tenant_in_flight_.find(tenant);
  if (it == tenant_in_flight_.end()) return;  // went in flight before this queue counted
  if (it->second-- == options_.max_in_flight_per_tenant) {
    --at_bound_;
    Unblock(tenant);
  }
  if (it->second == 0) tenant_in_flight_.erase(it);
}

void FlowQueue::Block(const std::string& tenant) {
  for (auto& [number, band] : bands_) {
    auto it = band.tenants.find(tenant);
    if (it == band.tenants.end() || it->second.queue.empty() || it->second.blocked) continue;
    Tenant& t = it->second;
    band.backlogged.erase({t.counter, items_.at(t.queue.front()).seq, tenant});
    t.blocked = true;
  }
}

void FlowQueue::Unblock(const std::string& tenant) {
  for (auto& [number, band] : bands_) {
    auto it = band.tenants.find(tenant);
    if (it == band.tenants.end() || !it->second.blocked) continue;
    Tenant& t = it->second;
    t.blocked = false;
    // As a tenant that starts waiting: time at its own bound is not credit against the others.
    if (options_.fairness) t.counter = std::max(t.counter, LowestBacklogged(band));
    band.backlogged.emplace(t.counter, items_.at(t.queue.front()).seq, tenant);
    Prune(band);
  }
}

bool FlowQueue::Remove(uint64_t id) {
  if (!items_.contains(id)) return false;
  Take(id, /*charge=*/false);
  return true;
}

std::vector<uint64_t> FlowQueue::Expire(double now) {
  std::vector<uint64_t> out;
  while (!all_.empty()) {
    const uint64_t id = all_.front();
    if (items_.at(id).item.arrival + options_.max_queue_wait > now) break;
    Take(id, /*charge=*/false);
    out.push_back(id);
  }
  return out;
}

std::optional<double> FlowQueue::NextExpiry() const {
  if (all_.empty()) return std::nullopt;
  return items_.at(all_.front()).item.arrival + options_.max_queue_wait;
}

std::optional<double> FlowQueue::Waited(uint64_t id, double now) const {
  auto it = items_.find(id);
  if (it == items_.end()) return std::nullopt;
  return now - it->second.item.arrival;
}

std::optional<double> FlowQueue::OldestWaited(double now) const {
  if (all_.empty()) return std::nullopt;
  return now - items_.at(all_.front()).item.arrival;
}

FlowItem FlowQueue::Take(uint64_t id, bool charge) {
  auto node_at = items_.find(id);
  Node& node = node_at->second;
  auto band_at = bands_.find(node.item.band);
  Band& band = band_at->second;
  const std::string name = FlowOf(node.item);
  Tenant& tenant = band.tenants.at(name);
  // The tenant's place among the backlogged is keyed by its counter and its oldest request: out
  // while either may change (deadlines take a request that is not the oldest), back in below.
  if (!tenant.blocked) band.backlogged.erase({tenant.counter, items_.at(tenant.queue.front()).seq, name});
  tenant.queue.erase(node.in_tenant);
  if (node.item.deadline != kNoFlowDeadline) tenant.deadlines.erase({node.item.deadline, id});
  band.arrivals.erase(node.in_band);
  all_.erase(node.in_all);
  band.bytes -= node.item.bytes;
  bytes_ -= node.item.bytes;
  if (charge && options_.fairness) tenant.counter += static_cast<double>(std::max<uint64_t>(1, node.item.tokens));
  FlowItem out = std::move(node.item);
  items_.erase(node_at);
  if (tenant.queue.empty()) tenant.blocked = false;  // blocked is for tenants with requests queued
  if (band.arrivals.empty()) {  // the band is empty: its counters are forgotten
    bands_.erase(band_at);
    return out;
  }
  if (!tenant.queue.empty()) {
    if (!tenant.blocked) band.backlogged.emplace(tenant.counter, items_.at(tenant.queue.front()).seq, name);
  } else if (tenant.counter > LowestBacklogged(band)) {
    band.idle.emplace(tenant.counter, name);
  } else {
    band.tenants.erase(name);
  }
  Prune(band);
  return out;
}

void FlowQueue::Prune(Band& b) {
  // Idle tenants at or below the lowest backlogged counter would rejoin at that counter anyway.
  const double lowest = LowestBacklogged(b);
  while (!b.idle.empty() && (b.idle.begin()->first <= lowest || b.idle.size() > kMaxIdleTenants)) {
    b.tenants.erase(b.idle.begin()->second);
    b.idle.erase(b.idle.begin());
  }
}

namespace {

// Calls `each(name, band text)` for every comma-separated pair of `objectives` until it returns
// false. A pair without '=' gives an empty band text.
template <typename F>
void ForEachObjective(std::string_view objectives, F each) {
  while (!objectives.empty()) {
    const size_t comma = objectives.find(',');
    const std::string_view pair = objectives.substr(0, comma);
    objectives = comma == std::string_view::npos ? std::string_view{} : objectives.substr(comma + 1);
    const size_t eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    const std::string_view band = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    if (!each(name, band)) return;
  }
}

std::optional<int32_t> ParseBand(std::string_view text) {
  int32_t band = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), band);
  if (ec != std::errc() || end != text.data() + text.size() || band < kMinFlowBand || band > kMaxFlowBand) {
    return std::nullopt;
  }
  return band;
}

}  // namespace

bool FlowNameOk(std::string_view name, size_t max_size) {
  if (name.empty() || name.size() > max_size) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string_view FlowSaturationName(FlowSaturation s) {
  switch (s) {
    case FlowSaturation::kPool: return "pool";
    case FlowSaturation::kInFlight: return "in-flight";
  }
  return "unknown";
}

Result<FlowSaturation> ParseFlowSaturation(std::string_view name) {
  for (FlowSaturation s : {FlowSaturation::kPool, FlowSaturation::kInFlight}) {
    if (name == FlowSaturationName(s)) return s;
  }
  return Status::InvalidArgument("flow_control.saturation: '" + std::string(name) +
                                 "' is not one of pool, in-flight");
}

uint64_t FlowInstanceRoom(const FleetSnapshot& fleet, std::span<const uint32_t> eligible, FlowSaturation mode,
                          uint32_t limit, uint64_t enough) {
  if (mode == FlowSaturation::kPool) return enough;
  uint64_t room = 0;
  bool any = false;
  for (uint32_t i : eligible) {
    const InstanceState& s = fleet.state(i);
    if (!s.routable()) continue;
    any = true;
    const int64_t used = s.in_flight.load(std::memory_order_relaxed);
    if (used < static_cast<int64_t>(limit)) room += static_cast<uint64_t>(static_cast<int64_t>(limit) - used);
    if (room >= enough) return enough;
  }
  return any ? room : enough;
}

void AppendFullInstances(const FleetSnapshot& fleet, std::span<const uint32_t> eligible, uint32_t limit,
                         std::vector<uint32_t>& out) {
  const size_t before = out.size();
  bool room = false;
  for (uint32_t i : eligible) {
    const InstanceState& s = fleet.state(i);
    if (!s.routable()) continue;
    if (s.in_flight.load(std::memory_order_relaxed) >= static_cast<int64_t>(limit)) {
      out.push_back(i);
    } else {
      room = true;
    }
  }
  if (!room) out.resize(before);
}

Status ValidateFlowObjectives(std::string_view objectives) {
  if (objectives.empty()) return Status::Ok();
  if (objectives.back() == ',') return Status::InvalidArgument("flow_control.objectives: ends with a comma");
  Status result = Status::Ok();
  std::vector<std::string_view> seen;
  ForEachObjective(objectives, [&](std::string_view name, std::string_view band) {
    const std::string pair = std::string(name) + "=" + std::string(band);
    if (!FlowNameOk(name, kMaxFlowObjectiveName)) {
      result = Status::InvalidArgument("flow_control.objectives: '" + pair +
                                       "': a name is 1 to 253 of A-Z a-z 0-9 . _ - (expected name=priority,...)");
    } else if (!ParseBand(band)) {
      result = Status::InvalidArgument("flow_control.objectives: '" + pair + "': the priority must be an integer " +
                                       std::to_string(kMinFlowBand) + ".." + std::to_string(kMaxFlowBand));
    } else if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      result = Status::InvalidArgument("flow_control.objectives: '" + std::string(name) + "' is given twice");
    } else if (seen.size() == kMaxFlowObjectives) {
      result = Status::InvalidArgument("flow_control.objectives: at most " + std::to_string(kMaxFlowObjectives) +
                                       " objectives");
    }
    seen.push_back(name);
    return result.ok();
  });
  return result;
}

std::optional<int32_t> FlowObjectiveBand(std::string_view objectives, std::string_view name) {
  std::optional<int32_t> found;
  ForEachObjective(objectives, [&](std::string_view n, std::string_view band) {
    if (n != name) return true;
    found = ParseBand(band);
    return false;
  });
  return found;
}

}  // namespace prefix_router
