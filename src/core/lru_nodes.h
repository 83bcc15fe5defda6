// Compaction of an intrusive LRU list kept in a vector of nodes (core/block_index.h,
// core/kv_index.h): each node links to its `newer` and `older` neighbours by index, free slots
// are reused, and an instance that shrank can give back the vector's capacity by renumbering
// its live nodes densely.
//
// Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace prefix_router::lru_nodes {

inline constexpr uint32_t kNone = UINT32_MAX;

// Renumbers the `live` nodes reachable from `oldest` densely, oldest first, keeping their order,
// into a vector with a quarter of headroom; clears `free`. Returns old number -> new number
// (kNone for slots that were free), for the caller's maps that point at nodes.
template <typename Node>
std::vector<uint32_t> Compact(std::vector<Node>& nodes, std::vector<uint32_t>& free, uint32_t& oldest, uint32_t& newest,
                              size_t live) {
  std::vector<uint32_t> renumbered(nodes.size(), kNone);
  std::vector<Node> out;
  out.reserve(live + live / 4 + 16);
  for (uint32_t n = oldest; n != kNone; n = nodes[n].newer) {
    renumbered[n] = static_cast<uint32_t>(out.size());
    out.push_back(nodes[n]);
  }
  const uint32_t size = static_cast<uint32_t>(out.size());
  for (uint32_t k = 0; k < size; ++k) {
    out[k].older = k == 0 ? kNone : k - 1;
    out[k].newer = k + 1 == size ? kNone : k + 1;
  }
  oldest = size == 0 ? kNone : 0;
  newest = size == 0 ? kNone : size - 1;
  nodes = std::move(out);
  free.clear();
  free.shrink_to_fit();
  return renumbered;
}

}  // namespace prefix_router::lru_nodes
