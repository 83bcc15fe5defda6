#include "core/block_index.h"

#include <cassert>

#include <algorithm>
#include <utility>

#include "core/heap_bytes.h"
#include "core/lru_nodes.h"

namespace prefix_router {

void BlockIndex::Instance::Unlink(uint32_t n) {
  Node& node = nodes[n];
  if (node.newer != kNone)
    nodes[node.newer].older = node.older;
  else
    newest = node.older;
  if (node.older != kNone)
    nodes[node.older].newer = node.newer;
  else
    oldest = node.newer;
}

void BlockIndex::Instance::LinkNewest(uint32_t n) {
  nodes[n].newer = kNone;
  nodes[n].older = newest;
  if (newest != kNone) nodes[newest].newer = n;
  newest = n;
  if (oldest == kNone) oldest = n;
}

bool BlockIndex::Instance::Touch(uint64_t hash) {
  auto [it, inserted] = where.try_emplace(hash, kNone);
  if (!inserted) {
    Unlink(it->second);
    LinkNewest(it->second);
    return false;
  }
  uint32_t n;
  if (!free.empty()) {
    n = free.back();
    free.pop_back();
    nodes[n].hash = hash;
  } else {
    n = static_cast<uint32_t>(nodes.size());
    // A quarter more, not double: the bound counts the capacity (see bytes()).
    if (nodes.size() == nodes.capacity()) nodes.reserve(nodes.size() + nodes.size() / 4 + 16);
    nodes.push_back(Node{hash, kNone, kNone});
  }
  it->second = n;
  LinkNewest(n);
  return true;
}

uint64_t BlockIndex::Instance::EvictOldest() {
  const uint32_t n = oldest;
  const uint64_t hash = nodes[n].hash;
  Unlink(n);
  where.erase(hash);
  free.push_back(n);
  if (where.empty()) {  // give the memory back once an instance holds nothing
    nodes.clear();
    nodes.shrink_to_fit();
    free.clear();
    free.shrink_to_fit();
    where.rehash(0);
  }
  return hash;
}

using heap_bytes::AllocBytes;
using heap_bytes::ArrayBytes;
using heap_bytes::FlatMapBytes;
using heap_bytes::MapBytes;
using heap_bytes::VectorBytes;

size_t BlockIndex::BytesLocked(const Instance& in) {
  return AllocBytes(sizeof(void*) + sizeof(std::pair<const uint64_t, Instance>)) + FlatMapBytes(in.where) +
         VectorBytes(in.nodes) + VectorBytes(in.free);
}

size_t BlockIndex::TotalBytesLocked() const {
  size_t total =
      sizeof(BlockIndex) + (instances_.bucket_count() > 1 ? ArrayBytes(instances_.bucket_count() * sizeof(void*)) : 0);
  total += first_.bytes();
  for (const auto& [seed, in] : instances_) total += BytesLocked(in);
  return total;
}

size_t BlockIndex::TrackedBytesLocked() const {
  return sizeof(BlockIndex) + (instances_.bucket_count() > 1 ? ArrayBytes(instances_.bucket_count() * sizeof(void*)) : 0) +
         first_.bytes() + instance_bytes_;
}

void BlockIndex::RecountLocked(Instance& in) {
  const size_t now = BytesLocked(in);
  instance_bytes_ = instance_bytes_ - in.bytes + now;
  in.bytes = now;
}

size_t BlockIndex::bytes() const {
  std::lock_guard lock(mu_);
  const size_t total = TotalBytesLocked();
  assert(total == TrackedBytesLocked());
  return total;
}

void BlockIndex::MaybeShrinkLocked(Instance& in) {
  const size_t live = in.where.size();
  if (in.nodes.capacity() < 64 || live >= in.nodes.capacity() / 2) return;
  // Renumber the live nodes densely, oldest first, keeping the recency order.
  const std::vector<uint32_t> renumbered = lru_nodes::Compact(in.nodes, in.free, in.oldest, in.newest, live);
  for (auto& [hash, n] : in.where) n = renumbered[n];
  in.where.rehash(0);
}

uint32_t BlockIndex::MatchLocked(const Instance& in, std::span<const uint64_t> chain) {
  if (chain.empty() || !in.Holds(chain[0])) return 0;
  // Held blocks form a prefix of the chain (see the file comment): binary-search its end.
  size_t lo = 1, hi = chain.size();  // chain[lo - 1] is held; the answer lies in [lo, hi]
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (in.Holds(chain[mid - 1]))
      lo = mid;
    else
      hi = mid - 1;
  }
  return static_cast<uint32_t>(lo);
}

void BlockIndex::Match(std::span<const uint64_t> chain, std::span<const uint64_t> seeds,
                       std::span<uint32_t> out) const {
  std::lock_guard lock(mu_);
  for (size_t k = 0; k < seeds.size(); ++k) {
    auto it = instances_.find(seeds[k]);
    out[k] = it == instances_.end() ? 0 : MatchLocked(it->second, chain);
  }
}

void BlockIndex::MatchHolders(std::span<const uint64_t> chain, std::vector<std::pair<uint64_t, uint32_t>>& out) const {
  out.clear();
  if (chain.empty()) return;
  std::lock_guard lock(mu_);
  for (uint64_t seed : first_.Of(chain[0])) {
    auto it = instances_.find(seed);
    if (it == instances_.end()) continue;
    if (const uint32_t n = MatchLocked(it->second, chain); n > 0) out.emplace_back(seed, n);
  }
}

BlockIndex::Instance& BlockIndex::InstanceLocked(uint64_t seed) {
  auto [it, inserted] = instances_.try_emplace(seed);
  if (inserted) it->second.seed = seed;
  return it->second;
}

void BlockIndex::EvictOldestLocked(Instance& in) {
  first_.Drop(in.EvictOldest(), in.seed);  // a no-op unless a first block
  --entries_;
}

void BlockIndex::Insert(std::span<const uint64_t> chain, uint64_t seed) {
  if (chain.empty()) return;
  std::lock_guard lock(mu_);
  Instance& in = InstanceLocked(seed);
  // Last block first, so that the first ends up most recently used.
  for (size_t k = chain.size(); k-- > 1;) entries_ += in.Touch(chain[k]) ? 1 : 0;
  if (in.Touch(chain[0])) {
    ++entries_;
    first_.Add(chain[0], seed);
  }
  EnforceBoundsLocked(in);
}

void BlockIndex::EnforceBoundsLocked(Instance& touched) {
  const uint64_t capacity = CapacityOf(touched);
  while (touched.where.size() > capacity) EvictOldestLocked(touched);
  MaybeShrinkLocked(touched);
  // What every instance's containers hold, kept up to date by each eviction's change.
  RecountLocked(touched);
  while (entries_ > 0 && TrackedBytesLocked() > options_.max_bytes) {
    Instance* largest = nullptr;
    for (auto& [seed, in] : instances_) {
      if (largest == nullptr || in.where.size() > largest->where.size()) largest = &in;
    }
    EvictOldestLocked(*largest);
    MaybeShrinkLocked(*largest);
    RecountLocked(*largest);
  }
}

void BlockIndex::SetCapacity(uint64_t seed, uint64_t blocks) {
  std::lock_guard lock(mu_);
  Instance& in = InstanceLocked(seed);
  in.capacity = blocks;
  EnforceBoundsLocked(in);
}

void BlockIndex::ForgetInstance(uint64_t seed) {
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  if (it == instances_.end()) return;
  for (const auto& [hash, n] : it->second.where) first_.Drop(hash, seed);
  entries_ -= it->second.where.size();
  instance_bytes_ -= it->second.bytes;
  instances_.erase(it);
}

size_t BlockIndex::entries() const {
  std::lock_guard lock(mu_);
  return entries_;
}

size_t BlockIndex::entries(uint64_t seed) const {
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  return it == instances_.end() ? 0 : it->second.where.size();
}

}  // namespace prefix_router
