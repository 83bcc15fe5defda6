// HolderLists: for each chain's first block, the instances that hold it (core/block_index.h,
// core/kv_index.h, kv-aware's recent dispatches). A block's hash depends on every block before
// it, so a first block's hash is only ever a first block's: the instances listed under a
// request's first block are the only ones that can match any of the request, and a decision
// over 10,000 instances looks those few up instead of every instance.
//
// An instance may be listed more than once under one block (kv-aware's recent chains add one
// entry per ring slot); Drop removes one entry. Memory is counted as the containers hold it
// (bytes(), kept up to date per change), for the indexes' byte bounds.
//
// Thread-safety: none; the owning index holds its lock around every call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/heap_bytes.h"

namespace prefix_router {

class HolderLists {
 public:
  void Add(uint64_t block, uint64_t seed) {
    std::vector<uint64_t>& seeds = lists_[block];
    const size_t before = heap_bytes::VectorBytes(seeds);
    seeds.push_back(seed);
    list_bytes_ += heap_bytes::VectorBytes(seeds) - before;
  }

  // Removes one entry of `seed` under `block`, if there is one.
  void Drop(uint64_t block, uint64_t seed) {
    if (lists_.empty()) return;
    auto it = lists_.find(block);
    if (it == lists_.end()) return;
    std::vector<uint64_t>& seeds = it->second;
    auto pos = std::find(seeds.begin(), seeds.end(), seed);
    if (pos == seeds.end()) return;
    *pos = seeds.back();
    seeds.pop_back();
    if (seeds.empty()) {
      list_bytes_ -= heap_bytes::VectorBytes(seeds);
      lists_.erase(it);
    }
  }

  // The instances listed under `block`, in no particular order (valid until the next change).
  std::span<const uint64_t> Of(uint64_t block) const {
    auto it = lists_.find(block);
    if (it == lists_.end()) return {};
    return it->second;
  }

  bool empty() const { return lists_.empty(); }
  // The map's nodes and buckets and every list's capacity.
  size_t bytes() const { return heap_bytes::MapBytes(lists_) + list_bytes_; }

 private:
  std::unordered_map<uint64_t, std::vector<uint64_t>> lists_;
  size_t list_bytes_ = 0;  // the lists' capacities (VectorBytes)
};

}  // namespace prefix_router
