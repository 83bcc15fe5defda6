#include "core/fleet.h"

#include <atomic>

#include <xxhash.h>

#include <algorithm>
#include <new>
#include <set>

namespace prefix_router {
namespace {
constexpr uint64_t kInstanceSeed = 0x696e7374616e6365ULL;  // "instance"
}  // namespace

int32_t LiveLoad::AddInFlight(int32_t delta, std::memory_order o) {
  const int32_t before = in_flight_.fetch_add(delta, o);
  CountInFlight(before, before + delta);
  return before;
}

int32_t LiveLoad::ExchangeInFlight(int32_t value, std::memory_order o) {
  const int32_t before = in_flight_.exchange(value, o);
  CountInFlight(before, value);
  return before;
}

void LiveLoad::CountInFlight(int32_t before, int32_t after) {
  if (totals_ == nullptr) return;
  totals_->in_flight.fetch_add(int64_t{after} - before, std::memory_order_relaxed);
  if ((before < 0) != (after < 0)) totals_->negative.fetch_add(after < 0 ? 1 : -1, std::memory_order_relaxed);
}

bool LiveLoad::SetFlag(uint8_t flag, bool on, std::memory_order o) {
  const uint8_t before = on ? flags_.fetch_or(flag, o) : flags_.fetch_and(static_cast<uint8_t>(~flag), o);
  const uint8_t after = on ? (before | flag) : (before & static_cast<uint8_t>(~flag));
  if (totals_ != nullptr && (before == 0) != (after == 0)) {
    totals_->unroutable.fetch_add(after == 0 ? -1 : 1, std::memory_order_relaxed);
  }
  return (before & flag) != 0;
}

Result<std::shared_ptr<const FleetSnapshot>> FleetSnapshot::Create(std::vector<InstanceSpec> specs,
                                                                   const FleetSnapshot* previous) {
  std::shared_ptr<FleetSnapshot> snap(new FleetSnapshot());
  static std::atomic<uint64_t> generations{0};
  snap->generation_ = generations.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint32_t n = static_cast<uint32_t>(specs.size());
  for (uint32_t i = 0; i < n; ++i) {
    const InstanceSpec& s = specs[i];
    if (s.name.empty()) {
      return Status::InvalidArgument("instances[" + std::to_string(i) + "].name: must not be empty");
    }
    if (s.weight < 1 || s.weight > kMaxInstanceWeight) {
      return Status::InvalidArgument("instances[" + std::to_string(i) + "].weight: " + std::to_string(s.weight) +
                                     " is outside 1.." + std::to_string(kMaxInstanceWeight));
    }
    if (!snap->by_instance_name_.emplace(s.name, i).second) {
      return Status::InvalidArgument("instances[" + std::to_string(i) + "].name: '" + s.name +
                                     "' is used by another instance");
    }
  }
  snap->specs_ = std::move(specs);
  snap->seeds_.reserve(n);
  snap->states_.reserve(n);
  snap->live_.reserve(n);
  snap->all_.reserve(n);
  // The states of instances new to this snapshot come from one array (each entry shares its
  // ownership): a decision walks the candidates' states in index order, and separate allocations
  // would scatter them over the heap (a cache miss per candidate at 10,000 instances). The array
  // lives while any of its instances does, in this snapshot or a later one.
  uint32_t added = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (previous == nullptr || !previous->Find(snap->specs_[i].name)) ++added;
  }
  // Their LiveLoads likewise, densely, in a second array with its totals (fleet.h says why).
  // Both are built in place: a state refers to its LiveLoad and a LiveLoad to the totals.
  struct Block {
    explicit Block(uint32_t n)
        : count(n),
          live(static_cast<LiveLoad*>(::operator new[](n * sizeof(LiveLoad)))),
          states(static_cast<InstanceState*>(
              ::operator new[](n * sizeof(InstanceState), std::align_val_t{alignof(InstanceState)}))) {
      totals.size = n;
      for (uint32_t k = 0; k < n; ++k) new (&live[k]) LiveLoad(&totals);
      for (uint32_t k = 0; k < n; ++k) new (&states[k]) InstanceState(live[k]);
    }
    ~Block() {
      for (uint32_t k = 0; k < count; ++k) states[k].~InstanceState();
      for (uint32_t k = 0; k < count; ++k) live[k].~LiveLoad();
      ::operator delete[](states, std::align_val_t{alignof(InstanceState)});
      ::operator delete[](live);
    }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    uint32_t count;
    LiveTotals totals;
    LiveLoad* live;
    InstanceState* states;
  };
  std::shared_ptr<Block> block;
  if (added > 0) block = std::make_shared<Block>(added);
  uint32_t next_added = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const InstanceSpec& s = snap->specs_[i];
    snap->seeds_.push_back(XXH3_64bits_withSeed(s.name.data(), s.name.size(), kInstanceSeed));
    snap->by_seed_.emplace(snap->seeds_.back(), i);
    snap->weights_.push_back(s.weight);
    snap->total_weight_ += s.weight;
    std::shared_ptr<InstanceState> state;
    if (previous) {
      if (auto j = previous->Find(s.name)) state = previous->states_[*j];
    }
    if (!state) state = std::shared_ptr<InstanceState>(block, &block->states[next_added++]);
    snap->live_.push_back(&state->live);
    snap->states_.push_back(std::move(state));
    snap->all_.push_back(i);
    if (s.weight != snap->specs_[0].weight) snap->uniform_weights_ = false;
    if (s.serves.empty() && !s.serves_only_listed) snap->wildcard_.push_back(i);
  }
  if (n > 0) {
    // Every instance from one array, in its order: dense. The totals are then the fleet's when
    // that array holds no one else (this snapshot made it, or it is an earlier one's, whole).
    const LiveLoad* base = snap->live_[0];
    const LiveTotals* totals = base->totals();
    bool dense = totals != nullptr;
    for (uint32_t i = 0; i < n && dense; ++i) dense = snap->live_[i]->totals() == totals && snap->live_[i] == base + i;
    if (dense) {
      snap->dense_live_ = base;
      if (totals->size == n) snap->dense_totals_ = totals;
    }
  }
  // Build served name -> instances, with wildcard instances merged into every list.
  std::set<std::string, std::less<>> names;
  for (const auto& s : snap->specs_) names.insert(s.serves.begin(), s.serves.end());
  for (const auto& name : names) {
    std::vector<uint32_t> list;
    for (uint32_t i = 0; i < n; ++i) {
      const auto& serves = snap->specs_[i].serves;
      if ((serves.empty() && !snap->specs_[i].serves_only_listed) ||
          std::find(serves.begin(), serves.end(), name) != serves.end()) {
        list.push_back(i);
      }
    }
    snap->by_served_name_.emplace(name, std::move(list));
  }
  return std::shared_ptr<const FleetSnapshot>(std::move(snap));
}

std::span<const uint32_t> FleetSnapshot::Eligible(std::string_view name) const {
  if (name.empty()) return all_;
  auto it = by_served_name_.find(name);
  if (it != by_served_name_.end()) return it->second;
  return wildcard_;
}

std::optional<uint32_t> FleetSnapshot::Find(std::string_view name) const {
  auto it = by_instance_name_.find(name);
  if (it == by_instance_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> FleetSnapshot::ServedNames() const {
  std::vector<std::string> out;
  out.reserve(by_served_name_.size());
  for (const auto& [name, list] : by_served_name_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace prefix_router
