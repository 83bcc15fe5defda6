#include "core/kv_index.h"

#include <cassert>

#include <xxhash.h>

#include <algorithm>
#include <type_traits>
#include <variant>

#include "core/heap_bytes.h"
#include "core/lru_nodes.h"

namespace prefix_router {

uint64_t KvChainSeed(std::string_view adapter) {
  return XXH3_64bits_withSeed(adapter.data(), adapter.size(), 0x6b762d6177617265ULL);  // "kv-aware"
}

void KvBlockChain(std::span<const uint32_t> tokens, uint32_t block_size, size_t max_blocks, uint64_t seed,
                  std::vector<uint64_t>& out) {
  const size_t blocks = std::min(tokens.size() / block_size, max_blocks);
  uint64_t h = seed;
  for (size_t b = 0; b < blocks; ++b) {
    h = XXH3_64bits_withSeed(tokens.data() + b * block_size, size_t{block_size} * sizeof(uint32_t), h);
    out.push_back(h);
  }
}

void KvIndex::Unlink(Instance& in, uint32_t n) {
  Node& node = in.nodes[n];
  if (node.newer != kNone)
    in.nodes[node.newer].older = node.older;
  else
    in.newest = node.older;
  if (node.older != kNone)
    in.nodes[node.older].newer = node.newer;
  else
    in.oldest = node.newer;
}

void KvIndex::LinkNewest(Instance& in, uint32_t n) {
  in.nodes[n].newer = kNone;
  in.nodes[n].older = in.newest;
  if (in.newest != kNone) in.nodes[in.newest].newer = n;
  in.newest = n;
  if (in.oldest == kNone) in.oldest = n;
}

void KvIndex::Hold(Instance& in, uint64_t router, uint32_t n, bool first) {
  Held& h = in.held[router];
  ++h.count;
  h.node = n;
  if (first && !h.first) {
    h.first = 1;
    first_.Add(router, in.seed);
  }
}

void KvIndex::Release(Instance& in, uint64_t router, uint32_t n) {
  auto it = in.held.find(router);
  if (it == in.held.end()) return;
  if (--it->second.count == 0) {
    if (it->second.first) first_.Drop(router, in.seed);
    in.held.erase(it);
  } else if (it->second.node == n) {
    it->second.node = kNone;  // another engine block holds these tokens; Touch skips it
  }
}

KvIndex::Instance& KvIndex::InstanceLocked(uint64_t seed) {
  auto [it, inserted] = instances_.try_emplace(seed);
  if (inserted) it->second.seed = seed;
  return it->second;
}

void KvIndex::SetBlockSizeLocked(Instance& in, uint32_t block_size) {
  if (in.block_size == block_size) return;
  auto find = [&](uint32_t bs) {
    return std::lower_bound(block_sizes_.begin(), block_sizes_.end(), std::make_pair(bs, uint32_t{0}));
  };
  if (in.block_size != 0) {
    auto it = find(in.block_size);
    if (it != block_sizes_.end() && it->first == in.block_size && --it->second == 0) block_sizes_.erase(it);
  }
  if (block_size != 0) {
    auto it = find(block_size);
    if (it != block_sizes_.end() && it->first == block_size) {
      ++it->second;
    } else {
      block_sizes_.insert(it, {block_size, 1});
    }
  }
  in.block_size = block_size;
}

void KvIndex::Touch(uint64_t seed, std::span<const uint32_t> tokens, std::string_view served_name, size_t max_tokens) {
  uint32_t bs = 0;
  uint64_t chain_seed = 0;
  {
    std::lock_guard lock(mu_);
    auto it = instances_.find(seed);
    if (it == instances_.end() || it->second.block_size == 0 || tokens.empty()) return;
    bs = it->second.block_size;
    chain_seed =
        KvChainSeed(!served_name.empty() && adapters_.contains(served_name) ? served_name : std::string_view());
  }
  thread_local std::vector<uint64_t> chain;
  chain.clear();
  KvBlockChain(tokens, bs, max_tokens / bs, chain_seed, chain);
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  if (it == instances_.end() || it->second.block_size != bs) return;
  Instance& in = it->second;
  size_t held = 0;
  while (held < chain.size() && in.held.contains(chain[held])) ++held;
  // Last block first, so that the first ends up the most recently used.
  for (size_t k = held; k-- > 0;) {
    const uint32_t n = in.held.find(chain[k])->second.node;
    if (n == kNone) continue;
    Unlink(in, n);
    LinkNewest(in, n);
  }
}

void KvIndex::InsertNodeLocked(Instance& in, uint64_t engine, uint64_t router, uint64_t seq, bool first) {
  auto [it, inserted] = in.by_engine.try_emplace(engine, kNone);
  if (!inserted) {
    Node& node = in.nodes[it->second];
    if (node.router != router) {  // the engine reused a hash for other tokens: believe the newest
      Release(in, node.router, it->second);
      Hold(in, router, it->second, first);
      node.router = router;
    }
    node.seq = seq;
    Unlink(in, it->second);
    LinkNewest(in, it->second);
    return;
  }
  uint32_t n;
  if (!in.free.empty()) {
    n = in.free.back();
    in.free.pop_back();
    in.nodes[n] = Node{engine, router, seq, kNone, kNone};
  } else {
    n = static_cast<uint32_t>(in.nodes.size());
    if (in.nodes.size() == in.nodes.capacity()) in.nodes.reserve(in.nodes.size() + in.nodes.size() / 4 + 16);
    in.nodes.push_back(Node{engine, router, seq, kNone, kNone});
  }
  it->second = n;
  LinkNewest(in, n);
  Hold(in, router, n, first);
  ++entries_;
}

void KvIndex::EraseNodeLocked(Instance& in, uint32_t n) {
  Unlink(in, n);
  const Node& node = in.nodes[n];
  Release(in, node.router, n);
  in.by_engine.erase(node.engine);
  in.free.push_back(n);
  --entries_;
  if (in.by_engine.empty()) {  // give the memory back once an instance holds nothing
    in.nodes.clear();
    in.nodes.shrink_to_fit();
    in.free.clear();
    in.free.shrink_to_fit();
    in.by_engine.rehash(0);
    in.held.rehash(0);
    in.newest = in.oldest = kNone;
  }
}

using heap_bytes::AllocBytes;
using heap_bytes::ArrayBytes;
using heap_bytes::FlatMapBytes;
using heap_bytes::MapBytes;
using heap_bytes::VectorBytes;

size_t KvIndex::BytesLocked(const Instance& in) {
  return AllocBytes(sizeof(void*) + sizeof(std::pair<const uint64_t, Instance>)) + sizeof(void*) +
         FlatMapBytes(in.by_engine) + FlatMapBytes(in.held) + MapBytes(in.tombstones) + VectorBytes(in.nodes) +
         VectorBytes(in.free) + VectorBytes(in.missing);
}

namespace {
size_t AdapterBytes(const std::string& a) {
  return AllocBytes(sizeof(void*) + sizeof(std::string) + sizeof(size_t)) + a.capacity();
}
}  // namespace

size_t KvIndex::TotalBytesLocked() const {
  // The index itself, its tables of instances and adapters, its scratch chain.
  size_t total = sizeof(KvIndex) + ArrayBytes(instances_.bucket_count() * sizeof(void*)) +
                 ArrayBytes(adapters_.bucket_count() * sizeof(void*)) + VectorBytes(scratch_);
  for (const std::string& a : adapters_) total += AdapterBytes(a);
  for (const auto& [seed, in] : instances_) total += BytesLocked(in);
  total += first_.bytes() + VectorBytes(block_sizes_);
  return total;
}

size_t KvIndex::TrackedBytesLocked() const {
  return sizeof(KvIndex) + ArrayBytes(instances_.bucket_count() * sizeof(void*)) +
         ArrayBytes(adapters_.bucket_count() * sizeof(void*)) + VectorBytes(scratch_) + adapter_bytes_ +
         instance_bytes_ + first_.bytes() + VectorBytes(block_sizes_);
}

void KvIndex::RecountLocked(Instance& in) {
  const size_t now = BytesLocked(in);
  instance_bytes_ = instance_bytes_ - in.bytes + now;
  in.bytes = now;
}

size_t KvIndex::bytes() const {
  std::lock_guard lock(mu_);
  const size_t total = TotalBytesLocked();
  assert(total == TrackedBytesLocked());
  return total;
}

void KvIndex::MaybeShrinkLocked(Instance& in) {
  const size_t live = in.by_engine.size();
  if (in.nodes.capacity() < 64 || live >= in.nodes.capacity() / 2) return;
  // Renumber the live nodes densely, oldest first, keeping the recency order.
  const std::vector<uint32_t> renumbered = lru_nodes::Compact(in.nodes, in.free, in.oldest, in.newest, live);
  for (auto& [engine, n] : in.by_engine) n = renumbered[n];
  for (auto& [router, h] : in.held) {
    if (h.node != kNone) h.node = renumbered[h.node];
  }
  in.by_engine.rehash(0);
  in.held.rehash(0);
}

uint64_t KvIndex::CapacityBlocks(const Instance& in) const {
  const uint64_t bs = in.block_size == 0 ? 1 : in.block_size;
  return std::max<uint64_t>(1, options_.tokens_per_instance / bs);
}

void KvIndex::DropTombstonesLocked(Instance& in) {
  entries_ -= in.tombstones.size();
  in.tombstones.clear();
  in.tombstones.rehash(0);
}

void KvIndex::AddMissingLocked(Instance& in, uint64_t from, uint64_t to) {
  if (from >= to) return;
  if (in.missing.size() >= kMaxMissingRanges) {
    in.untracked = true;
    return;
  }
  in.missing.emplace_back(from, to);  // gaps are found in increasing order: stays sorted
}

bool KvIndex::TakeMissingLocked(Instance& in, uint64_t seq) {
  auto it = std::upper_bound(in.missing.begin(), in.missing.end(), seq,
                             [](uint64_t s, const std::pair<uint64_t, uint64_t>& r) { return s < r.first; });
  if (it == in.missing.begin()) return false;
  --it;
  if (seq >= it->second) return false;
  const auto [from, to] = *it;
  if (from == seq && to == seq + 1) {
    in.missing.erase(it);
  } else if (from == seq) {
    it->first = seq + 1;
  } else if (to == seq + 1) {
    it->second = seq;
  } else {
    it->second = seq;
    in.missing.insert(it + 1, {seq + 1, to});
    if (in.missing.size() > kMaxMissingRanges) in.untracked = true;
  }
  return true;
}

void KvIndex::ClearBeforeLocked(Instance& in, uint64_t seq) {
  for (uint32_t n = in.oldest; n != kNone;) {
    const uint32_t newer = in.nodes[n].newer;
    if (in.nodes[n].seq < seq) EraseNodeLocked(in, n);
    n = in.by_engine.empty() ? kNone : newer;
  }
  for (auto it = in.tombstones.begin(); it != in.tombstones.end();) {
    if (it->second < seq) {
      it = in.tombstones.erase(it);
      --entries_;
    } else {
      ++it;
    }
  }
}

void KvIndex::AllClearedLocked(Instance& in, uint64_t seq) {
  ClearBeforeLocked(in, seq + 1);  // with the blocks stored earlier in its own batch
  // Events before the clear no longer matter: nor do their missing batches.
  while (!in.missing.empty() && in.missing.front().second <= seq) in.missing.erase(in.missing.begin());
  if (!in.missing.empty() && in.missing.front().first < seq) in.missing.front().first = seq;
  if (seq + 1 >= in.next) {  // a live clear: nothing before it matters
    in.untracked = false;
    in.partial = false;
  }
}

void KvIndex::StoreLocked(Instance& in, const KvBlockStored& e, uint64_t seq, bool replayed) {
  const size_t n = e.block_hashes.size();
  if (e.block_size == 0 || n == 0 || e.token_ids.size() != n * e.block_size) return;
  if (in.block_size != e.block_size) {
    // A new block size means a reconfigured engine (normally seen as a restart): start over.
    if (in.block_size != 0) ClearBeforeLocked(in, UINT64_MAX);
    SetBlockSizeLocked(in, e.block_size);
  }
  uint64_t parent;
  if (e.parent_hash) {
    auto it = in.by_engine.find(*e.parent_hash);
    if (it == in.by_engine.end()) {
      orphaned_ += n;
      return;
    }
    parent = in.nodes[it->second].router;
  } else {
    parent = KvChainSeed(e.adapter);
    if (!e.adapter.empty() && adapters_.size() < kMaxAdapters) {
      if (auto [a, inserted] = adapters_.insert(e.adapter); inserted) adapter_bytes_ += AdapterBytes(*a);
    }
  }
  scratch_.clear();
  KvBlockChain(e.token_ids, e.block_size, n, parent, scratch_);
  // Last block first, so that the first ends up the most recently stored.
  for (size_t k = n; k-- > 0;) {
    const uint64_t engine = e.block_hashes[k];
    if (replayed) {
      if (auto it = in.by_engine.find(engine); it != in.by_engine.end() && in.nodes[it->second].seq > seq) continue;
      if (auto t = in.tombstones.find(engine); t != in.tombstones.end() && t->second > seq) continue;
    }
    InsertNodeLocked(in, engine, scratch_[k], seq, k == 0 && !e.parent_hash);
  }
}

void KvIndex::RemoveLocked(Instance& in, const KvBlockRemoved& e, uint64_t seq, bool replayed) {
  for (uint64_t engine : e.block_hashes) {
    auto it = in.by_engine.find(engine);
    if (it != in.by_engine.end()) {
      if (replayed && in.nodes[it->second].seq > seq) continue;  // stored again since
      EraseNodeLocked(in, it->second);
    }
    if (in.missing.empty() || in.untracked) continue;
    // A gap is open: a replayed BlockStored of this block, older than this removal, must not
    // bring it back.
    auto [t, inserted] = in.tombstones.try_emplace(engine, seq);
    if (inserted) {
      ++entries_;
    } else {
      t->second = std::max(t->second, seq);
    }
    if (in.tombstones.size() > kMaxTombstones) {
      DropTombstonesLocked(in);
      in.untracked = true;
    }
  }
}

void KvIndex::Apply(uint64_t seed, const KvEventBatch& batch) {
  std::lock_guard lock(mu_);
  Instance& in = InstanceLocked(seed);
  const uint64_t s = batch.seq;
  bool replayed = false;
  if (!in.seen) {  // joined at s: exact for every event from s on, partial when s > 0
    in.seen = true;
    in.partial = s > 0;
    in.next = s + 1;
  } else if (s == 0) {  // the publisher restarted: a new engine cache
    ClearBeforeLocked(in, UINT64_MAX);
    DropTombstonesLocked(in);
    in.missing.clear();
    in.untracked = false;
    in.partial = false;
    SetBlockSizeLocked(in, 0);
    in.next = 1;
  } else if (s >= in.next) {
    AddMissingLocked(in, in.next, s);
    in.next = s + 1;
  } else if (TakeMissingLocked(in, s)) {
    replayed = true;
  } else {
    return;  // a duplicate
  }
  in.lost = false;
  for (const KvEvent& ev : batch.events) {
    std::visit(
        [&](const auto& e) {
          using T = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<T, KvBlockStored>) {
            StoreLocked(in, e, s, replayed);
          } else if constexpr (std::is_same_v<T, KvBlockRemoved>) {
            RemoveLocked(in, e, s, replayed);
          } else {
            AllClearedLocked(in, s);
          }
        },
        ev);
  }
  if (in.missing.empty()) DropTombstonesLocked(in);
  EnforceBoundsLocked(in);
}

void KvIndex::EnforceBoundsLocked(Instance& touched) {
  const uint64_t capacity = CapacityBlocks(touched);
  while (touched.by_engine.size() > capacity) EraseNodeLocked(touched, touched.oldest);
  MaybeShrinkLocked(touched);
  // What every instance's containers hold, kept up to date by each instance's change.
  RecountLocked(touched);
  while (entries_ > 0 && TrackedBytesLocked() > options_.max_bytes) {
    Instance* largest = nullptr;
    for (auto& [seed, in] : instances_) {
      if (largest == nullptr || in.entries() > largest->entries()) largest = &in;
    }
    if (!largest->tombstones.empty()) {
      DropTombstonesLocked(*largest);
      if (!largest->missing.empty()) largest->untracked = true;
    } else {
      EraseNodeLocked(*largest, largest->oldest);
    }
    MaybeShrinkLocked(*largest);
    RecountLocked(*largest);
  }
}

void KvIndex::StreamLost(uint64_t seed) {
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  if (it != instances_.end()) it->second.lost = true;
}

void KvIndex::ForgetInstance(uint64_t seed) {
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  if (it == instances_.end()) return;
  Instance& in = it->second;
  for (uint32_t n = in.oldest; n != kNone;) {  // its first blocks leave first_
    const uint32_t older_than_next = in.nodes[n].newer;
    EraseNodeLocked(in, n);
    n = in.by_engine.empty() ? kNone : older_than_next;
  }
  SetBlockSizeLocked(in, 0);
  entries_ -= in.entries();
  instance_bytes_ -= in.bytes;
  instances_.erase(it);
}

std::vector<uint64_t> KvIndex::Instances() const {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  out.reserve(instances_.size());
  for (const auto& [seed, in] : instances_) out.push_back(seed);
  return out;
}

void KvIndex::Match(std::span<const uint32_t> tokens, std::string_view served_name, size_t max_tokens,
                    std::span<const uint64_t> seeds, std::span<InstanceMatch> out, bool stale_too) const {
  // First the block sizes, then the chains outside the lock, then the lookups.
  bool adapter = false;
  {
    std::lock_guard lock(mu_);
    adapter = !served_name.empty() && adapters_.contains(served_name);
    for (size_t k = 0; k < seeds.size(); ++k) {
      out[k] = InstanceMatch{};
      auto it = instances_.find(seeds[k]);
      if (it == instances_.end()) continue;
      out[k].fresh = it->second.fresh();
      out[k].partial = out[k].fresh && it->second.partial;
      out[k].block_size = it->second.block_size;
    }
  }
  if (tokens.empty()) return;
  const uint64_t seed = KvChainSeed(adapter ? served_name : std::string_view());
  // One chain per block size among the fresh candidates (a fleet normally has one).
  thread_local std::vector<std::pair<uint32_t, std::vector<uint64_t>>> chains;
  size_t used = 0;
  auto chain_for = [&](uint32_t bs) -> const std::vector<uint64_t>& {
    for (size_t c = 0; c < used; ++c) {
      if (chains[c].first == bs) return chains[c].second;
    }
    if (chains.size() <= used) chains.emplace_back();
    auto& [size, chain] = chains[used++];
    size = bs;
    chain.clear();
    KvBlockChain(tokens, bs, max_tokens / bs, seed, chain);
    return chain;
  };
  auto wanted = [&](const InstanceMatch& m) { return (m.fresh || stale_too) && m.block_size > 0; };
  for (size_t k = 0; k < seeds.size(); ++k) {
    if (wanted(out[k])) chain_for(out[k].block_size);
  }
  std::lock_guard lock(mu_);
  for (size_t k = 0; k < seeds.size(); ++k) {
    if (!wanted(out[k])) continue;
    auto it = instances_.find(seeds[k]);
    // The view changed between the two locks: take it as it is now.
    if (it == instances_.end() || it->second.block_size != out[k].block_size) {
      out[k] = InstanceMatch{};
      continue;
    }
    out[k].fresh = it->second.fresh();
    out[k].partial = out[k].fresh && it->second.partial;
    if (!out[k].fresh && !stale_too) continue;
    const std::vector<uint64_t>& chain = chain_for(out[k].block_size);
    size_t held = 0;
    while (held < chain.size() && it->second.held.contains(chain[held])) ++held;
    out[k].matched_tokens = static_cast<uint32_t>(held * out[k].block_size);
  }
}

void KvIndex::Holders(std::span<const uint32_t> tokens, std::string_view served_name, size_t max_tokens,
                      std::vector<uint64_t>& out) const {
  out.clear();
  if (tokens.empty()) return;
  std::lock_guard lock(mu_);
  if (first_.empty()) return;
  const uint64_t seed =
      KvChainSeed(!served_name.empty() && adapters_.contains(served_name) ? served_name : std::string_view());
  for (const auto& [bs, count] : block_sizes_) {
    if (tokens.size() < bs || max_tokens < bs) continue;
    const uint64_t first = XXH3_64bits_withSeed(tokens.data(), size_t{bs} * sizeof(uint32_t), seed);
    for (uint64_t holder : first_.Of(first)) {
      auto in = instances_.find(holder);
      if (in != instances_.end() && in->second.block_size == bs) out.push_back(holder);
    }
  }
}

std::vector<uint32_t> KvIndex::BlockSizes() const {
  std::vector<uint32_t> out;
  BlockSizes(out);
  return out;
}

void KvIndex::BlockSizes(std::vector<uint32_t>& out) const {
  out.clear();
  std::lock_guard lock(mu_);
  for (const auto& [bs, count] : block_sizes_) out.push_back(bs);
}

uint64_t KvIndex::ChainSeedFor(std::string_view served_name) const {
  std::lock_guard lock(mu_);
  return KvChainSeed(!served_name.empty() && adapters_.contains(served_name) ? served_name : std::string_view());
}

uint32_t KvIndex::block_size(uint64_t seed) const {
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  return it == instances_.end() ? 0 : it->second.block_size;
}

bool KvIndex::partial(uint64_t seed) const {
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  return it != instances_.end() && it->second.partial;
}

bool KvIndex::fresh(uint64_t seed) const {
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  return it != instances_.end() && it->second.fresh();
}

size_t KvIndex::entries() const {
  std::lock_guard lock(mu_);
  return entries_;
}

size_t KvIndex::entries(uint64_t seed) const {
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  return it == instances_.end() ? 0 : it->second.entries();
}

size_t KvIndex::held_blocks(uint64_t seed) const {
  std::lock_guard lock(mu_);
  auto it = instances_.find(seed);
  return it == instances_.end() ? 0 : it->second.by_engine.size();
}

uint64_t KvIndex::orphaned_blocks() const {
  std::lock_guard lock(mu_);
  return orphaned_;
}

}  // namespace prefix_router
