// Where keys moved by bounded-load balancing live now: key hash -> the placement seed of the
// instance that took the key over (seeds identify instances across snapshots).
//
// A bounded table: at most kMaxKeys keys (about 3 MiB), in kShards mutex-protected shards split
// by key bits. A full shard forgets its oldest insertion first (a ring of keys in insertion
// order): a forgotten key goes back to its first choice, at worst one cache miss, and moves
// again if that instance is still over its limit. Keys that moved long ago are the least likely
// to still be in use, so first-in, first-out is a fair stand-in for least recently used at a
// fraction of its bookkeeping.
//
// Thread-safety: every method locks its key's shard; safe from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace prefix_router {

class KeyHomes {
 public:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxKeysPerShard = 4096;
  static constexpr size_t kMaxKeys = kShards * kMaxKeysPerShard;  // 65,536
  static_assert(kShards == 16, "ShardOf takes the top 4 bits");

  std::optional<uint64_t> Find(uint64_t key) const {
    const Shard& s = ShardOf(key);
    std::lock_guard lock(s.mu);
    auto it = s.homes.find(key);
    if (it == s.homes.end()) return std::nullopt;
    return it->second;
  }

  void Set(uint64_t key, uint64_t seed) {
    Shard& s = ShardOf(key);
    std::lock_guard lock(s.mu);
    auto [it, inserted] = s.homes.try_emplace(key, seed);
    if (!inserted) {
      it->second = seed;
      return;
    }
    // Every key in the map has a slot in the ring holding it, so the map never outgrows the
    // ring. Recycling a slot forgets its key (a key erased and set again may hold two slots; the
    // older one then forgets it early, which only costs that key its move).
    if (s.order.size() < kMaxKeysPerShard) {
      s.order.push_back(key);
      return;
    }
    const uint64_t oldest = s.order[s.next];
    if (oldest != key) s.homes.erase(oldest);
    s.order[s.next] = key;
    s.next = (s.next + 1) % kMaxKeysPerShard;
  }

  void Erase(uint64_t key) {
    Shard& s = ShardOf(key);
    std::lock_guard lock(s.mu);
    s.homes.erase(key);
  }

  // Keys held (for tests and diagnostics; locks every shard in turn).
  size_t size() const {
    size_t n = 0;
    for (const Shard& s : shards_) {
      std::lock_guard lock(s.mu);
      n += s.homes.size();
    }
    return n;
  }

 private:
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<uint64_t, uint64_t> homes;
    std::vector<uint64_t> order;  // keys in insertion order, a ring once full
    size_t next = 0;              // the oldest slot once the ring is full
  };
  // The shard comes from the high bits: the low bits also pick the map's bucket.
  Shard& ShardOf(uint64_t key) { return shards_[key >> 60]; }
  const Shard& ShardOf(uint64_t key) const { return shards_[key >> 60]; }

  std::array<Shard, kShards> shards_;
};

}  // namespace prefix_router
