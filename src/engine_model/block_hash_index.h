// BlockHashIndex: the KV cache's map from a registered block hash to the block holding it.
//
// An open-addressing table with linear probing, sized once for the cache's capacity (at most
// one entry per block) at a load factor of at most 1/2, so lookups touch one or two cache
// lines and nothing is allocated after construction. std::unordered_map spent a node
// allocation per registered block and a pointer chase per lookup, which dominated the
// simulator's profile. Keys are XXH3 outputs, already uniform, so their low bits index the
// table directly. Erase uses backward-shift deletion (no tombstones), so probe sequences stay
// short however long the cache churns.
//
// Thread-safety: none; owned by one KvCache.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace prefix_router::engine_model {

class BlockHashIndex {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  explicit BlockHashIndex(uint32_t max_entries)
      : slots_(std::bit_ceil(std::max<size_t>(2 * static_cast<size_t>(max_entries), 8))), mask_(slots_.size() - 1) {}

  // The value stored for `hash`, or kAbsent.
  uint32_t Find(uint64_t hash) const {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value == kAbsent) return kAbsent;
      if (s.key == hash) return s.value;
    }
  }
  bool Contains(uint64_t hash) const { return Find(hash) != kAbsent; }

  // Inserts hash -> value unless `hash` is present; returns whether it inserted.
  // REQUIRES: value != kAbsent; fewer than max_entries entries before the call.
  bool Insert(uint64_t hash, uint32_t value) {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value == kAbsent) {
        s = Slot{hash, value};
        ++size_;
        return true;
      }
      if (s.key == hash) return false;
    }
  }

  // Removes `hash` if present.
  void Erase(uint64_t hash) {
    size_t i = hash & mask_;
    while (true) {
      if (slots_[i].value == kAbsent) return;
      if (slots_[i].key == hash) break;
      i = (i + 1) & mask_;
    }
    // Backward shift: pull later entries of the cluster into the hole when their home slot
    // does not lie cyclically in (hole, their slot].
    for (size_t j = (i + 1) & mask_; slots_[j].value != kAbsent; j = (j + 1) & mask_) {
      const size_t home = slots_[j].key & mask_;
      const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = Slot{};
    --size_;
  }

  void Clear() {
    for (Slot& s : slots_) s = Slot{};
    size_ = 0;
  }

  size_t size() const { return size_; }

  // Calls f(hash, value) for every entry, in table order.
  template <typename F>
  void ForEach(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.value != kAbsent) f(s.key, s.value);
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    uint32_t value = kAbsent;
  };

  std::vector<Slot> slots_;
  size_t mask_;
  size_t size_ = 0;
};

}  // namespace prefix_router::engine_model
